"""The worker's transport: FastHttpUser's client (geventhttpclient), read as the bytes arrive.

Imported only inside a Locust worker process (gevent-patched). It keeps the transport contract of
:mod:`loadgen.protocols.base`: ``out.sent`` when the request is written, ``handler.on_status`` once the
headers arrived, ``handler.on_body(chunk, now, out)`` per chunk as it comes off the socket,
``handler.on_end`` when the body is complete; on a transport error ``out.error`` / ``out.done`` and no
``on_end``. So TTFT and token times come from the same SSE parser the native engine uses.

Why not ``response.iter_content``: geventhttpclient's ``read(n)`` blocks until ``n`` bytes or the end of
the body, which would bunch SSE events together and shift token times; :func:`_read_some` returns
whatever the socket gave (one ``recv``), the way aiohttp's ``iter_any`` does. It reads the parser's
buffer and socket (private attributes of geventhttpclient 2.x).

What this transport cannot see, and leaves NaN: ``connect_start``, ``connected`` and ``tls``
(geventhttpclient's pool does not report when it opens a connection). The body of an HTTP error
status is not read (geventhttpclient discards it), so ``bytes_in`` is 0 for those.
"""

from __future__ import annotations

import errno
import math
import socket
import ssl
import time

import gevent

from loadgen.protocols.base import Request, ResponseHandler, StopResponse
from loadgen.records.schema import Outcome
from loadgen.transports.base import sendable

clock = time.perf_counter


class Deadline(BaseException):
    """The per-request timeout. A BaseException so no ``except Exception`` inside a client swallows it."""


class Cancelled(BaseException):
    """Raised into a request greenlet to stop it (abort, or the end-of-run grace expired)."""


class RequestFailed(Exception):
    """What Locust's ``request`` event gets as ``exception``: the latbench error class, for its stats."""


def classify(exc: BaseException) -> str:
    """Map a geventhttpclient / socket exception to a record error class."""
    original = getattr(exc, "original", None)  # RetriesExceeded wraps the last error
    if original is not None and original is not exc:
        return classify(original)
    if isinstance(exc, (Deadline, socket.timeout, gevent.Timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, ssl.SSLError):
        return "tls"
    if isinstance(exc, ConnectionRefusedError):
        return "connect"
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "connect"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "reset"
    name = type(exc).__name__
    if name in ("HTTPConnectionClosed",):
        return "reset"
    if name in ("HTTPParseError", "HTTPProtocolViolationError"):
        return "bad_response"
    if isinstance(exc, OSError):
        return "reset"
    return "other"


def _read_some(resp) -> bytes:
    """The next body bytes as they arrive: what is buffered, else one ``recv``; b'' at the end."""
    while True:
        buf = resp._body_buffer
        if buf:
            data = bytes(buf)
            del buf[:]
            return data
        if resp.message_complete or resp._sock is None:
            return b""
        try:
            data = resp._sock.recv(resp.block_size)
            resp.feed(data)
        except BaseException:
            resp.release()
            raise
        if not data and not resp.message_complete:
            resp.release()
            raise ConnectionResetError("connection closed before the end of the body")


def _discard(resp) -> None:
    """Close a response's connection instead of returning it to the pool (its answer was not read to the end)."""
    sock, pool = getattr(resp, "_sock", None), getattr(resp, "_pool", None)
    resp._sock = resp._pool = None
    if sock is not None:
        if pool is not None:
            pool.release_socket(sock)
        else:
            sock.close()


def request_headers(req: Request) -> dict:
    """The request's headers (less the framing ones the client writes: :func:`~loadgen.transports.base.sendable`),
    asking for an uncompressed body (it is parsed as it arrives)."""
    headers = dict(sendable(req.headers))
    if not any(k.lower() == "accept-encoding" for k in headers):
        headers["Accept-Encoding"] = "identity"
    return headers


def send(session, req: Request, handler: ResponseHandler, out: Outcome, timeout: float, name: str) -> None:
    """Send ``req`` through a FastHttpSession and fill ``out``. Never raises for a failed request.

    ``Cancelled`` passes through (the caller records it). Locust's ``request`` event is the caller's
    to fire, once per request, with the outcome (see :func:`fire_request_event`).
    """
    headers = request_headers(req)
    out.sent = clock()
    try:
        with gevent.Timeout(timeout, Deadline):
            resp = session.request(req.method, req.url, name=name, data=req.body or None, headers=headers,
                                   stream=True, catch_response=True, allow_redirects=False)  # 3xx: http_3xx
            status = resp.status_code or 0
            error = getattr(resp, "error", None)
            if status:
                out.first_byte = clock()
                handler.on_status(status, out)
            if error is not None and (not status or status < 300):
                raise error  # a transport failure: no response at all
            raw = getattr(resp, "_response", None)
            try:
                if error is None and raw is not None:
                    while True:
                        chunk = _read_some(raw)
                        if not chunk:
                            break
                        handler.on_body(chunk, clock(), out)
            except StopResponse as exc:  # the handler read enough (a cap): the rest is never read
                _discard(raw)
                out.error_detail = str(exc)
            else:
                handler.on_end(out)
            out.done = clock()
    except (Cancelled, gevent.GreenletExit):
        raise
    except BaseException as exc:  # a failed request is data, not an exception (gevent.Timeout included)
        out.done = clock()
        if not out.error:  # an HTTP error class already set (a 5xx cut mid-body) stays
            out.error = classify(exc)
        out.error_detail = f"{type(exc).__name__}: {exc}"
    if math.isnan(out.done):
        out.done = clock()


def fire_request_event(events, req: Request, name: str, out: Outcome, wall_sent: float) -> None:
    """Fire Locust's ``request`` event for one finished request (so Locust's stats and CSV see it).

    ``response_time`` is the service time (``done - sent``) in milliseconds, Locust's unit; latbench's
    own latency (from ``scheduled``) is in the records.
    """
    sent = out.sent if not math.isnan(out.sent) else out.done
    events.request.fire(
        request_type=req.method,
        name=name,
        response_time=(out.done - sent) * 1000.0,
        response_length=out.bytes_in,
        exception=RequestFailed(out.error + (f" {out.status}" if out.status else "")) if out.error else None,
        context={},
        start_time=wall_sent,
        url=req.url,
        response=None,
    )
