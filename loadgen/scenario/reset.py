"""``target.reset``: the server state latbench empties before each run, so that no run inherits the last one's.

``reset: prefix_cache`` (or ``{what: prefix_cache, url: ...}``) asks the engine to drop its prefix cache before
each run, each repetition of ``--repeat`` and each capacity step. One idea at two stages: this module (what a
scenario may ask) and :mod:`loadgen.run.reset` (the call).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BeforeValidator, Field, field_validator

from loadgen.scenario.strict import Strict
from loadgen.scenario.urls import url_problem

__all__ = ["RESETS", "Reset", "ResetField"]

#: What a reset may empty (one thing for now; the word is what the summary names).
RESETS = ("prefix_cache",)


class Reset(Strict):
    """The state to empty before each run, and (rarely needed) the endpoint that empties it. ``reset: prefix_cache``
    is short for ``reset: {what: prefix_cache}``."""

    what: Literal["prefix_cache"] = Field(
        examples=["prefix_cache"],
        description="prefix_cache: the engine's prefix (KV-block) cache, and the reference server's result and "
                    "image caches with it")
    url: Optional[str] = Field(None, examples=["http://127.0.0.1:8000/reset_prefix_cache"],
                               description="the endpoint latbench POSTs to; default: the engine's own, found from "
                                           "its /metrics names or /v1/models owned_by (vLLM /reset_prefix_cache, "
                                           "SGLang /flush_cache, the reference server /reset_prefix_cache) at "
                                           "the server's root")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        problem = url_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return v


def _short(v: Any) -> Any:
    return {"what": v} if isinstance(v, str) else v


ResetField = Annotated[Reset, BeforeValidator(_short)]
