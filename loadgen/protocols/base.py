"""The one small interface between engines/transports and API protocols.

An :class:`ApiProtocol` (openai-chat, openai-completions, embeddings, http) turns a request number and
a prompt into a :class:`Request` of pre-encoded bytes, and creates one :class:`ResponseHandler` per
request that reads the response as the transport receives it. A transport (aiohttp, the lean
asyncio.Protocol client, httpx for HTTP/2, Locust's FastHttpUser) owns the socket and the clock
readings of the connection; the handler owns everything the body means (tokens, usage, protocol
errors). Neither raises for a failed request: failures are written into the :class:`Outcome`.

Call order a transport guarantees for one request::

    out.sent = now()                    # transport, when the request is written
    handler.on_status(status, out)      # once, when the status line and headers arrived
    handler.on_body(chunk, now, out)    # zero or more times, in order, as bytes arrive
    handler.on_end(out)                 # once, when the body is complete (not called on transport errors)

On a transport error (connect, reset, timeout) the transport or engine sets ``out.error`` and
``out.done`` and does not call ``on_end``.

A handler that must not read further (the response broke one of its caps: an SSE line or event larger than
``max_event_bytes``) sets ``out.error`` and raises :class:`StopResponse` from ``on_body``: the transport
closes the connection, takes the exception's message as ``out.error_detail``, sets ``out.done`` and does not
call ``on_end``.

One idea at several stages, each stage's contract, so one file name: :mod:`loadgen.transports.base` (what a transport
gives an engine), :mod:`loadgen.engine.base` (what an engine is given and returns).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.records.schema import Outcome, PromptCounts


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request, fully encoded before its scheduled time so nothing is built on the hot path."""

    method: str
    url: str  # absolute URL, for transports that take one
    path: str  # path and query, for transports that write the request line themselves
    headers: tuple[tuple[str, str], ...]  # without Host and Content-Length; transports add those
    body: bytes
    stream: bool  # the response is a server-sent-event stream
    counts: PromptCounts | None = None  # the prompt's length as latbench counted it (engines copy it to the Outcome)


class StopResponse(Exception):
    """Raised by :meth:`ResponseHandler.on_body` when the rest of the response must not be read; ``out.error``
    is already set. The transport closes the connection and ends the request (the message is its detail)."""


ERROR_BODY_CHARS = 200  # characters of an HTTP error's (or redirect's) body kept in ``out.error_detail`` (for -v)


def keep_error_body(data: bytes, out: Outcome) -> None:
    """Keep the start of an HTTP error's body in ``out.error_detail``: what the server said, for ``-v``'s log
    (which is redacted, as every log line is; the detail is never written to the RunDir)."""
    room = ERROR_BODY_CHARS - len(out.error_detail)
    if room > 0:
        out.error_detail += data[:room].decode("utf-8", "replace")


def status_error(status: int) -> str:
    """The error class of an HTTP status, '' for success (2xx). A redirect is ``http_3xx``: no transport follows
    one (the target's URL should be the endpoint itself: following would make every request two)."""
    if status == 429:
        return "http_429"
    if status >= 500:
        return "http_5xx"
    if status >= 400:
        return "http_4xx"
    if status >= 300:
        return "http_3xx"
    return ""


class ResponseHandler:
    """Reads one response. Subclasses override :meth:`on_body` and :meth:`on_end`."""

    __slots__ = ()

    def on_status(self, status: int, out: Outcome) -> None:
        out.status = status
        if status >= 300:  # a success is the common case: no call for it
            out.error = status_error(status)

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if out.status >= 300:
            keep_error_body(data, out)

    def on_end(self, out: Outcome) -> None:
        pass


class ApiProtocol:
    """Builds requests for one API. ``build`` must be cheap and deterministic for a given ``seq``."""

    name = "base"
    #: whether the API answers in a stream of token events when the target asks for one (``target.stream``)
    streams_tokens = False

    def build(self, seq: int, prompt: "Prompt") -> Request:  # noqa: F821 (Prompt from loadgen.scenario.prompts)
        raise NotImplementedError

    def handler(self) -> ResponseHandler:
        return ResponseHandler()
