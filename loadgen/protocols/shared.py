"""What the protocol modules share: request helpers (headers, URLs, JSON encoding), a JSON-body request base, and the
handlers of a stream of JSON events and of a JSON body.

:func:`target_headers`, :func:`base_url_of`, :func:`path_of` and :data:`dumps` build every protocol's requests;
:class:`JsonApiProtocol` is the request side of the APIs that POST a JSON body depending on the prompt alone
(Anthropic Messages, OpenAI Responses, rerank).

:class:`EventStreamHandler` reads a server-sent-event stream whose events are JSON objects and leaves their
meaning to :meth:`EventStreamHandler.on_event`; it records token chunks the one way every protocol must
(:meth:`EventStreamHandler.token`): the first of any kind sets ``first_token``, the first answer (not
reasoning) ``first_answer``, each one's arrival goes into ``token_times``. :class:`JsonBodyHandler` reads a
whole JSON body (bounded), judges its shape (:mod:`loadgen.protocols.shape`) and hands the parsed object to
:meth:`JsonBodyHandler.read`.

Failures follow the OpenAI handlers (:mod:`loadgen.protocols.openai`): ``bad_stream`` for a stream that breaks
its protocol (an error event, a data line that is not JSON, no end event when the protocol has one),
``bad_response`` for a body that is not what the protocol expects; an HTTP error status keeps its class.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler, StopResponse, keep_error_body
from loadgen.protocols.media import counts_of
from loadgen.protocols.shape import BodyReader, shape_problem
from loadgen.protocols.sse import MAX_EVENT_BYTES, SSEParser
from loadgen.protocols.structured import format_fields
from loadgen.protocols.tools import tool_fields
from loadgen.records.schema import Outcome, ToolCalls
from loadgen.scenario.model import Target, Workload, is_client_header
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.urls import join_url

DETAIL = 200  # characters of a server's message kept in error_detail

#: compact JSON, non-ASCII kept as is: every protocol's request bodies
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

# --- requests ------------------------------------------------------------------------------------


def target_headers(base: dict[str, str], target: Target) -> tuple[tuple[str, str], ...]:
    """Protocol headers, then the target's own; a target header replaces one of the same name. Headers the client
    writes itself (Content-Length, Transfer-Encoding...: the scenario refuses them) are never passed on."""
    own = {k.lower() for k in target.headers}
    return (tuple((k, v) for k, v in base.items() if k.lower() not in own)
            + tuple((k, v) for k, v in target.headers.items() if not is_client_header(k)))


def base_url_of(target: Target, base_url: str | None) -> str:
    url = base_url if base_url is not None else target.url
    if not url:
        raise ValueError("the target has no URL yet: start it and pass base_url")
    return url


def path_of(url: str) -> str:
    """Path and query of an absolute URL (the path '/' when it has none)."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class JsonApiProtocol(ApiProtocol):
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
        self.image_detail = workload.images.detail if workload.images is not None else None
        # workload.tools and workload.response_format as this API's request fields
        self.fields = tool_fields(workload.tools, self.name) if workload.tools is not None else {}
        if workload.response_format is not None:  # structured output (openai-responses: text.format)
            self.fields = {**self.fields, **format_fields(workload.response_format, self.name)}
        self.workload = workload

    def _body(self, prompt: Prompt) -> dict:
        raise NotImplementedError

    def build(self, seq: int, prompt: Prompt) -> Request:
        tools = len(self.fields.get("tools", ()))
        counts = counts_of(prompt, counted=False, tools=tools) if prompt.images or tools else None
        body = self._body(prompt)
        body.update(self.fields)
        return Request("POST", self.url, self.path, self.headers, dumps(body).encode(), self.stream, counts)


# --- handlers ------------------------------------------------------------------------------------


class EventStreamHandler(ResponseHandler):
    """Reads an SSE stream of JSON events. Subclasses implement :meth:`on_event`; ``end_event`` False when
    the protocol has no end marker (the stream simply closes)."""

    __slots__ = ("_sse", "_live", "done", "_count", "_answered", "_reasoning", "_reasoning_usage")

    end_event = True  # the protocol ends a complete stream with an event of its own ([DONE], message_stop...)
    end_name = "its end event"

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._sse = SSEParser(max_event_bytes)  # a line or event past it: bad_stream, and no more is read
        self._live = True
        self.done = False  # the end event came: nothing after it counts
        self._count = 0
        self._answered = False
        self._reasoning = 0
        self._reasoning_usage = False

    def on_status(self, status: int, out: Outcome) -> None:
        ResponseHandler.on_status(self, status, out)
        self._live = not out.error and status < 300  # a redirect is http_3xx, as an error is its class

    def fail(self, out: Outcome, detail: str) -> None:
        out.error = "bad_stream"
        out.error_detail = detail[:DETAIL]
        self._live = False

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if not self._live:
            if out.status >= 300:
                keep_error_body(data, out)  # what the server said, for -v
            return
        events = self._sse.feed(data)
        if self._sse.overflow:
            detail = f"an SSE line or event over {self._sse.max_bytes} bytes (target.max_event_bytes)"
            self.fail(out, detail)
            raise StopResponse(detail)
        if self._sse.error is not None:
            return self.fail(out, "event: error: " + self._sse.error.decode("utf-8", "replace"))
        for ev in events:
            if self.done:
                continue
            if ev == b"[DONE]":
                self.done = True
                continue
            try:
                obj = json.loads(ev)
            except ValueError:
                return self.fail(out, "not JSON: " + ev.decode("utf-8", "replace"))
            if not isinstance(obj, dict):
                return self.fail(out, "not a JSON object: " + ev.decode("utf-8", "replace"))
            problem = self.on_event(obj, now, out)
            if problem:
                return self.fail(out, problem)

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        """Read one event; return a description of what is wrong with the stream, or None."""
        raise NotImplementedError

    def token(self, out: Outcome, now: float, answer: bool, n: int | None = None) -> None:
        """A chunk that carried tokens arrived: an answer (content, tool call) or reasoning; ``n`` the tokens it
        carried when the server said (else unknown: see RecordBuffer's chunk_tokens)."""
        if self._count == 0:
            out.start_tokens(now)
        self._count += 1
        out.token_times.append(now)
        if n is not None:
            out.chunk_tokens.append(n)
        if answer:
            if not self._answered:
                self._answered = True
                out.first_answer = now
        else:
            self._reasoning += 1 if n is None else n

    def reasoning_from_usage(self, out: Outcome, tokens: int) -> None:
        out.reasoning_tokens = tokens
        self._reasoning_usage = True

    def on_end(self, out: Outcome) -> None:
        if not counted_by_server(out):
            out.output_tokens, out.output_tokens_source = self._count, "chunks"
        if not self._reasoning_usage:
            out.reasoning_tokens = self._reasoning
        if self._live and self.end_event and not self.done:
            self.fail(out, f"the stream ended without {self.end_name}")


