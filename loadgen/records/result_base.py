"""What every result model is (:mod:`loadgen.records.results`): a JSON object of a result file, its named fields
typed and any other key kept, dumped as given (the keys it was given, in their order); and a whole result file,
with its ``schema_version``. ``Num``: a number as a result file carries it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from loadgen.records.definitions import SCHEMA_VERSION

#: A number as a result file carries it (json_num: NaN is null, an infinity is a string).
Num = int | float | Literal["inf", "-inf"] | None


class ResultModel(BaseModel):
    """A JSON object of a result file: named fields typed, any other key kept as it is."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler):
        # pydantic dumps named fields first, extras after; the file keeps the order its writer gave the keys
        obj = handler(data)
        if isinstance(data, dict):
            obj._order = [str(k) for k in data]
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        # a key set after construction is written after the ones given, in the order they were set
        super().__setattr__(name, value)
        if not name.startswith("_") and name not in self._order:
            self._order.append(name)

    def to_json(self) -> dict[str, Any]:
        """The object as written: the keys it was given (named or extra), in the order given, nothing added by
        defaults (a key set afterwards comes last, in the order set)."""
        given = self.model_fields_set | set(self.__pydantic_extra__ or ())
        keys = [k for k in dict.fromkeys([*self._order, *sorted(given)]) if k in given]
        return {k: _plain(getattr(self, k)) for k in keys}


def _plain(v: Any) -> Any:
    if isinstance(v, ResultModel):
        return v.to_json()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


class ResultFile(ResultModel):
    """A whole result file: every one carries ``schema_version`` (absent from files written before 0.2)."""

    schema_version: int = SCHEMA_VERSION
