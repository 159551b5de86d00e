"""The httpx transport: HTTP/2 (``http2: true`` targets), one AsyncClient, unlimited connections.

Connection phases come from httpcore's trace extension (``connection.connect_tcp.*``,
``connection.start_tls.*``). HTTP/2 is negotiated by ALPN over TLS; over ``http://`` httpx speaks
HTTP/1.1 unless ``http1=False``, which makes it use HTTP/2 with prior knowledge (h2c).
Requires the ``h2`` package for HTTP/2 (``pip install 'httpx[http2]'``).

Foreign exceptions stop here: every failure becomes an error class on the Outcome (STYLE habit 6),
the same classes as the aiohttp transport. A compressed body is read raw and inflated with the transports'
cap (:mod:`loadgen.transports.inflate`), not by httpx, which inflates a read whole.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

from loadgen.protocols.base import Request, ResponseHandler, StopResponse
from loadgen.records.schema import Outcome
from loadgen.transports.base import sendable
from loadgen.transports.inflate import ACCEPT_ENCODING, inflating

__all__ = ["HttpxTransport", "classify"]

clock = time.perf_counter


def classify(exc: BaseException) -> str:
    """Map an httpx/httpcore/OS exception to a record error class."""
    import httpx

    chain, e = [], exc
    while e is not None and len(chain) < 8:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(c, socket.gaierror) for c in chain):
        return "dns"
    if any(isinstance(c, ssl.SSLError) for c in chain):
        return "tls"
    if isinstance(exc, (httpx.TimeoutException, asyncio.TimeoutError)):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        if ("name or service not known" in text or "nodename nor servname" in text
                or "temporary failure in name" in text):
            return "dns"
        if "ssl" in text or "certificate" in text:
            return "tls"
        return "connect"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.CloseError, ConnectionResetError, BrokenPipeError)):
        return "reset"
    if isinstance(exc, httpx.RemoteProtocolError):
        text = str(exc).lower()
        if "disconnect" in text or "closed" in text or "incomplete" in text:
            return "reset"
        return "bad_response"
    if isinstance(exc, (httpx.DecodingError, httpx.ProtocolError)):
        return "bad_response"
    if isinstance(exc, ConnectionRefusedError):
        return "connect"
    return "other"


class _Trace:
    """httpcore trace callback for one request: records new-connection and TLS times on ``out``."""

    __slots__ = ("out", "_tls0")

    def __init__(self, out: Outcome):
        self.out = out
        self._tls0 = 0.0

    async def __call__(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.started":
            self.out.connect_start = clock()
        elif event == "connection.connect_tcp.complete":
            self.out.connected = clock()
        elif event == "connection.start_tls.started":
            self._tls0 = clock()
        elif event == "connection.start_tls.complete":
            now = clock()
            self.out.tls = now - self._tls0
            self.out.connected = now


class HttpxTransport:
    """HTTP/2 (and HTTP/1.1) through httpx; the same interface as ``AiohttpTransport``.

    ``verify``: check TLS certificates. ``http2``: offer HTTP/2 (needs ``h2``). ``http1=False`` with
    ``http2=True``: HTTP/2 only, which over ``http://`` means prior knowledge (h2c).
    """

    name = "httpx"
    submit = None  # no callback path: the engine runs send() in a Task per request

    def __init__(self, verify: bool = True, http2: bool = True, http1: bool = True):
        self._verify, self._http2, self._http1 = verify, http2, http1
        self._client = None

    async def start(self) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - httpx is a core dependency
            raise RuntimeError("the httpx transport needs httpx: pip install 'httpx[http2]'") from exc
        if self._http2:
            try:
                import h2  # noqa: F401
            except ImportError as exc:
                raise RuntimeError("HTTP/2 needs the h2 package: pip install 'httpx[http2]'") from exc
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        self._client = httpx.AsyncClient(http1=self._http1, http2=self._http2, verify=self._verify, limits=limits,
                                         timeout=httpx.Timeout(None), follow_redirects=False,
                                         headers={"User-Agent": "latbench", "Accept-Encoding": ACCEPT_ENCODING})

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req``; fill ``out``. Never raises for a failed request (but lets cancellation through)."""
        out.sent = clock()
        try:
            request = self._client.build_request(req.method, req.url, content=req.body or None,
                                                 headers=sendable(req.headers), extensions={"trace": _Trace(out)})
            resp = await self._client.send(request, stream=True)
            stopped = None
            try:
                out.first_byte = clock()
                handler = inflating(handler, resp.headers.get("Content-Encoding"))
                handler.on_status(resp.status_code, out)
                async for chunk in resp.aiter_raw():
                    handler.on_body(chunk, clock(), out)
            except StopResponse as exc:  # the handler read enough (a cap): closing unread drops the connection
                stopped = exc
            finally:
                await resp.aclose()
            if stopped is not None:
                out.error_detail = str(stopped)
            else:
                handler.on_end(out)
            out.done = clock()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed request is data, not an exception
            out.done = clock()
            if not out.error:  # an HTTP error class already set (a 5xx cut mid-body) stays
                out.error = classify(exc)
            out.error_detail = f"{type(exc).__name__}: {exc}"