class JsonBodyHandler(ResponseHandler):
    """Reads a JSON body as it arrives (bounded: :class:`~loadgen.protocols.shape.BodyReader`), judges it as an
    answer of ``api`` (:func:`~loadgen.protocols.shape.shape_problem`, with ``answer_key`` when set) and hands
    the parsed object to :meth:`read` at its end."""

    __slots__ = ("_reader", "_live")

    api = ""  # the API whose answer this is (see loadgen.protocols.shape)
    answer_key: str | None = None  # replaces the API's answer key (a tensor named by the target)

    def __init__(self) -> None:
        self._reader = BodyReader()
        self._live = True

    def on_status(self, status: int, out: Outcome) -> None:
        ResponseHandler.on_status(self, status, out)
        self._live = not out.error and status < 300

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if not self._live and out.status >= 300:
            keep_error_body(data, out)
        if self._live:
            self._reader.feed(data)

    def on_end(self, out: Outcome) -> None:
        if not self._live:
            return
        obj, problem = self._reader.result()
        problem = problem or shape_problem(self.api, obj, self.answer_key) or self.read(obj, out)
        if problem:
            bad_response(out, problem)

    def read(self, obj: dict, out: Outcome) -> str | None:
        """Read a body of the API's shape (a value too long to parse is a :class:`~loadgen.protocols.shape.Large`);
        return what else is wrong with it, or None."""
        raise NotImplementedError


def tool_call_token(out: Outcome, now: float, index, arguments: bool) -> None:
    """A stream event of tool call ``index``: its start (``arguments`` False) or a fragment of its arguments (a
    token). The first sets the tool calls' first time."""
    tc = out.tool_calls
    if tc is None:
        tc = out.tool_calls = ToolCalls(first=now, indices=set())
    if index not in tc.indices:
        tc.indices.add(index)
        tc.count += 1
    if arguments:
        tc.tokens += 1


def whole_tool_calls(out: Outcome, arguments: list) -> None:
    """A whole (not streamed) answer's tool calls, given as each call's arguments (a string or a JSON value):
    counted, their tokens approximated from their text (4 characters a token)."""
    if arguments:
        texts = [a if isinstance(a, str) else json.dumps(a) for a in arguments]
        out.tool_calls = ToolCalls(count=len(texts), tokens=sum(-(-len(t) // 4) for t in texts if t))


def output_from_usage(out: Outcome, tokens: int) -> None:
    """The server counted the answer: ``tokens`` output tokens, from its usage (the one place that says so)."""
    out.output_tokens = tokens
    out.output_tokens_source = "usage"


def media_cache_from_usage(out: Outcome, usage: dict) -> None:
    """The images and audio clips of the request that the server's encoder cache held, where its usage says:
    ``prompt_tokens_details.media_cache_hits`` (chat) or ``input_token_details.media_cache_hits`` (transcriptions),
    as the reference server gives them. Unsaid, the record keeps -1."""
    details = usage.get("prompt_tokens_details", usage.get("input_token_details"))
    hits = as_int(details.get("media_cache_hits")) if isinstance(details, dict) else None
    if hits is not None:
        out.media_cache_hits = min(hits, 32767)  # an int16 column


def counted_by_server(out: Outcome) -> bool:
    """Whether the output tokens came from the server's usage (else latbench counts token chunks)."""
    return out.output_tokens_source == "usage"


def bad_response(out: Outcome, detail: str) -> None:
    out.error = "bad_response"
    out.error_detail = detail[:DETAIL]


COUNT_MAX = 2**31 - 1  # a token count's column is int32 (loadgen.records.schema)


def as_int(v) -> int | None:
    """A count the server gave: ``v`` when it is an int (not a bool) from 0 to ``COUNT_MAX``, else None (not a
    count: the request is counted as if the server had given none, never lost to a value its record cannot hold)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= COUNT_MAX else None
