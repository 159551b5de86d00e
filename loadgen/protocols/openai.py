"""The OpenAI chat and completions protocols: openai-chat and openai-completions (embeddings, whose base is
:class:`OpenAIProtocol`, are :mod:`loadgen.protocols.retrieval`; plain http is :mod:`loadgen.protocols.plain_http`).

Each turns ``(seq, prompt)`` into a pre-encoded :class:`~loadgen.protocols.base.Request` and gives one
:class:`~loadgen.protocols.base.ResponseHandler` per request, which reads the body as it arrives and writes
what it means into the :class:`~loadgen.records.schema.Outcome`:

- **streams** (``stream: true``): the first chunk carrying non-empty ``content``, ``reasoning_content``,
  ``reasoning`` or ``tool_calls`` (chat ``choices[].delta``) or ``text`` (completions ``choices[].text``)
  sets ``first_token``; every such chunk's arrival time is kept in ``token_times``. The first one with an
  answer (``content``, ``tool_calls`` or ``text``: not reasoning alone) sets ``first_answer``; reasoning
  tokens are the usage's ``completion_tokens_details.reasoning_tokens`` when given, else counted in the
  reasoning-only chunks. A role-only or empty
  delta and a usage-only chunk are not tokens. ``output_tokens`` and ``prompt_tokens`` come from the
  ``usage`` chunk when the server sends one (``output_tokens_source`` "usage"); else output_tokens is
  the streamed text counted with the workload's tokenizer ("tokenizer"), or without one the count of
  token chunks ("chunks"). A token chunk that carries its own ``usage`` (vLLM's ``continuous_usage_stats``,
  asked for with ``target.continuous_usage_stats``) says how many tokens it carried: ``chunk_tokens``.
  ``bad_stream``: no ``[DONE]`` before the body ended, an error object or
  ``event: error`` in the stream, a data line that is not JSON, or a line or event over
  ``target.max_event_bytes`` (the stream is then not read further: its connection is closed).
- **JSON bodies**: read as they arrive and judged at their end by :mod:`loadgen.protocols.shape` (at every size:
  parsed up to 1 MiB, scanned in bounded memory past it); tokens from ``usage``, else the answer's text counted
  with the tokenizer when there is one. ``bad_response``: not JSON (an HTML page, a body cut short), an ``error``
  object, no ``choices`` (chat, completions) or no ``data`` list (embeddings).

Request bodies: latbench's fields (model, messages/prompt/input, max_tokens, stream, stream_options), then
``target.extra_body`` and a dataset entry's own ``extra_body`` merged over it (neither may set latbench's
fields: the scenario model refuses them). Each Request carries its prompt's own token count
(:class:`~loadgen.records.schema.PromptCounts`), which the record keeps beside the server's.

An HTTP error status (>= 400) or a redirect (3xx, never followed) keeps the status's error class; its body is
counted, not parsed.
"""

from __future__ import annotations

import json

from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler, StopResponse, keep_error_body
from loadgen.protocols.media import counts_of, messages_with_images
from loadgen.protocols.shape import BodyReader, shape_problem
from loadgen.protocols.shared import as_int, base_url_of, dumps, media_cache_from_usage, path_of, target_headers
from loadgen.protocols.sse import MAX_EVENT_BYTES, SSEParser
from loadgen.protocols.structured import Checker, answer_checker, format_fields
from loadgen.protocols.tools import tool_fields
from loadgen.records.schema import Outcome, PromptCounts, ToolCalls
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt, approx_tokens
from loadgen.scenario.tokenizer import Tokenizer
from loadgen.scenario.urls import join_url

__all__ = ["ChatProtocol", "CompletionsProtocol", "JsonHandler", "OpenAIProtocol", "StreamHandler"]

_DETAIL = 200  # characters of a server's message kept in error_detail

# json's C scanner without json.loads's Python layers (encoding sniffing of bytes, whitespace regexes): a third
# of the cost of a stream chunk. StopIteration means no JSON value starts at 0; json.loads then says why.
_scan = json.JSONDecoder().scan_once


