"""The Anthropic Messages protocol over HTTP.

**anthropic-messages** (``POST {base}/messages``, ``anthropic-version: 2023-06-01`` unless the target sets
it; the key goes in the target's ``x-api-key`` header). Streams are typed events: ``message_start``
(its ``message.usage``: ``input_tokens`` plus cache creation and cache read tokens is ``prompt_tokens``),
``content_block_delta`` (a token chunk: ``text_delta`` and ``input_json_delta`` are answer,
``thinking_delta`` reasoning), ``message_delta`` (``usage.output_tokens``, cumulative: the answer's
length), ``message_stop`` (the end; without it the stream is ``bad_stream``), ``error``. A system
message of a dataset goes to the top-level ``system`` field, as the API wants.
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
from loadgen.records.schema import Outcome
from loadgen.scenario.prompts import Prompt

__all__ = ["AnthropicProtocol"]

ANTHROPIC_VERSION = "2023-06-01"


def _anthropic_usage(out: Outcome, usage) -> None:
    if not isinstance(usage, dict):
        return
    parts = [as_int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")]
    if parts[0] is not None:
        out.prompt_tokens = sum(p for p in parts if p is not None)
    ot = as_int(usage.get("output_tokens"))
    if ot is not None:
        output_from_usage(out, ot)


class AnthropicStream(EventStreamHandler):
    __slots__ = ()
    end_name = "message_stop"

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                self.token(out, now, True)
            elif dtype == "input_json_delta" and delta.get("partial_json"):
                self.token(out, now, True)
                tool_call_token(out, now, obj.get("index", 0), True)
            elif dtype == "thinking_delta" and delta.get("thinking"):
                self.token(out, now, False)
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                tool_call_token(out, now, obj.get("index", 0), False)
        elif kind == "message_start":
            usage = (obj.get("message") or {}).get("usage")
            # message_start's output_tokens is a placeholder (message_delta says): its input counts only
            _anthropic_usage(out, {k: v for k, v in usage.items() if k != "output_tokens"}
                             if isinstance(usage, dict) else None)
        elif kind == "message_delta":
            _anthropic_usage(out, obj.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            return "error in stream: " + json.dumps(obj.get("error"))
        return None


class AnthropicJson(JsonBodyHandler):
    __slots__ = ()
    api = "anthropic-messages"

    def read(self, obj: dict, out: Outcome) -> str | None:
        _anthropic_usage(out, obj.get("usage"))
        content = obj.get("content") if isinstance(obj.get("content"), list) else []
        whole_tool_calls(out, [b.get("input") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"])
        return None


class AnthropicProtocol(JsonApiProtocol):
    """``POST {base}/messages`` (Anthropic Messages API)."""

    name = "anthropic-messages"
    streams_tokens = True
    endpoint = "/messages"
    extra_headers = {"anthropic-version": ANTHROPIC_VERSION}

    def _body(self, prompt: Prompt) -> dict:
        body: dict = {"model": self.model} if self.model is not None else {}
        body["max_tokens"] = prompt.max_tokens
        messages = prompt.messages if prompt.messages is not None else [{"role": "user", "content": prompt.text}]
        if prompt.images:
            messages = messages_with_images(prompt, self.name)
        system = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        if system:
            body["system"] = "\n".join(str(s) for s in system)
            messages = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
        body["messages"] = messages
        body["stream"] = self.stream
        return body

    def handler(self) -> ResponseHandler:
        return AnthropicStream(self.target.max_event_bytes) if self.stream else AnthropicJson()
