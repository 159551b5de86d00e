"""The lean transport: a plain-HTTP/1.1 client on asyncio.Protocol with httptools' C parser.

What it does, and nothing more: ``http://`` only (no TLS, proxies, redirects or auth flows: those
are aiohttp's), keep-alive reuse through a per-host idle pool with no connection limit (the engine
enforces the in-flight cap) but a bound on connects in progress (:data:`MAX_CONNECTING`), request bytes built once from a cached header block, and response bodies
(Content-Length, chunked, or read-until-close) handed to ``handler.on_body`` as they arrive, so a
100 MB answer is counted, never buffered. Failures become the same error classes as the aiohttp
transport: ``connect``, ``dns``, ``reset``, ``bad_response`` (``timeout`` is the engine's).

Per request the hot path is: one dict lookup for the header block, one ``bytes.join``, one
``transport.write``, one future; per read, one ``clock()`` and one ``feed_data`` into C.

Semantics shared with :class:`~loadgen.transport_aiohttp.AiohttpTransport`: ``out.sent`` is taken on
entry to :meth:`LeanTransport.send` (before any connect), ``first_byte`` at the first read of the
response, ``connect_start``/``connected`` only when a new connection was made; a request that failed
on a reused keep-alive connection before any response byte is retried once on a new connection for
idempotent methods only (RFC 9112 section 9.3.1, as aiohttp does). Responses to HEAD close the
connection (the parser cannot be told that a HEAD response has no body).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import deque
from urllib.parse import urlsplit

from httptools import HttpParserCallbackError, HttpParserError, HttpResponseParser

from loadgen.protocol import Request, ResponseHandler
from loadgen.records import Outcome

__all__ = ["LeanTransport", "UnsupportedURL"]

clock = time.perf_counter
DNS_TTL = 300.0  # seconds a resolved host name is reused (aiohttp's ttl_dns_cache)
_HEAD_CACHE_MAX = 4096  # distinct (method, url, headers) header blocks kept; HttpProtocol may vary the path
_IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"))
_NO_BODY_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "DELETE"))
_RETRY = "retry"  # waiter result: a reused connection died before any response byte
#: Connects in progress per host, at most. Past it a request takes the first connection that becomes free
#: (a finished request's or a new one's): without a bound, one generator hiccup at 20k req/s launches
#: thousands of connects at once, the server's accept queue overflows, SYN retries cost a second each,
#: and every arrival meanwhile opens yet another connection. The wait is part of the request's service
#: time (``sent`` is taken before it; ``connect_start - sent`` shows it).
MAX_CONNECTING = 64


class UnsupportedURL(ValueError):
    """A URL the lean transport cannot send to (https://, or no host): use the aiohttp transport."""


class _Site:
    """One scheme://host:port: its address cache, idle keep-alive connections (LIFO), connects in progress."""

    __slots__ = ("host", "port", "literal", "addrs", "resolved_at", "idle", "connecting", "waiters")

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        try:
            ipaddress.ip_address(host)
            self.literal = True
        except ValueError:
            self.literal = False
        self.addrs: list[tuple] = []
        self.resolved_at = -DNS_TTL
        self.idle: list[_Conn] = []
        self.connecting = 0
        self.waiters: deque[asyncio.Future] = deque()  # requests waiting for a connection or a connect slot

    def release(self, conn: "_Conn | None") -> None:
        """A connection is free (or, with None, a connect slot): the first waiter gets it, else the pool."""
        waiters = self.waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(conn)
                return
        if conn is not None:
            self.idle.append(conn)


class _Conn(asyncio.Protocol):
    """One TCP connection; at most one request on it at a time (no pipelining)."""

    __slots__ = ("transport", "parser", "site", "owner", "handler", "out", "waiter", "closed", "reused",
                 "_now", "_got", "_headers_done", "_framed", "_keep", "_interim", "_head", "_raw")

    def __init__(self, site: _Site, owner: "LeanTransport"):
        self.site, self.owner = site, owner
        self.transport: asyncio.Transport | None = None
        self.parser = HttpResponseParser(self)
        self.handler: ResponseHandler | None = None
        self.out: Outcome | None = None
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self.reused = False

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.owner._conns.add(self)

    def data_received(self, data: bytes) -> None:
        out = self.out
        if out is None:  # bytes nobody asked for, on an idle connection: it cannot be trusted again
            self._drop()
            return
        now = self._now = clock()
        if not self._got:
            self._got = True
            out.first_byte = now
        if not self._headers_done:
            self._raw.append(data)  # the header bytes, read only for a response that is not kept alive
        try:
            self.parser.feed_data(data)
        except HttpParserCallbackError as exc:  # a handler raised: a bug, recorded as 'other'
            cause = exc.__context__ or exc
            self._finish(("other", f"{type(cause).__name__}: {cause}"))
            self._drop()
        except HttpParserError as exc:
            self._finish(("bad_response", f"{type(exc).__name__}: {exc}"))
            self._drop()

    def eof_received(self):
        return None  # close our side too; connection_lost follows

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.owner._conns.discard(self)
        if self.out is None:
            return
        if self._headers_done and not self._framed and exc is None and not self._interim:
            self._complete()  # a body delimited by the end of the connection is complete now
            return
        if self.reused and not self._got:
            self._finish(_RETRY)
            return
        detail = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection before the response was complete"
        self._finish(("reset", detail))

    # -- httptools callbacks -------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._interim = True
            return
        self._headers_done = True
        self._keep = self.parser.should_keep_alive()
        # llhttp keeps alive only a framed body; otherwise look at the headers once (no per-header callback)
        self._framed = self._keep or self._has_framing()
        self.handler.on_status(status, self.out)
        if self._head:  # a HEAD response has no body whatever its Content-Length says
            self._keep = False
            self._complete()

    def _has_framing(self) -> bool:
        """Whether the response's headers give its length (Content-Length or chunked), else EOF ends it."""
        raw = b"".join(self._raw).lower()
        head = raw[: raw.find(b"\r\n\r\n")]
        return b"\ncontent-length:" in head or b"\ntransfer-encoding:" in head

    def on_body(self, body: bytes) -> None:
        if self.out is not None:
            self.handler.on_body(body, self._now, self.out)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._raw = []
            return
        if self.out is not None:
            self._complete()

    # -- request lifecycle ---------------------------------------------------------------------
    def begin(self, handler: ResponseHandler, out: Outcome, waiter: asyncio.Future, head: bool) -> None:
        self.handler, self.out, self.waiter = handler, out, waiter
        self._got = self._headers_done = self._framed = self._interim = False
        self._raw = []
        self._keep = True
        self._head = head

    def _complete(self) -> None:
        out, handler, waiter = self.out, self.handler, self.waiter
        self.out = self.handler = self.waiter = None
        result = None
        try:
            handler.on_end(out)
        except Exception as exc:  # a handler bug must not lose the record nor hang the request
            result = ("other", f"{type(exc).__name__}: {exc}")
            self._keep = False
        out.done = clock()
        if not waiter.done():
            waiter.set_result(result)
        if self._keep and not self.closed:
            self.reused = True
            self.site.release(self)
        else:
            self._drop()

    def _finish(self, result) -> None:
        """End the request in flight with an error ``(class, detail)`` or ``_RETRY``."""
        self.out = self.handler = None
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def _drop(self) -> None:
        self.closed = True
        self.out = self.handler = None
        if self.transport is not None:
            self.transport.abort()


class LeanTransport:
    """Plain-HTTP/1.1 transport; the same interface as ``AiohttpTransport`` (``start``, ``close``, ``send``).

    ``user_agent`` is sent unless the request's headers carry their own; ``max_connecting`` bounds the
    connects in progress per host (see :data:`MAX_CONNECTING`). No ``Accept-Encoding`` is
    sent, so servers answer uncompressed and ``bytes_in`` counts what crossed the wire.
    """

    name = "lean"

    def __init__(self, user_agent: str = "latbench", max_connecting: int = MAX_CONNECTING):
        self._ua = user_agent
        self._max_connecting = max_connecting
        self._sites: dict[str, _Site] = {}
        self._heads: dict[tuple, tuple[_Site, bytes]] = {}
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def supports(url: str) -> bool:
        """True for the URLs this transport can send to (``http://`` with a host)."""
        parts = urlsplit(url)
        return parts.scheme == "http" and bool(parts.hostname)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        for conn in list(self._conns):
            conn._drop()
        self._conns.clear()
        self._sites.clear()
        self._heads.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost

    # -- request bytes -------------------------------------------------------------------------
    def _head_of(self, req: Request) -> tuple[_Site, bytes]:
        """The site and the encoded request line + headers of ``req`` (without Content-Length)."""
        key = (req.method, req.url, req.headers)
        hit = self._heads.get(key)
        if hit is not None:
            return hit
        parts = urlsplit(req.url)
        if parts.scheme != "http" or not parts.hostname:
            raise UnsupportedURL(f"the lean transport sends to http:// URLs only, not {req.url!r}: "
                                 "set `transport: aiohttp` for https (TLS), proxies or redirects")
        port = parts.port or 80
        netloc = f"{parts.hostname}:{port}"
        site = self._sites.get(netloc)
        if site is None:
            site = self._sites[netloc] = _Site(parts.hostname, port)
        host = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"{req.method} {req.path or '/'} HTTP/1.1", f"Host: {host}"]
        names = {k.lower() for k, _ in req.headers}
        if "user-agent" not in names and self._ua:
            lines.append(f"User-Agent: {self._ua}")
        lines.extend(f"{k}: {v}" for k, v in req.headers if k.lower() not in ("host", "content-length"))
        head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
        if len(self._heads) >= _HEAD_CACHE_MAX:
            self._heads.clear()
        self._heads[key] = (site, head)
        return site, head

    @staticmethod
    def _encode(req: Request, head: bytes) -> bytes:
        body = req.body
        if body or req.method not in _NO_BODY_METHODS:
            return b"".join((head, b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        return head + b"\r\n"

    # -- connections ---------------------------------------------------------------------------
    async def _addresses(self, site: _Site) -> list[tuple]:
        if site.literal:
            return [(site.host, site.port)]
        now = clock()
        if not site.addrs or now - site.resolved_at > DNS_TTL:
            infos = await self._loop.getaddrinfo(site.host, site.port, type=socket.SOCK_STREAM)
            site.addrs = [info[4][:2] for info in infos]
            site.resolved_at = now
        return site.addrs

    async def _connect(self, site: _Site) -> _Conn:
        last: OSError | None = None
        for host, port in await self._addresses(site):
            try:
                _, conn = await self._loop.create_connection(lambda: _Conn(site, self), host, port)
                return conn
            except OSError as exc:  # try the next address ('localhost' is often ::1 then 127.0.0.1)
                last = exc
        raise last or OSError(f"no address for {site.host}")

    # -- the request ---------------------------------------------------------------------------
    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req``; fill ``out``. Never raises for a failed request (but lets cancellation through).

        Raises :class:`UnsupportedURL` for a URL that is not ``http://``: that is a setup mistake.
        """
        out.sent = clock()
        site, head = self._head_of(req)
        data = self._encode(req, head)
        is_head = req.method == "HEAD"
        for attempt in (0, 1):
            conn = await self._acquire(site, out)
            if conn is None:
                return  # the connect failed: out says why
            waiter = self._loop.create_future()
            conn.begin(handler, out, waiter, is_head)
            conn.transport.write(data)
            try:
                result = await waiter
            except asyncio.CancelledError:  # the engine's timeout, or the run's end: the answer is unusable
                if conn.out is out:
                    conn._drop()
                raise
            if result is None:
                return
            if result == _RETRY:
                if attempt == 0 and req.method in _IDEMPOTENT:
                    out.connect_start = out.connected = float("nan")
                    continue
                result = ("reset", "the server closed a kept-alive connection before answering")
            out.done = clock()
            if not out.error:  # an HTTP error class already set (a 5xx cut mid-body) stays
                out.error = result[0]
            out.error_detail = result[1]
            return

    async def _acquire(self, site: _Site, out: Outcome) -> "_Conn | None":
        """An idle connection, a new one, or (with ``max_connecting`` connects already in progress) the first
        one that becomes free. None when a connect failed (``out`` has the error)."""
        while True:
            idle = site.idle
            while idle:
                c = idle.pop()
                if not c.closed:
                    return c
            if site.connecting < self._max_connecting:
                break
            waiter = self._loop.create_future()
            site.waiters.append(waiter)
            try:
                conn = await waiter
            except asyncio.CancelledError:  # handed a connection just as we were cancelled: pass it on
                if waiter.done() and not waiter.cancelled():
                    site.release(waiter.result())
                raise
            if conn is not None and not conn.closed:
                return conn
        site.connecting += 1
        out.connect_start = clock()
        try:
            conn = await self._connect(site)
        except socket.gaierror as exc:
            return self._fail(out, "dns", exc)
        except OSError as exc:
            return self._fail(out, "connect", exc)
        finally:
            site.connecting -= 1
            if site.waiters:
                site.release(None)  # a connect slot is free
        out.connected = clock()
        return conn

    @staticmethod
    def _fail(out: Outcome, error: str, exc: BaseException) -> None:
        out.done = clock()
        out.error = error
        out.error_detail = f"{type(exc).__name__}: {exc}"