def _event_json(ev: bytes):
    """The JSON value of one event's data; ValueError when it is not JSON (as ``json.loads`` would say)."""
    try:
        text = ev.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None
    try:
        obj, end = _scan(text, 0)
    except StopIteration:  # leading whitespace, or not JSON: the slow path decides
        return json.loads(text)
    if end != len(text) and text[end:].strip():
        raise ValueError(f"extra data at {end}")
    return obj


def _usage(out: Outcome, usage: dict, output: bool = True) -> bool:
    """Read a usage object into ``out``; True when it counted reasoning tokens."""
    pt = as_int(usage.get("prompt_tokens"))
    if pt is not None:
        out.prompt_tokens = pt
    media_cache_from_usage(out, usage)
    if output:
        ct = as_int(usage.get("completion_tokens"))
        if ct is not None:
            out.output_tokens = ct
            out.output_tokens_source = "usage"
        details = usage.get("completion_tokens_details")
        rt = as_int(details.get("reasoning_tokens")) if isinstance(details, dict) else None
        if rt is not None:
            out.reasoning_tokens = rt
            return True
    return False


def _delta_text(choices, chat: bool) -> str:
    """The text of one stream chunk's choices: content and reasoning (chat) or text (completions)."""
    parts = []
    for c in choices:
        if not isinstance(c, dict):
            continue
        d = c.get("delta") if chat else c
        if isinstance(d, dict):
            for key in ("reasoning_content", "reasoning", "content") if chat else ("text",):
                v = d.get(key)
                if isinstance(v, str):
                    parts.append(v)
    return "".join(parts)


def _answer_delta(choices, chat: bool) -> str:
    """The answer text of one stream chunk's choices: content (chat) or text (completions), not reasoning."""
    parts = []
    for c in choices:
        if isinstance(c, dict):
            d = c.get("delta") if chat else c
            v = d.get("content" if chat else "text") if isinstance(d, dict) else None
            if isinstance(v, str):
                parts.append(v)
    return "".join(parts)


def tool_call_delta(calls, now: float, out: Outcome, keep: bool) -> None:
    """One stream chunk's ``delta.tool_calls``: the first sets the tool calls' first time; each new index is a
    call; each argument fragment is a token. ``keep``: each call's id, name and arguments are kept (a conversation
    answers them)."""
    tc = out.tool_calls
    if tc is None:
        tc = out.tool_calls = ToolCalls(first=now, calls={} if keep else None, indices=set())
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        index = call.get("index", 0)
        if index not in tc.indices:
            tc.indices.add(index)
            tc.count += 1
            if tc.calls is not None:
                tc.calls[index] = [call.get("id") or f"call_{index}", "", ""]
        fn = call.get("function")
        if isinstance(fn, dict):
            args = fn.get("arguments")
            if isinstance(args, str) and args:
                tc.tokens += 1
            if tc.calls is not None:
                slot = tc.calls[index]
                slot[1] += fn.get("name") if isinstance(fn.get("name"), str) else ""
                slot[2] += args if isinstance(args, str) else ""


def tool_calls_whole(calls, out: Outcome, keep: bool) -> None:
    """A whole (not streamed) answer's ``message.tool_calls``: counted, their arguments' tokens approximated."""
    calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    fns = [c.get("function") if isinstance(c.get("function"), dict) else {} for c in calls]
    args = [f.get("arguments") if isinstance(f.get("arguments"), str) else "" for f in fns]
    kept = {i: [c.get("id") or f"call_{i}", f.get("name") or "", a]
            for i, (c, f, a) in enumerate(zip(calls, fns, args))} if keep else None
    out.tool_calls = ToolCalls(count=len(calls), tokens=sum(approx_tokens(a) for a in args if a), calls=kept)


# --- handlers ------------------------------------------------------------------------------------

_ANSWER, _REASONING = 2, 1  # what a stream chunk carried


