"""KServe v2 over gRPC for the reference server (``--grpc-port``): ``ModelInfer``, Triton's ``ModelStreamInfer``
(one response per token, for decoupled models), ``ServerLive``, ``ServerReady``, ``ModelReady``,
``ModelMetadata``; on the server's own event loop (grpc.aio), on the same engine as the HTTP APIs.

The messages come from the compiled descriptor beside this file (``grpc_predict_v2.desc``, made by latbench's
``python -m loadgen.protocols.kserve_grpc.generate`` from the vendored grpc_predict_v2.proto; this program
imports nothing of latbench, so it keeps its own copy, checked to be the same by the tests). Tensors are those
of the HTTP endpoints, from :mod:`.kserve`: ``text_input``, ``max_tokens`` in; ``text_output``,
``num_input_tokens``, ``num_output_tokens`` out (streamed: ``num_output_tokens`` 1 in each response, and
``num_input_tokens`` in the first). A refused request ends the call with the gRPC status of its
HTTP status (400 INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, else INTERNAL);
in a stream it is a response with ``error_message``.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from .generation import ServerState, begin
from .kserve import INPUTS, MODEL_VERSION, OUTPUTS, PLATFORM, run_to_end, stream_pieces, text_request
from .openai_protocol import ApiError

DESCRIPTOR_FILE = Path(__file__).resolve().parent / "grpc_predict_v2.desc"
SERVICE = "inference.GRPCInferenceService"


@lru_cache(maxsize=1)
def messages() -> SimpleNamespace:
    """The protocol's message classes, built from the compiled descriptor (protobuf imported here: optional)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_FILE.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    names = ("ModelInferRequest", "ModelInferResponse", "ModelStreamInferResponse", "ServerLiveResponse",
             "ServerReadyResponse", "ModelReadyRequest", "ModelReadyResponse", "ModelMetadataRequest",
             "ModelMetadataResponse")
    return SimpleNamespace(**{n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{n}"))
                              for n in names})


