"""The aiohttp transport: TLS, proxies; connection phases through aiohttp's TraceConfig. Redirects are not
followed (a 3xx is recorded as ``http_3xx``, as on every transport). A compressed body is inflated with the
transports' cap (:mod:`loadgen.transports.inflate`), not by aiohttp, which inflates without one.

Foreign exceptions stop here: every failure becomes an error class on the Outcome (STYLE habit 6).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import TYPE_CHECKING

from loadgen.protocols.base import Request, ResponseHandler, StopResponse
from loadgen.records.schema import Outcome
from loadgen.transports.base import sendable
from loadgen.transports.inflate import ACCEPT_ENCODING, inflating

if TYPE_CHECKING:
    import aiohttp

clock = time.perf_counter


def _aiohttp():
    """aiohttp, imported when a target first uses this transport: it is a tenth of a second of every run's start,
    and the lean transport serves plain http://."""
    import aiohttp

    return aiohttp


async def _conn_start(session, ctx, params):
    out = ctx.trace_request_ctx
    if out is not None:
        out.connect_start = clock()


async def _conn_end(session, ctx, params):
    out = ctx.trace_request_ctx
    if out is not None:
        out.connected = clock()


def classify(exc: BaseException) -> str:
    """Map an aiohttp/OS exception to a record error class."""
    aiohttp = _aiohttp()
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "timeout"
    dns_error = getattr(aiohttp, "ClientConnectorDNSError", None)
    if dns_error is not None and isinstance(exc, dns_error):
        return "dns"
    if isinstance(exc, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError, ssl.SSLError)):
        return "tls"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(getattr(exc, "os_error", None), socket.gaierror):
            return "dns"
        return "connect"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError,
                        BrokenPipeError)):
        return "reset"
    if isinstance(exc, aiohttp.ClientOSError):
        return "reset"
    if isinstance(exc, (aiohttp.ClientResponseError, aiohttp.http_exceptions.HttpProcessingError)):
        return "bad_response"
    if isinstance(exc, (ConnectionRefusedError,)):
        return "connect"
    if isinstance(exc, socket.gaierror):
        return "dns"
    return "other"


class AiohttpTransport:
    """One ClientSession, unlimited connections (the engine enforces the in-flight cap)."""

    name = "aiohttp"
    submit = None  # no callback path: the engine runs send() in a Task per request

    def __init__(self, verify: bool = True):
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        aiohttp = _aiohttp()
        tc = aiohttp.TraceConfig()
        tc.on_connection_create_start.append(_conn_start)
        tc.on_connection_create_end.append(_conn_end)
        connector = aiohttp.TCPConnector(limit=0, ssl=None if self._verify else False, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            trace_configs=[tc],
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,  # inflated with a cap by loadgen.transports.inflate
            skip_auto_headers=("User-Agent",),
            headers={"User-Agent": "latbench", "Accept-Encoding": ACCEPT_ENCODING},
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req``; fill ``out``. Never raises for a failed request (but lets cancellation through)."""
        out.sent = clock()
        try:
            async with self._session.request(req.method, req.url, data=req.body or None,
                                             headers=sendable(req.headers), trace_request_ctx=out,
                                             allow_redirects=False) as resp:
                out.first_byte = clock()
                handler = inflating(handler, resp.headers.get("Content-Encoding"))
                handler.on_status(resp.status, out)
                try:
                    async for chunk in resp.content.iter_any():
                        handler.on_body(chunk, clock(), out)
                except StopResponse as exc:  # the handler read enough (a cap): the rest is never read
                    resp.close()  # and the connection goes with it
                    out.error_detail = str(exc)
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
