"""The lean transport's state machine: one request (:class:`Call`), one connection (:class:`Conn`),
one host (:class:`Site`).

A request is not an asyncio Task: :meth:`LeanTransport.submit <loadgen.transports.lean.LeanTransport.submit>`
makes a :class:`Call`, puts it on an idle connection (or a new one, or in the host's queue), and the
connection's protocol callbacks drive it to its end, where ``call.on_done(call)`` is called once, from the
event loop, never from inside ``submit``. Per request: one Call, one ``transport.write``, and per read one
stamp (the kernel's, :mod:`loadgen.transports.lean_socket`) and one ``feed_data`` into httptools' C parser.

A connection is handed back to its host (and so to the next request, possibly from ``on_done``) only
after the parser has returned: bytes that arrive with a response but after it are never taken as the
next request's answer (the connection is dropped instead).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import time
from collections import deque

from httptools import HttpParserCallbackError, HttpParserError, HttpResponseParser

from loadgen.protocols.base import ResponseHandler, StopResponse
from loadgen.records.schema import Outcome
from loadgen.transports.inflate import inflating

clock = time.perf_counter
DNS_TTL = 300.0  # seconds a resolved host name is reused (aiohttp's ttl_dns_cache)
RETRY = "retry"  # a reused connection died before any response byte
_CODING = re.compile(rb"\r\ncontent-encoding[ \t]*:[ \t]*([^\r\n]*)")  # in the lower-cased header block


class Call:
    """One request in flight: what to write, who reads the answer, whom to tell. The handle ``submit`` returns.

    ``finished`` turns True when ``on_done`` is called or the call is cancelled, whichever comes first.
    ``ctx`` is the caller's, untouched.
    """

    __slots__ = ("site", "data", "handler", "out", "on_done", "ctx", "method", "conn", "attempt", "finished")

    def __init__(self, site: "Site", data: bytes, handler: ResponseHandler, out: Outcome, on_done, ctx, method: str):
        self.site, self.data, self.handler, self.out = site, data, handler, out
        self.on_done, self.ctx, self.method = on_done, ctx, method
        self.conn: Conn | None = None
        self.attempt = 0
        self.finished = False

    def cancel(self) -> None:
        """Abandon the request (a timeout, the run's end): its connection is dropped, ``on_done`` is not called.

        The caller records what it means. A call still waiting for a connection leaves the queue; one whose
        connect is in progress lets the connection, once made, go to the next request.
        """
        if self.finished:
            return
        self.finished = True
        conn = self.conn
        if conn is not None and conn.call is self:
            conn.call = None
            conn.drop()


class Site:
    """One host:port: its address cache, idle keep-alive connections (LIFO), connects in progress, queued calls."""

    __slots__ = ("host", "port", "literal", "addrs", "resolved_at", "idle", "connecting", "waiters", "dispatch")

    def __init__(self, host: str, port: int, dispatch):
        self.host, self.port = host, port
        try:
            ipaddress.ip_address(host)
            self.literal = True
        except ValueError:
            self.literal = False
        self.addrs: list[tuple] = []
        self.resolved_at = -DNS_TTL
        self.idle: list[Conn] = []
        self.connecting = 0
        self.waiters: deque[Call] = deque()  # calls waiting for a connection or a connect slot
        self.dispatch = dispatch  # the transport's: put a call on a connection, or start one

    def release(self, conn: "Conn | None") -> None:
        """A connection is free (or, with None, a connect slot): the first waiting call gets it, else the pool."""
        waiters = self.waiters
        while waiters:
            call = waiters.popleft()
            if call.finished:
                continue
            if conn is None:
                self.dispatch(call)  # a connect slot is free: it connects (or finds an idle connection)
            else:
                conn.start(call)
            return
        if conn is not None:
            self.idle.append(conn)


class Conn(asyncio.Protocol):
    """One TCP connection; at most one request on it at a time (no pipelining)."""

    __slots__ = ("transport", "parser", "site", "owner", "call", "closed", "reused", "ended", "_result",
                 "_now", "_got", "_headers_done", "_framed", "_keep", "_interim", "_head", "_raw", "_cap", "_coding")

    def __init__(self, site: Site, owner):
        self.site, self.owner = site, owner
        self._cap = owner.max_header_bytes  # a response's header block, at most
        self.transport: asyncio.Transport | None = None
        self.parser = HttpResponseParser(self)
        self.call: Call | None = None
        self.ended: Call | None = None  # a request that ended inside the parser, and how (``_result``)
        self._result = None
        self.closed = False
        self.reused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.owner.conns.add(self)

    def data_received(self, data: bytes, now: float | None = None) -> None:
        """A read, stamped ``now``: its arrival (the kernel's stamp, given by a :class:`~loadgen.transports.
        lean_socket.StampedSocket`), else (an asyncio transport's call) the moment this code runs."""
        if now is None:
            now = clock()
        call = self.call
        if call is None:  # bytes nobody asked for, on an idle connection: it cannot be trusted again
            self.drop()
            return
        self._now = now
        if not self._got:
            self._got = True
            call.out.first_byte = now
        if not self._headers_done:  # the header bytes, read only for a response that is not kept alive
            self._raw = self._raw + data if self._raw else data
            cap = self._cap
            if len(self._raw) > cap and self._raw.find(b"\r\n\r\n", 0, cap) < 0:  # headers that never end
                self._raw = b""
                self._end(("bad_response", f"response headers over {cap} bytes (target.max_header_bytes)"))
                self._settle()
                return
        try:
            self.parser.feed_data(data)
        except HttpParserCallbackError as exc:
            cause = exc.__context__ or exc
            if isinstance(cause, StopResponse):  # the handler read enough (a cap): its error class stands
                self._end(("bad_stream", str(cause)))
            else:  # a handler raised: a bug, recorded as 'other'
                self._end(("other", f"{type(cause).__name__}: {cause}"))
        except HttpParserError as exc:
            self._end(("bad_response", f"{type(exc).__name__}: {exc}"))
        if self._coding:  # the headers ended in this read and no body came with them: their Content-Encoding now
            self._coding = False
            if self.call is not None:
                self._find_coding(self.call, self._raw)
        if self.ended is not None:
            self._settle()

    def eof_received(self):
        return None  # close our side too; connection_lost follows

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.owner.conns.discard(self)
        if self.call is not None:
            if self._headers_done and not self._framed and exc is None and not self._interim:
                self._now = clock()
                self._complete()  # a body delimited by the end of the connection is complete now
            elif self.reused and not self._got:
                self._end(RETRY)
            else:
                detail = (f"{type(exc).__name__}: {exc}" if exc
                          else "the server closed the connection before the response was complete")
                self._end(("reset", detail))
        if self.ended is not None:
            self._settle()

    # -- httptools callbacks -------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        call = self.call
        if call is None:  # a second response in the same read: the connection is out of step
            self._keep = False
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._interim = True
            return
        self._headers_done = True
        self._keep = keep = self.parser.should_keep_alive()
        # llhttp keeps alive only a framed body; otherwise the headers say whether this one is framed
        self._framed = keep or self._has_framing(self._raw.lower())
        # the Content-Encoding is looked for once the header block's end is known without a search: at the first
        # body bytes (the headers are what precedes them), or at the end of this read (all of it is headers)
        self._coding = True
        call.handler.on_status(status, call.out)
        if self._head:  # a HEAD response has no body whatever its Content-Length says
            self._keep = False
            self._coding = False
            self._complete()

    def _find_coding(self, call: Call, head: bytes) -> None:
        """A body sent compressed though none was asked for is inflated with the cap: ``head`` holds the header
        block (and perhaps bytes after it), read once, lower-cased (any spelling of a name); ``find``, not ``in``
        (which first tries the needle as an int and clears the TypeError: 80 ns a test)."""
        low = head.lower()
        if low.find(b"\ncontent-encoding") >= 0:
            coding = _CODING.search(low, 0, low.find(b"\r\n\r\n"))  # in the header block, not the body
            if coding is not None:
                call.handler = inflating(call.handler, coding.group(1).decode("latin-1"))

    @staticmethod
    def _has_framing(low: bytes) -> bool:
        """Whether the (lower-cased) headers give the response's length (Content-Length or chunked), else EOF ends
        it."""
        end = low.find(b"\r\n\r\n")
        return low.find(b"\ncontent-length:", 0, end) >= 0 or low.find(b"\ntransfer-encoding:", 0, end) >= 0

    def on_body(self, body: bytes) -> None:
        call = self.call
        if call is not None:
            if self._coding:  # the first body bytes, read with the headers: these precede them in ``_raw``
                self._coding = False
                raw = self._raw
                self._find_coding(call, raw[:len(raw) - len(body)])
            call.handler.on_body(body, self._now, call.out)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._raw = b""
            return
        if self.call is not None:
            self._complete()
        else:
            self._keep = False

    # -- request lifecycle ---------------------------------------------------------------------
    def start(self, call: Call) -> None:
        """Put ``call`` on this (idle, open) connection and write its request."""
        call.conn = self
        self.call = call
        self._got = self._headers_done = self._framed = self._interim = self._coding = False
        self._raw = b""
        self._keep = True
        self._head = call.method == "HEAD"
        self.transport.write(call.data)

    def _complete(self) -> None:
        """The response of ``self.call`` (not None) is complete: its handler's end, then :meth:`_end`'s work."""
        call = self.call
        result = None
        try:
            call.handler.on_end(call.out)
        except Exception as exc:  # a handler bug must not lose the record nor hang the request
            result = ("other", f"{type(exc).__name__}: {exc}")
            self._keep = False
        call.out.done = self._now  # the read that completed it (its arrival, with kernel stamps)
        self.call = None
        self.ended, self._result = call, result

    def _end(self, result) -> None:
        """The request on this connection is over: None (complete), ``(class, detail)`` or ``RETRY``."""
        call = self.call
        if call is None:
            self._keep = False
            return
        self.call = None
        if result is not None:
            self._keep = False
        self.ended, self._result = call, result

    def _settle(self) -> None:
        """Once the parser has returned: hand the connection on (or drop it), then tell the call's owner."""
        call, result = self.ended, self._result
        self.ended = None
        if self._keep and not self.closed:
            self.reused = True
            site = self.site
            if site.waiters:
                site.release(self)
            else:
                site.idle.append(self)
        elif not self.closed:
            self.drop()
        if result is None and not call.finished:  # complete: what the owner's ``ended`` does with None, inline
            call.finished = True
            call.on_done(call)
        else:
            self.owner.ended(call, result)

    def drop(self) -> None:
        self.closed = True
        self.call = None
        if self.transport is not None:
            self.transport.abort()