class StreamHandler(ResponseHandler):
    """Reads an OpenAI server-sent-event stream (chat or completions)."""

    __slots__ = ("_sse", "_live", "_done", "_count", "_chat", "_cum", "_answered", "_reasoning", "_reasoning_usage",
                 "_counter", "_text", "_answer", "_check")

    def __init__(self, chat: bool, counter=None, max_event_bytes: int = MAX_EVENT_BYTES, keep_answer: bool = False,
                 check: Checker | None = None):
        self._sse = SSEParser(max_event_bytes)
        self._live = True  # parsing: a success status and no protocol error yet
        self._done = False
        self._count = 0
        self._chat = chat
        self._cum = 0  # completion tokens the per-chunk usage counted so far
        self._answered = False  # an answer (not reasoning) token was seen
        self._reasoning = 0  # reasoning tokens counted in the stream (per-chunk usage, else one per chunk)
        self._reasoning_usage = False  # the usage counted them (completion_tokens_details.reasoning_tokens)
        self._counter = counter  # text -> tokens, when output is counted with a tokenizer
        self._text: list[str] = []
        self._answer: list[str] | None = [] if keep_answer else None  # the answer's text (conversations)
        self._check = check  # structured output: checks the answer at the end (keep_answer is then True)

    def on_status(self, status: int, out: Outcome) -> None:
        ResponseHandler.on_status(self, status, out)
        self._live = not out.error and status < 300

    def _fail(self, out: Outcome, detail: str) -> None:
        out.error = "bad_stream"
        out.error_detail = detail[:_DETAIL]
        self._live = False

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if not self._live:
            if out.status >= 300:
                keep_error_body(data, out)
            return
        events = self._sse.feed(data)
        if self._sse.overflow:
            detail = f"an SSE line or event over {self._sse.max_bytes} bytes (target.max_event_bytes)"
            self._fail(out, detail)
            raise StopResponse(detail)
        if self._sse.error is not None:
            return self._fail(out, "event: error: " + self._sse.error.decode("utf-8", "replace"))
        for ev in events:
            if self._done:
                continue  # after [DONE] nothing counts
            if ev == b"[DONE]":
                self._done = True
                continue
            try:
                obj = _event_json(ev)
            except ValueError:
                return self._fail(out, "not JSON: " + ev.decode("utf-8", "replace"))
            if not isinstance(obj, dict):
                return self._fail(out, "not a JSON object: " + ev.decode("utf-8", "replace"))
            if obj.get("error"):
                return self._fail(out, "error in stream: " + ev.decode("utf-8", "replace"))
            choices = obj.get("choices")
            usage = obj.get("usage")
            # the common chunk first (content in the first choice's delta), without _token_kind's loop
            if (self._chat and choices and type(choices) is list and type(c0 := choices[0]) is dict
                    and type(d := c0.get("delta")) is dict and d.get("content")):
                kind = _ANSWER
            else:  # anything else: reasoning, a tool call (parsed there, off the common path), text, nothing
                kind = self._token_kind(choices, now, out) if choices else 0
            if kind:
                if self._count == 0:
                    out.start_tokens(now)
                self._count += 1
                out.token_times.append(now)
                if self._counter is not None:
                    self._text.append(_delta_text(choices, self._chat))
                if self._answer is not None:
                    self._answer.append(_answer_delta(choices, self._chat))
                n = 1
                if usage:  # per-chunk usage (continuous_usage_stats): cumulative, so this chunk is the difference
                    ct = as_int(usage.get("completion_tokens"))
                    if ct is not None:
                        n = ct - self._cum
                        out.chunk_tokens.append(n)
                        self._cum = ct
                if kind == _ANSWER:
                    if self._answered is False:
                        self._answered = True
                        out.first_answer = now
                else:
                    self._reasoning += n
            if usage and _usage(out, usage):
                self._reasoning_usage = True

    def _token_kind(self, choices, now: float, out: Outcome) -> int:
        """_ANSWER when a choice carries content, a tool call or text; _REASONING when only reasoning; 0 none. A
        tool call's delta is read into ``out.tool_calls`` here."""
        kind = 0
        for c in choices:
            if not isinstance(c, dict):
                continue
            if self._chat:
                d = c.get("delta")
                if d:
                    calls = d.get("tool_calls")
                    if calls:
                        tool_call_delta(calls, now, out, self._answer is not None)
                        return _ANSWER
                    if d.get("content"):
                        return _ANSWER
                    if d.get("reasoning_content") or d.get("reasoning"):
                        kind = _REASONING
            elif c.get("text"):
                return _ANSWER
        return kind

    def on_end(self, out: Outcome) -> None:
        if out.output_tokens_source != "usage":
            if self._counter is not None:
                out.output_tokens, out.output_tokens_source = self._counter("".join(self._text)), "tokenizer"
            else:
                out.output_tokens, out.output_tokens_source = self._count, "chunks"
        if not self._reasoning_usage:
            out.reasoning_tokens = self._reasoning
        if self._answer is not None:
            out.answer = "".join(self._answer)
        if self._live and not self._done:
            self._fail(out, "the stream ended without [DONE]")
        if self._check is not None and not out.error:
            out.structured = self._check(out.answer if self._answered else None)


