"""The lean transport: a plain-HTTP/1.1 client on asyncio.Protocol with httptools' C parser.

What it does, and nothing more: ``http://`` only (no TLS or proxies: those are aiohttp's; no transport
follows redirects: a 3xx is ``http_3xx``), keep-alive reuse through a per-host idle pool with no connection
limit (the engine enforces the in-flight cap) but a bound on connects in progress (:data:`MAX_CONNECTING`),
request bytes built once from a cached header block, and response bodies
(Content-Length, chunked, or read-until-close) handed to ``handler.on_body`` as they arrive, so a
100 MB answer is counted, never buffered. Failures become the same error classes as the aiohttp
transport: ``connect``, ``dns``, ``reset``, ``bad_response`` (``timeout`` is the engine's). A response whose
header block runs past ``max_header_bytes`` (a server whose headers never end) is ``bad_response`` and its
connection is closed; nothing of it is held beyond that cap.

Two ways in: :meth:`LeanTransport.send` (a coroutine, as every transport has) and :meth:`LeanTransport.submit`
(a callback when the request ended; no Task, no future). Per request on the callback path: one dict
lookup for the encoded request (by the Request's identity: an engine that reuses Request objects
encodes each once), one :class:`~loadgen.transports.lean_conn.Call`, one ``transport.write``; per read, one
``clock()`` and one ``feed_data`` into C (see :mod:`loadgen.transports.lean_conn`).

Semantics shared with :class:`~loadgen.transports.aiohttp_client.AiohttpTransport`: ``out.sent`` is taken on
entry to ``send``/``submit`` (before any connect), ``first_byte`` at the first read of the
response, ``connect_start``/``connected`` only when a new connection was made; a request that failed
on a reused keep-alive connection before any response byte is retried once on a new connection for
idempotent methods only (RFC 9112 section 9.3.1, as aiohttp does). Responses to HEAD close the
connection (the parser cannot be told that a HEAD response has no body).
"""

from __future__ import annotations

import asyncio
import base64
import socket
from urllib.parse import unquote, urlsplit

from loadgen.errors import UnsupportedURL
from loadgen.protocols.base import Request, ResponseHandler
from loadgen.records.schema import Outcome
from loadgen.scenario.model import MAX_HEADER_BYTES
from loadgen.transports.base import sendable
from loadgen.transports.lean_conn import DNS_TTL, RETRY, Call, Conn, Site, clock
from loadgen.transports.lean_socket import StampedSocket, Stamps, available

__all__ = ["LeanTransport", "UnsupportedURL"]

_HEAD_CACHE_MAX = 4096  # distinct (method, url, headers) header blocks kept; HttpProtocol may vary the path
_WIRE_CACHE_MAX = 4096  # encoded requests kept by identity (an engine that reuses Request objects)
_IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"))
_NO_BODY_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE", "DELETE"))
#: Connects in progress per host, at most. Past it a request takes the first connection that becomes free
#: (a finished request's or a new one's): without a bound, one generator hiccup at 20k req/s launches
#: thousands of connects at once, the server's accept queue overflows, SYN retries cost a second each,
#: and every arrival meanwhile opens yet another connection. The wait is part of the request's service
#: time (``sent`` is taken before it; ``connect_start - sent`` shows it).
MAX_CONNECTING = 64


def _wake(call: Call) -> None:
    fut = call.ctx
    if not fut.done():
        fut.set_result(None)


