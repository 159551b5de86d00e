"""The gRPC transport (``grpc://`` / ``grpcs://`` targets: KServe v2 over gRPC): one grpc.aio channel, HTTP/2
multiplexed, the request already serialized by the protocol.

A :class:`~loadgen.protocols.base.Request` here is ``method "GRPC"``, ``url`` the channel's address, ``path``
the full method name (``/inference.GRPCInferenceService/ModelInfer``), ``body`` the serialized request message,
``headers`` the call's metadata and ``stream`` True for a bidirectional streaming method (one request sent,
every response read). Messages travel as bytes: the protocol's handler decodes them. ``first_byte`` is the
arrival of the first response message (gRPC shows nothing earlier); the channel connects once, so
``connect_start`` / ``connected`` stay empty.

A call that ends with a status other than OK becomes the error class of its HTTP equivalent (gRPC's own
mapping: RESOURCE_EXHAUSTED is ``http_429``, INTERNAL ``http_5xx``...), DEADLINE_EXCEEDED ``timeout``, and
UNAVAILABLE ``connect`` before any answer, ``reset`` after one; ``status`` holds that HTTP code.
Requires the grpc extra (``pip install 'latbench[grpc]'``); grpcio is imported when the transport starts.
"""

from __future__ import annotations

import time

from loadgen.errors import UsageError
from loadgen.protocols.base import Request, ResponseHandler
from loadgen.records.schema import Outcome

__all__ = ["GrpcTransport", "HTTP_OF"]

clock = time.perf_counter

#: gRPC status code name -> the HTTP status it corresponds to.
HTTP_OF = {"OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
           "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
           "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500,
           "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401}


class GrpcTransport:
    """Sends gRPC calls on one channel to ``url`` (``grpc://host:port`` plain, ``grpcs://`` with TLS)."""

    name = "grpc"
    submit = None  # a Task per request: grpc.aio's calls are awaitables

    def __init__(self, url: str, verify: bool = True):
        self.url = url
        self.verify = verify
        self._channel = None
        self._calls: dict = {}
        self._grpc = None

    async def start(self) -> None:
        try:
            import grpc
        except ImportError:
            raise UsageError("gRPC targets need the grpc extra: pip install 'latbench[grpc]'") from None
        self._grpc = grpc
        scheme, _, address = self.url.partition("://")
        address = address.split("/", 1)[0]
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if scheme == "grpcs":
            if not self.verify:
                raise UsageError("grpcs:// with verify: false is not supported; give the server's CA instead")
            self._channel = grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(), options=options)
        else:
            self._channel = grpc.aio.insecure_channel(address, options=options)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _callable(self, req: Request):
        key = (req.path, req.stream)
        c = self._calls.get(key)
        if c is None:  # no (de)serializer: messages pass as bytes, encoded and decoded by the protocol
            c = self._channel.stream_stream(req.path) if req.stream else self._channel.unary_unary(req.path)
            self._calls[key] = c
        return c

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        grpc = self._grpc
        metadata = req.headers or None
        call_fn = self._callable(req)
        started = False
        out.sent = clock()
        try:
            if req.stream:
                call = call_fn(iter((req.body,)), metadata=metadata)
                async for msg in call:
                    now = clock()
                    if not started:
                        started = True
                        out.first_byte = now
                        handler.on_status(200, out)
                    handler.on_body(msg, now, out)
                await call.code()  # the status: raised as AioRpcError when not OK
            else:
                msg = await call_fn(req.body, metadata=metadata)
                now = clock()
                started = True
                out.first_byte = now
                handler.on_status(200, out)
                handler.on_body(msg, now, out)
        except grpc.aio.AioRpcError as exc:
            out.done = clock()
            code = exc.code().name
            out.status = HTTP_OF.get(code, 500)
            if code == "DEADLINE_EXCEEDED":
                out.error = "timeout"
            elif code == "UNAVAILABLE":
                out.error = "reset" if started else "connect"
            else:
                handler.on_status(out.status, out)
                out.error = out.error or "bad_stream"
            out.error_detail = f"gRPC {code}: {exc.details()}"[:200]
            return
        if not started:  # a stream that answered nothing
            out.first_byte = clock()
            handler.on_status(200, out)
        out.done = clock()
        handler.on_end(out)