class JsonHandler(ResponseHandler):
    """Reads a whole JSON body as it arrives (bounded: :class:`~loadgen.protocols.shape.BodyReader`) and judges it
    as an answer of ``api`` (:func:`~loadgen.protocols.shape.shape_problem`)."""

    __slots__ = ("_reader", "_live", "_api", "_output", "_counter", "_keep", "_check")

    def __init__(self, api: str, output: bool, counter=None, keep_answer: bool = False, check: Checker | None = None):
        self._reader = BodyReader()
        self._live = True
        self._api = api  # openai-chat, openai-completions or embeddings
        self._output = output  # usage has completion_tokens
        self._counter = counter  # text -> tokens: counts the answer when the server sends no usage
        self._keep = keep_answer  # keep the answer's text in out.answer (conversations)
        self._check = check  # structured output: checks the answer

    def on_status(self, status: int, out: Outcome) -> None:
        ResponseHandler.on_status(self, status, out)
        self._live = not out.error and status < 300

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if not self._live:
            if out.status >= 300:
                keep_error_body(data, out)
            return
        self._reader.feed(data)

    def on_end(self, out: Outcome) -> None:
        if not self._live:
            return
        obj, problem = self._reader.result()
        problem = problem or shape_problem(self._api, obj)
        if problem:
            return self._bad(out, problem)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            _usage(out, usage, self._output)
        choices = obj.get("choices")
        if not isinstance(choices, list):  # embeddings, or an answer too long to parse (Large): no text to read
            return
        if self._output and self._counter is not None and out.output_tokens_source != "usage":
            out.output_tokens, out.output_tokens_source = self._counter(_answer_text(choices)), "tokenizer"
        if self._keep:
            out.answer = _answer_text(choices, reasoning=False)
        if self._check is not None:
            text = _answer_text(choices, reasoning=False)
            out.structured = self._check(text if text else None)
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        if isinstance(message, dict) and message.get("tool_calls"):
            tool_calls_whole(message["tool_calls"], out, self._keep)

    @staticmethod
    def _bad(out: Outcome, detail: str) -> None:
        out.error = "bad_response"
        out.error_detail = detail[:_DETAIL]


def _answer_text(choices: list, reasoning: bool = True) -> str:
    """The answer of a whole (not streamed) chat or completions body: message content (and reasoning, unless
    ``reasoning`` is False), or text."""
    parts = []
    for c in choices:
        if isinstance(c, dict):
            m = c.get("message")
            keys = ("reasoning_content", "reasoning", "content") if reasoning else ("content",)
            for v in ([m.get(k) for k in keys] if isinstance(m, dict) else [c.get("text")]):
                if isinstance(v, str):
                    parts.append(v)
    return "".join(parts)


# --- protocols -----------------------------------------------------------------------------------


