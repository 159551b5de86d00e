"""More LLM APIs over HTTP: Anthropic Messages, OpenAI Responses, and rerank.

- **anthropic-messages** (``POST {base}/messages``, ``anthropic-version: 2023-06-01`` unless the target sets
  it; the key goes in the target's ``x-api-key`` header). Streams are typed events: ``message_start``
  (its ``message.usage``: ``input_tokens`` plus cache creation and cache read tokens is ``prompt_tokens``),
  ``content_block_delta`` (a token chunk: ``text_delta`` and ``input_json_delta`` are answer,
  ``thinking_delta`` reasoning), ``message_delta`` (``usage.output_tokens``, cumulative: the answer's
  length), ``message_stop`` (the end; without it the stream is ``bad_stream``), ``error``. A system
  message of a dataset goes to the top-level ``system`` field, as the API wants.
- **openai-responses** (``POST {base}/responses``): ``response.output_text.delta``,
  ``response.refusal.delta`` and ``response.function_call_arguments.delta`` are answer chunks,
  ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta`` reasoning;
  ``response.completed`` or ``response.incomplete`` end the stream and carry ``response.usage``
  (``input_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``); ``response.failed`` and
  ``error`` are ``bad_stream``.
- **rerank** (``POST {base}/rerank``: ``/rerank`` or ``/v1/rerank`` as vLLM, Cohere and Jina serve it, by the
  base URL): ``{model, query, documents}``. The prompt is cut into ``target.documents`` documents (default 8)
  and its first words are the query, so ``input_tokens`` sizes the whole request. Never streamed; success
  needs a ``results`` list; ``prompt_tokens`` from ``usage.prompt_tokens`` or ``usage.total_tokens``.
"""

from __future__ import annotations

import json

from loadgen.protocols.apis import base_url_of, path_of, target_headers
from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler
from loadgen.protocols.streaming import EventStreamHandler, JsonBodyHandler, as_int, output_from_usage
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.urls import join_url

__all__ = ["AnthropicProtocol", "ResponsesProtocol", "RerankProtocol"]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
ANTHROPIC_VERSION = "2023-06-01"


class _JsonApi(ApiProtocol):
    """POST a JSON body to ``{base}{endpoint}``; the body depends on the prompt alone."""

    endpoint = ""
    per_request = False  # built once per prompt (loadgen.protocols.reqcache)
    extra_headers: dict[str, str] = {}

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        self.url = join_url(base_url_of(target, base_url), self.endpoint)
        self.path = path_of(self.url)
        self.stream = target.stream
        accept = "text/event-stream" if self.stream else "application/json"
        self.headers = target_headers({"Content-Type": "application/json", "Accept": accept, **self.extra_headers},
                                      target)
        self.model = model
        self.target = target

    def _body(self, prompt: Prompt) -> dict:
        raise NotImplementedError

    def build(self, seq: int, prompt: Prompt) -> Request:
        return Request("POST", self.url, self.path, self.headers, _dumps(self._body(prompt)).encode(), self.stream)


# --- Anthropic Messages ----------------------------------------------------------------------------


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
            elif dtype == "thinking_delta" and delta.get("thinking"):
                self.token(out, now, False)
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
        return None


class AnthropicProtocol(_JsonApi):
    """``POST {base}/messages`` (Anthropic Messages API)."""

    name = "anthropic-messages"
    endpoint = "/messages"
    extra_headers = {"anthropic-version": ANTHROPIC_VERSION}

    def _body(self, prompt: Prompt) -> dict:
        body: dict = {"model": self.model} if self.model is not None else {}
        body["max_tokens"] = prompt.max_tokens
        messages = prompt.messages if prompt.messages is not None else [{"role": "user", "content": prompt.text}]
        system = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        if system:
            body["system"] = "\n".join(str(s) for s in system)
            messages = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
        body["messages"] = messages
        body["stream"] = self.stream
        return body

    def handler(self) -> ResponseHandler:
        return AnthropicStream(self.target.max_event_bytes) if self.stream else AnthropicJson()


# --- OpenAI Responses ------------------------------------------------------------------------------

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
    __slots__ = ()
    end_name = "response.completed"

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        kind = obj.get("type")
        if kind in _ANSWER_DELTAS:
            if obj.get("delta"):
                self.token(out, now, True)
        elif kind in _REASONING_DELTAS:
            if obj.get("delta"):
                self.token(out, now, False)
        elif kind in ("response.completed", "response.incomplete"):
            _responses_usage(self, out, (obj.get("response") or {}).get("usage"))
            self.done = True
        elif kind in ("response.failed", "error"):
            return f"{kind}: " + json.dumps(obj.get("response", obj))[:200]
        return None


class ResponsesJson(JsonBodyHandler):
    __slots__ = ()
    api = "openai-responses"

    def read(self, obj: dict, out: Outcome) -> str | None:
        _responses_usage(None, out, obj.get("usage"))
        return None


class ResponsesProtocol(_JsonApi):
    """``POST {base}/responses`` (OpenAI Responses API)."""

    name = "openai-responses"
    endpoint = "/responses"

    def _body(self, prompt: Prompt) -> dict:
        body: dict = {"model": self.model} if self.model is not None else {}
        body["input"] = prompt.messages if prompt.messages is not None else prompt.text
        body["max_output_tokens"] = prompt.max_tokens
        body["stream"] = self.stream
        return body

    def handler(self) -> ResponseHandler:
        return ResponsesStream(self.target.max_event_bytes) if self.stream else ResponsesJson()


# --- rerank ----------------------------------------------------------------------------------------

QUERY_WORDS = 8


class RerankJson(JsonBodyHandler):
    __slots__ = ()
    api = "rerank"

    def read(self, obj: dict, out: Outcome) -> str | None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            pt = as_int(usage.get("prompt_tokens"))
            pt = pt if pt is not None else as_int(usage.get("total_tokens"))
            if pt is not None:
                out.prompt_tokens = pt
        return None


class RerankProtocol(_JsonApi):
    """``POST {base}/rerank``: the prompt cut into ``target.documents`` documents, its first words the query."""

    name = "rerank"
    endpoint = "/rerank"

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        super().__init__(target.model_copy(update={"stream": False}), workload, model, base_url)
        self.documents = target.documents or 8

    def _body(self, prompt: Prompt) -> dict:
        words = prompt.text.split()
        k = max(1, min(self.documents, len(words)))
        size = -(-len(words) // k) if words else 1
        docs = [" ".join(words[i : i + size]) for i in range(0, len(words), size)] or [prompt.text]
        body: dict = {"model": self.model} if self.model is not None else {}
        body["query"] = " ".join(words[:QUERY_WORDS]) or prompt.text
        body["documents"] = docs
        return body

    def handler(self) -> ResponseHandler:
        return RerankJson()
