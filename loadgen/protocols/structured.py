"""Structured output (``workload.response_format``): the request's field in each API's form, and the check of
each answer: did it parse as JSON (``json_valid``), and did it match the schema (``schema_valid``, for a
``json_schema`` format). A check is 1 (yes), 0 (no) or -1 (not checked: no format, no answer, or no schema)."""

from __future__ import annotations

import json
from typing import Callable

from loadgen.scenario.json_schema import mismatch
from loadgen.scenario.media_model import ResponseFormat

__all__ = ["Checker", "answer_checker", "format_fields"]

#: answer text (None: no answer) -> (json_valid, schema_valid)
Checker = Callable[[str | None], tuple[int, int]]


def format_fields(fmt: ResponseFormat, style: str) -> dict:
    """The request fields of ``fmt``: chat's ``response_format``, or Responses' ``text.format``."""
    if style == "openai-responses":
        inner = {"type": fmt.type}
        if fmt.json_schema is not None:
            inner.update({"name": fmt.json_schema.get("name", "answer"), "schema": fmt.json_schema["schema"]})
            if "strict" in fmt.json_schema:
                inner["strict"] = fmt.json_schema["strict"]
        return {"text": {"format": inner}}
    return {"response_format": fmt.model_dump(exclude_none=True)}


def answer_checker(fmt: ResponseFormat | None) -> Checker | None:
    """What checks an answer against ``fmt`` (None without a format)."""
    if fmt is None:
        return None
    schema = fmt.answer_schema
    unchecked = -1 if schema is None else 0

    def check(text: str | None) -> tuple[int, int]:
        if text is None:
            return -1, -1
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return 0, unchecked
        return 1, (-1 if schema is None else int(mismatch(value, schema) is None))

    return check