class OpenAIProtocol(ApiProtocol):
    """The request side of the OpenAI APIs: ``POST {base}{endpoint}``, the body built by :meth:`_input`."""

    endpoint = ""
    per_request = False  # a request depends on its prompt alone: built once per prompt (loadgen.protocols.reqcache)
    streams_tokens = True

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None,
                 tokenizer: Tokenizer | None = None):
        self.url = join_url(base_url_of(target, base_url), self.endpoint)
        self.path = path_of(self.url)
        self.stream = target.stream
        self.max_event_bytes = target.max_event_bytes
        self.headers = target_headers(
            {"Content-Type": "application/json", "Accept": "text/event-stream" if self.stream else "application/json"},
            target,
        )
        # Fields every request shares, in the order they are sent.
        self.fixed: dict = {}
        if model is not None:
            self.fixed["model"] = model
        self.ignore_eos = workload.ignore_eos
        self.continuous_usage = target.continuous_usage_stats
        self.extra_body = target.extra_body
        # output is counted with the tokenizer when the server sends no usage (not with /tokenize: see tokenizer.py)
        self.counter = tokenizer.count if tokenizer is not None and tokenizer.counts_output else None
        # structured output: its field, and each answer checked (which needs the answer's text)
        self.check = answer_checker(workload.response_format)
        self.format_fields = format_fields(workload.response_format, "openai-chat") if self.check else {}
        # each conversation turn resends the answers before it; a structured answer is checked
        self.keep_answer = workload.conversations is not None or self.check is not None
        self.image_detail = workload.images.detail if workload.images is not None else None
        # workload.tools: its request fields (the chat API's; completions take none: the scenario refuses them)
        self.tool_fields = tool_fields(workload.tools, "openai-chat") if workload.tools is not None else {}
        self.tools = len(self.tool_fields.get("tools", ()))

    def _body(self, prompt: Prompt) -> dict:
        body = dict(self.fixed)
        self._input(body, prompt)
        body["max_tokens"] = prompt.max_tokens
        if self.stream:
            body["stream"] = True
            body["stream_options"] = ({"include_usage": True, "continuous_usage_stats": True}
                                      if self.continuous_usage else {"include_usage": True})
        else:
            body["stream"] = False
        if self.ignore_eos:
            body["ignore_eos"] = True
        return self._options(body, prompt)

    def _options(self, body: dict, prompt: Prompt) -> dict:
        """``workload.tools``, ``target.extra_body``, then the prompt's own, merged over latbench's fields (which
        neither may set)."""
        if self.tool_fields:
            body.update(self.tool_fields)
        if self.format_fields:
            body.update(self.format_fields)
        body.update(self.extra_body)
        if prompt.extra_body:
            body.update(prompt.extra_body)
        return body

    def _input(self, body: dict, prompt: Prompt) -> None:
        raise NotImplementedError

    def build(self, seq: int, prompt: Prompt) -> Request:
        counts = (PromptCounts(prompt.input_tokens, prompt.added_tokens, prompt.counted_by)
                  if not (prompt.images or prompt.audio or self.tools) else counts_of(prompt, tools=self.tools))
        return Request("POST", self.url, self.path, self.headers, dumps(self._body(prompt)).encode(), self.stream,
                       counts)


class ChatProtocol(OpenAIProtocol):
    """``POST {base}/chat/completions`` with ``messages`` (a text prompt is one user message)."""

    name = "openai-chat"
    endpoint = "/chat/completions"

    def _input(self, body: dict, prompt: Prompt) -> None:
        if prompt.images or prompt.audio:
            body["messages"] = messages_with_images(prompt, self.name, self.image_detail)
        else:
            body["messages"] = (prompt.messages if prompt.messages is not None
                                else [{"role": "user", "content": prompt.text}])

    def handler(self) -> ResponseHandler:
        if self.stream:
            return StreamHandler(True, self.counter, self.max_event_bytes, self.keep_answer, self.check)
        return JsonHandler(self.name, True, self.counter, self.keep_answer, self.check)


class CompletionsProtocol(OpenAIProtocol):
    """``POST {base}/completions`` with ``prompt`` (chat messages flattened to text)."""

    name = "openai-completions"
    endpoint = "/completions"

    def _input(self, body: dict, prompt: Prompt) -> None:
        body["prompt"] = prompt.text

    def handler(self) -> ResponseHandler:
        if self.stream:
            return StreamHandler(False, self.counter, self.max_event_bytes, self.keep_answer)
        return JsonHandler(self.name, True, self.counter, self.keep_answer)
