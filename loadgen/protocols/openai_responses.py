"""The OpenAI Responses protocol over HTTP.

**openai-responses** (``POST {base}/responses``): ``response.output_text.delta``,
``response.refusal.delta`` and ``response.function_call_arguments.delta`` are answer chunks,
``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta`` reasoning;
``response.completed`` or ``response.incomplete`` end the stream and carry ``response.usage``
(``input_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``); ``response.failed`` and
``error`` are ``bad_stream``.
"""

from __future__ import annotations

import json

from loadgen.protocols.base import ResponseHandler
from loadgen.protocols.media import messages_with_images
from loadgen.protocols.shared import (
    EventStreamHandler,
    JsonApiProtocol,
    JsonBodyHandler,
    as_int,
    output_from_usage,
    tool_call_token,
    whole_tool_calls,
)
from loadgen.protocols.structured import Checker, answer_checker
from loadgen.records.schema import Outcome
from loadgen.scenario.prompts import Prompt

__all__ = ["ResponsesProtocol"]

_ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta",
                            "response.function_call_arguments.delta"})
_REASONING_DELTAS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})


def _responses_usage(handler, out: Outcome, usage) -> None:
    if not isinstance(usage, dict):
        return
    it, ot = as_int(usage.get("input_tokens")), as_int(usage.get("output_tokens"))
    if it is not None:
        out.prompt_tokens = it
    if ot is not None:
        output_from_usage(out, ot)
    details = usage.get("output_tokens_details")
    rt = as_int(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    if rt is not None:
        if handler is None:
            out.reasoning_tokens = rt
        else:
            handler.reasoning_from_usage(out, rt)


class ResponsesStream(EventStreamHandler):
    __slots__ = ("_text", "_check")
    end_name = "response.completed"

    def __init__(self, max_event_bytes: int, check: Checker | None = None):
        super().__init__(max_event_bytes)
        self._check = check  # structured output: the answer's text is kept and checked at the end
        self._text: list[str] | None = [] if check is not None else None

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        kind = obj.get("type")
        if kind in _ANSWER_DELTAS:
            if obj.get("delta"):
                self.token(out, now, True)
                if self._text is not None and kind == "response.output_text.delta":
                    self._text.append(str(obj["delta"]))
                if kind == "response.function_call_arguments.delta":
                    tool_call_token(out, now, obj.get("output_index", 0), True)
        elif kind == "response.output_item.added":
            item = obj.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                tool_call_token(out, now, obj.get("output_index", 0), False)
        elif kind in _REASONING_DELTAS:
            if obj.get("delta"):
                self.token(out, now, False)
        elif kind in ("response.completed", "response.incomplete"):
            _responses_usage(self, out, (obj.get("response") or {}).get("usage"))
            self.done = True
        elif kind in ("response.failed", "error"):
            return f"{kind}: " + json.dumps(obj.get("response", obj))[:200]
        return None

    def on_end(self, out: Outcome) -> None:
        super().on_end(out)
        if self._check is not None and not out.error:
            out.structured = self._check("".join(self._text) if self._text else None)


class ResponsesJson(JsonBodyHandler):
    __slots__ = ("_check",)
    api = "openai-responses"

    def __init__(self, check: Checker | None = None):
        super().__init__()
        self._check = check

    def read(self, obj: dict, out: Outcome) -> str | None:
        _responses_usage(None, out, obj.get("usage"))
        items = obj.get("output") if isinstance(obj.get("output"), list) else []
        whole_tool_calls(out, [i.get("arguments") for i in items
                               if isinstance(i, dict) and i.get("type") == "function_call"])
        if self._check is not None:
            texts = [c.get("text") for item in obj.get("output") or [] if isinstance(item, dict)
                     for c in item.get("content") or [] if isinstance(c, dict) and c.get("type") == "output_text"]
            text = "".join(t for t in texts if isinstance(t, str))
            out.structured = self._check(text or None)
        return None


class ResponsesProtocol(JsonApiProtocol):
    """``POST {base}/responses`` (OpenAI Responses API)."""

    name = "openai-responses"
    streams_tokens = True
    endpoint = "/responses"

    def _body(self, prompt: Prompt) -> dict:
        body: dict = {"model": self.model} if self.model is not None else {}
        if prompt.images:
            body["input"] = messages_with_images(prompt, self.name, self.image_detail)
        else:
            body["input"] = prompt.messages if prompt.messages is not None else prompt.text
        body["max_output_tokens"] = prompt.max_tokens
        body["stream"] = self.stream
        return body

    def handler(self) -> ResponseHandler:
        check = answer_checker(self.workload.response_format)
        return ResponsesStream(self.target.max_event_bytes, check) if self.stream else ResponsesJson(check)