class LeanTransport:
    """Plain-HTTP/1.1 transport; the same interface as ``AiohttpTransport`` (``start``, ``close``, ``send``), and
    :meth:`submit`, a callback path with no Task per request, which the native engine prefers.

    ``user_agent`` is sent unless the request's headers carry their own; ``max_connecting`` bounds the
    connects in progress per host (see :data:`MAX_CONNECTING`); ``receive_stamps``: a response's reads are
    stamped with their arrival, the kernel's receive timestamp (:mod:`loadgen.transports.lean_socket`), not
    when they are read. No ``Accept-Encoding`` is
    sent, so servers answer uncompressed and ``bytes_in`` counts what crossed the wire; a body compressed
    anyway is inflated with the transports' cap (:mod:`loadgen.transports.inflate`), never trusted raw.
    """

    name = "lean"

    def __init__(self, user_agent: str = "latbench", max_connecting: int = MAX_CONNECTING,
                 max_header_bytes: int = MAX_HEADER_BYTES, receive_stamps: bool = False):
        self._ua = user_agent
        self._max_connecting = max_connecting
        self.max_header_bytes = max_header_bytes  # a response's header block, at most (read by Conn)
        self._sites: dict[str, Site] = {}
        self._heads: dict[tuple, tuple[Site, bytes]] = {}
        self._wire: dict[int, tuple[Request, Site, bytes]] = {}
        self.conns: set[Conn] = set()
        self._connects: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        # reads stamped with their arrival by the kernel (lean_socket), else when read
        self._stamps: Stamps | None = Stamps() if receive_stamps and available() else None

    @staticmethod
    def supports(url: str) -> bool:
        """True for the URLs this transport can send to (``http://`` with a host)."""
        parts = urlsplit(url)
        return parts.scheme == "http" and bool(parts.hostname)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        for task in list(self._connects):
            task.cancel()
        for conn in list(self.conns):
            conn.drop()
        self.conns.clear()
        self._sites.clear()
        self._heads.clear()
        self._wire.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost

    # -- request bytes -------------------------------------------------------------------------
    def _head_of(self, req: Request) -> tuple[Site, bytes]:
        """The site and the encoded request line + headers of ``req`` (without Content-Length)."""
        key = (req.method, req.url, req.headers)
        hit = self._heads.get(key)
        if hit is not None:
            return hit
        parts = urlsplit(req.url)
        if parts.scheme != "http" or not parts.hostname:
            raise UnsupportedURL(f"the lean transport sends to http:// URLs only, not {req.url!r}: "
                                 "set `transport: aiohttp` for https (TLS) or proxies")
        port = parts.port or 80
        netloc = f"{parts.hostname}:{port}"
        site = self._sites.get(netloc)
        if site is None:
            site = self._sites[netloc] = Site(parts.hostname, port, self._dispatch)
        names = {k.lower() for k, _ in req.headers}
        lines = [f"{req.method} {req.path or '/'} HTTP/1.1"]
        if "host" not in names:  # the request's own Host (a virtual host behind an address) is sent as given
            lines.append(f"Host: {parts.netloc.rsplit('@', 1)[-1]}")
        if "user-agent" not in names and self._ua:
            lines.append(f"User-Agent: {self._ua}")
        if parts.username is not None and "authorization" not in names:  # as aiohttp and httpx do with userinfo
            userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            lines.append("Authorization: Basic " + base64.b64encode(userinfo.encode("utf-8")).decode("ascii"))
        lines.extend(f"{k}: {v}" for k, v in sendable(req.headers))  # framing is the transport's alone
        head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
        if len(self._heads) >= _HEAD_CACHE_MAX:
            self._heads.clear()
        self._heads[key] = (site, head)
        return site, head

    def _wire_of(self, req: Request) -> tuple[Request, Site, bytes]:
        """``(req, site, bytes on the wire)``, cached by the Request's identity (it holds ``req``, so the id is not
        reused)."""
        site, head = self._head_of(req)
        body = req.body
        if body or req.method not in _NO_BODY_METHODS:
            data = b"".join((head, b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body))
        else:
            data = head + b"\r\n"
        entry = (req, site, data)
        if len(self._wire) >= _WIRE_CACHE_MAX:
            self._wire.clear()
        self._wire[id(req)] = entry
        return entry

    # -- the request ---------------------------------------------------------------------------
    def submit(self, req: Request, handler: ResponseHandler, out: Outcome, on_done, ctx=None) -> Call:
        """Start ``req``; ``on_done(call)`` is called once when it ended, with ``out`` filled (``out.done`` set;
        ``out.error`` says how it failed). Never called from within ``submit``, nor after ``call.cancel()``.

        ``out.sent`` is taken here, before any connect. Raises :class:`UnsupportedURL` for a URL that is not
        ``http://``: that is a setup mistake, not a failed request.
        """
        out.sent = clock()
        entry = self._wire.get(id(req))
        if entry is None or entry[0] is not req:
            entry = self._wire_of(req)
        site = entry[1]
        call = Call(site, entry[2], handler, out, on_done, ctx, req.method)
        idle = site.idle
        if idle:  # _dispatch's common case, inline: the last connection pooled
            conn = idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                conn.start(call)
                return call
        self._dispatch(call)
        return call

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req``; fill ``out``. Never raises for a failed request (but lets cancellation through, which
        abandons the request and drops its connection). Raises :class:`UnsupportedURL` as :meth:`submit` does."""
        fut = self._loop.create_future()
        call = self.submit(req, handler, out, _wake, fut)
        try:
            await fut
        except asyncio.CancelledError:  # the engine's timeout, or the run's end: the answer is unusable
            call.cancel()
            raise

    def _dispatch(self, call: Call) -> None:
        """An idle connection, a new one, or (with ``max_connecting`` connects in progress) the host's queue."""
        site = call.site
        idle = site.idle
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.transport.is_closing():  # closing: the peer's FIN was just read
                conn.start(call)
                return
        if site.connecting < self._max_connecting:
            site.connecting += 1
            call.out.connect_start = clock()
            task = self._loop.create_task(self._connect_for(call))
            self._connects.add(task)
            task.add_done_callback(self._connects.discard)
        else:
            site.waiters.append(call)

    def ended(self, call: Call, result) -> None:
        """A connection is done with ``call``: None (complete), ``(class, detail)``, or ``RETRY``."""
        if call.finished:
            return
        if result is not None:
            if result == RETRY:
                if call.attempt == 0 and call.method in _IDEMPOTENT:  # RFC 9112 9.3.1, as aiohttp does
                    call.attempt = 1
                    call.conn = None
                    out = call.out
                    out.connect_start = out.connected = float("nan")
                    self._dispatch(call)
                    return
                result = ("reset", "the server closed a kept-alive connection before answering")
            out = call.out
            out.done = clock()
            if not out.error:  # an HTTP error class already set (a 5xx cut mid-body) stays
                out.error = result[0]
            out.error_detail = result[1]
        call.finished = True
        call.on_done(call)

    # -- connections ---------------------------------------------------------------------------
    async def _addresses(self, site: Site) -> list[tuple]:
        if site.literal:
            return [(site.host, site.port)]
        now = clock()
        if not site.addrs or now - site.resolved_at > DNS_TTL:
            infos = await self._loop.getaddrinfo(site.host, site.port, type=socket.SOCK_STREAM)
            site.addrs = [info[4][:2] for info in infos]
            site.resolved_at = now
        return site.addrs

    async def _connect(self, site: Site) -> Conn:
        last: OSError | None = None
        for host, port in await self._addresses(site):
            try:
                if self._stamps is not None:  # reads stamped by the kernel (lean_socket)
                    _, conn = await StampedSocket.connect(self._loop, lambda: Conn(site, self), host, port,
                                                          self._stamps)
                else:
                    _, conn = await self._loop.create_connection(lambda: Conn(site, self), host, port)
                return conn
            except OSError as exc:  # try the next address ('localhost' is often ::1 then 127.0.0.1)
                last = exc
        raise last or OSError(f"no address for {site.host}")

    async def _connect_for(self, call: Call) -> None:
        """Connect (one slot of ``max_connecting`` taken by the caller) and put ``call`` on the new connection.

        A call cancelled meanwhile lets the new connection go to the next request."""
        site = call.site
        error = None
        try:
            conn = await self._connect(site)
        except socket.gaierror as exc:
            error = ("dns", exc)
        except OSError as exc:
            error = ("connect", exc)
        finally:
            site.connecting -= 1
        if error is not None:
            if site.waiters:
                site.release(None)  # a connect slot is free
            if not call.finished:
                out = call.out
                out.done = clock()
                out.error = error[0]
                out.error_detail = f"{type(error[1]).__name__}: {error[1]}"
                call.finished = True
                call.on_done(call)
            return
        if call.finished:
            site.release(conn)
        else:
            call.out.connected = clock()
            conn.start(call)
        if site.waiters:
            site.release(None)  # a connect slot is free