def _first(t, raw: bytes | None):
    c = t.contents
    if t.datatype == "BYTES":
        if c.bytes_contents:
            return c.bytes_contents[0].decode("utf-8", "replace")
        return raw[4:].decode("utf-8", "replace") if raw is not None and len(raw) >= 4 else None
    for values in (c.int_contents, c.int64_contents, c.uint_contents, c.uint64_contents):
        if values:
            return int(values[0])
    if raw:
        size = {"INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "INT32": 4, "UINT32": 4}.get(t.datatype, 8)
        return int.from_bytes(raw[:size], "little", signed=t.datatype.startswith("INT"))
    return None


def request_inputs(req) -> tuple[object, object]:
    """(text, max_tokens) of a ModelInferRequest; ApiError when there is no text_input."""
    raws = list(req.raw_input_contents)
    values = {t.name: _first(t, raws[i] if i < len(raws) else None) for i, t in enumerate(req.inputs)}
    if "text_input" not in values:
        raise ApiError(400, "no input tensor named 'text_input'", param="inputs")
    return values["text_input"], values.get("max_tokens")


def _status_name(status: int) -> str:
    return {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE",
            504: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT"}.get(status, "INTERNAL")


def _add(resp, name: str, datatype: str, value) -> None:
    t = resp.outputs.add(name=name, datatype=datatype, shape=[1])
    if datatype == "BYTES":
        t.contents.bytes_contents.append(value.encode())
    else:
        t.contents.uint_contents.append(value)


class KServeGrpcService:
    """The KServe v2 gRPC service of one server; each method is an RPC handler on serialized messages."""

    def __init__(self, state: ServerState, grpc_module):
        self.state, self.grpc, self.m = state, grpc_module, messages()

    def handler(self):
        """The generic RPC handler of the service (no (de)serializers: the methods take and return bytes)."""
        unary = self.grpc.unary_unary_rpc_method_handler
        return self.grpc.method_handlers_generic_handler(SERVICE, {
            "ModelInfer": unary(self.model_infer),
            "ModelStreamInfer": self.grpc.stream_stream_rpc_method_handler(self.model_stream_infer),
            "ServerLive": unary(self.server_live),
            "ServerReady": unary(self.server_ready),
            "ModelReady": unary(self.model_ready),
            "ModelMetadata": unary(self.model_metadata),
        })

    async def model_infer(self, raw: bytes, ctx) -> bytes:
        state, m, arrival = self.state, self.m, time.perf_counter()
        try:
            req = m.ModelInferRequest.FromString(raw)
            text, max_tokens = request_inputs(req)
            out, pt, ot = await run_to_end(state, text_request(state, req.model_name, text, max_tokens, False),
                                           arrival)
        except ApiError as exc:
            state.metrics.request_done(exc.status)
            await ctx.abort(getattr(self.grpc.StatusCode, _status_name(exc.status)), exc.message)
        state.metrics.request_done(200)
        resp = m.ModelInferResponse(model_name=state.served_model, model_version=MODEL_VERSION, id=req.id)
        for (name, datatype), value in zip(OUTPUTS, (out, pt, ot)):
            _add(resp, name, datatype, value)
        return resp.SerializeToString()

    async def model_stream_infer(self, requests, ctx):
        state, m = self.state, self.m
        async for raw in requests:
            arrival = time.perf_counter()
            try:
                req = m.ModelInferRequest.FromString(raw)
                text, max_tokens = request_inputs(req)
                g = await begin(state, text_request(state, req.model_name, text, max_tokens, True), arrival)
            except ApiError as exc:
                state.metrics.request_done(exc.status)
                yield m.ModelStreamInferResponse(error_message=exc.message).SerializeToString()
                continue
            try:
                async for batch in stream_pieces(state, g, arrival):
                    for piece in batch:
                        yield self._stream_response(req.id, piece).SerializeToString()
            except ApiError as exc:
                yield m.ModelStreamInferResponse(error_message=exc.message).SerializeToString()
            finally:
                g.close(state)  # also when the client went away: the slot is freed
            state.metrics.request_done(200)

    def _stream_response(self, request_id: str, piece):
        if piece.error is not None:
            return self.m.ModelStreamInferResponse(error_message=piece.error)
        r = self.m.ModelStreamInferResponse()
        ir = r.infer_response
        ir.model_name, ir.model_version, ir.id = self.state.served_model, MODEL_VERSION, request_id
        _add(ir, "text_output", "BYTES", piece.text)
        _add(ir, "num_output_tokens", "UINT32", 1)
        if piece.input_tokens is not None:  # the prompt's length, once
            _add(ir, "num_input_tokens", "UINT32", piece.input_tokens)
        return r

    async def server_live(self, raw: bytes, ctx) -> bytes:
        return self.m.ServerLiveResponse(live=True).SerializeToString()

    async def server_ready(self, raw: bytes, ctx) -> bytes:
        return self.m.ServerReadyResponse(ready=self.state.engine.state in ("ready", "lazy")).SerializeToString()

    async def model_ready(self, raw: bytes, ctx) -> bytes:
        req = self.m.ModelReadyRequest.FromString(raw)
        ok = req.name == self.state.served_model and self.state.engine.state in ("ready", "lazy")
        return self.m.ModelReadyResponse(ready=ok).SerializeToString()

    async def model_metadata(self, raw: bytes, ctx) -> bytes:
        req = self.m.ModelMetadataRequest.FromString(raw)
        if req.name != self.state.served_model:
            await ctx.abort(self.grpc.StatusCode.NOT_FOUND, f"unknown model {req.name!r}")
        resp = self.m.ModelMetadataResponse(name=self.state.served_model, versions=[MODEL_VERSION], platform=PLATFORM)
        for name, dt in INPUTS:
            resp.inputs.add(name=name, datatype=dt, shape=[1])
        for name, dt in OUTPUTS:
            resp.outputs.add(name=name, datatype=dt, shape=[1])
        return resp.SerializeToString()


async def start_grpc(state: ServerState, host: str, port: int):
    """Start the gRPC server on the running loop; returns (server, bound port)."""
    try:
        import grpc
    except ImportError:
        raise ValueError("--grpc-port needs grpcio and protobuf (pip install 'latbench[grpc]')") from None
    service = KServeGrpcService(state, grpc)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", state.config.max_body_bytes)])
    server.add_generic_rpc_handlers((service.handler(),))
    host_part = f"[{host}]" if ":" in host else host
    bound = server.add_insecure_port(f"{host_part}:{port}")
    if bound == 0:
        raise ValueError(f"cannot bind gRPC to {host_part}:{port}")
    await server.start()
    return server, bound
