"""Compressed response bodies, inflated with a cap, the same way on every transport.

A transport reads a response's ``Content-Encoding`` and wraps the request's handler with :func:`inflating`: the
handler then gets the inflated body in pieces of at most :data:`PIECE` bytes as the compressed bytes arrive,
so a 1 MB gzip body that inflates to 1 GiB is never held. Past :data:`MAX_INFLATED_BYTES` (or a body that does
not inflate) the request is ``bad_response`` and no more is read (:class:`~loadgen.protocols.base.StopResponse`:
the transport closes the connection). ``gzip`` (``x-gzip``) and ``deflate`` (zlib or raw) are inflated; any
other coding reaches the handler as it came (the protocol's shape check then refuses it).
"""

from __future__ import annotations

import zlib

from loadgen.protocols.base import ResponseHandler, StopResponse
from loadgen.records.schema import Outcome

__all__ = ["ACCEPT_ENCODING", "MAX_INFLATED_BYTES", "PIECE", "inflating"]

#: What the transports that ask for compressed bodies (aiohttp, httpx) accept: the codings inflated here.
ACCEPT_ENCODING = "gzip, deflate"
#: A response's body inflates to at most this many bytes; past it the request is bad_response.
MAX_INFLATED_BYTES = 64 << 20
#: The largest piece of inflated body handed to the handler at once.
PIECE = 256 << 10

_GZIP = 16 + zlib.MAX_WBITS


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"


class Inflating(ResponseHandler):
    """Inflates a compressed body on its way to ``inner`` (which sees only inflated bytes)."""

    __slots__ = ("inner", "_coding", "_z", "_cap", "_total", "_read")

    def __init__(self, inner: ResponseHandler, coding: str, cap: int = MAX_INFLATED_BYTES):
        self.inner = inner
        self._coding = coding
        self._z = zlib.decompressobj(_GZIP) if coding != "deflate" else None  # deflate: zlib or raw, seen at once
        self._cap = cap
        self._total = 0  # inflated bytes so far
        self._read = 0  # compressed bytes so far

    def on_status(self, status: int, out: Outcome) -> None:
        self.inner.on_status(status, out)

    def _fail(self, out: Outcome, detail: str):
        if not out.error:  # an HTTP error class already set stays
            out.error = "bad_response"
        raise StopResponse(detail)

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        self._read += len(data)
        z = self._z
        if z is None:  # RFC 9110's deflate is zlib-wrapped; some servers send it raw
            zlib_header = len(data) < 2 or (data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0)
            z = self._z = zlib.decompressobj(zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS)
        inner = self.inner
        try:
            piece = z.decompress(data, PIECE)
            while True:
                if piece:
                    self._total += len(piece)
                    if self._total > self._cap:
                        self._fail(out, f"the {self._coding} body inflates past {_mib(self._cap)} "
                                        f"({_mib(self._read)} read): refused")
                    inner.on_body(piece, now, out)
                tail = z.unconsumed_tail
                if not tail:
                    break
                piece = z.decompress(tail, PIECE)
        except zlib.error as exc:
            self._fail(out, f"the {self._coding} body does not inflate: {exc}")

    def on_end(self, out: Outcome) -> None:
        if self._read and self._z is not None and not self._z.eof and not out.error:
            out.error = "bad_response"
            out.error_detail = f"the {self._coding} body ended before its end ({_mib(self._read)} read)"
            return
        self.inner.on_end(out)


def inflating(handler: ResponseHandler, content_encoding: str | None,
              cap: int = MAX_INFLATED_BYTES) -> ResponseHandler:
    """``handler``, wrapped to inflate a body of ``content_encoding`` (a response's header) when it is gzip or
    deflate; ``handler`` itself for any other (or none)."""
    if not content_encoding:
        return handler
    coding = content_encoding.strip().lower()
    if coding == "x-gzip":
        coding = "gzip"
    if coding not in ("gzip", "deflate"):
        return handler
    return Inflating(handler, coding, cap)
