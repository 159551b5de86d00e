"""KServe v2 over gRPC (``api: kserve-v2`` with a ``grpc://host:port`` URL): unary ``ModelInfer``, or with
``stream: true`` Triton's bidirectional ``ModelStreamInfer`` for decoupled, token-streaming models.

The request is a ``ModelInferRequest`` serialized once per prompt (the tensors named in ``target.kserve``: the
prompt as BYTES, ``max_tokens`` INT32, and for streaming the ``stream`` BOOL input that asks the model to
stream). The gRPC transport (:mod:`loadgen.transports.grpc_client`) hands each response message to the
handler as one ``on_body`` call, and calls ``on_end`` when the call ended with status OK:

- unary: the ``ModelInferResponse`` must hold the answer tensor; ``num_input_tokens`` / ``num_output_tokens``
  output tensors, when present, are the usage. No TTFT: the answer comes whole.
- streaming: each ``ModelStreamInferResponse`` with an ``error_message`` is ``bad_stream``; one whose answer
  tensor is not empty is a token chunk (``num_output_tokens`` in it: the tokens it carried). The call's end is
  the stream's end (the server returns once the request is answered).
"""

from __future__ import annotations

from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler
from loadgen.protocols.kserve_grpc import MODEL_INFER, MODEL_STREAM_INFER, messages
from loadgen.protocols.shared import DETAIL, bad_response, counted_by_server, output_from_usage, target_headers
from loadgen.records.schema import Outcome
from loadgen.scenario.model import KServeTensors, Target, Workload
from loadgen.scenario.prompts import Prompt

__all__ = ["KServeGrpcProtocol", "is_grpc_url"]


def is_grpc_url(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0] in ("grpc", "grpcs")


def _first(t, raw: bytes | None):
    """The first element of an output tensor: from its typed contents, or its raw bytes (little-endian)."""
    c = t.contents
    if t.datatype == "BYTES":
        if c.bytes_contents:
            return c.bytes_contents[0]
        return raw[4:] if raw is not None and len(raw) >= 4 else None  # raw BYTES: a 4-byte length, then the bytes
    for values in (c.uint_contents, c.int_contents, c.int64_contents, c.uint64_contents):
        if values:
            return int(values[0])
    if raw:
        size = {"UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "UINT32": 4, "INT32": 4}.get(t.datatype, 8)
        return int.from_bytes(raw[:size], "little", signed=t.datatype.startswith("INT"))
    return None


def tensors(resp) -> dict:
    """name -> first element of each output tensor of a ModelInferResponse."""
    raws = list(resp.raw_output_contents)
    return {t.name: _first(t, raws[i] if i < len(raws) else None) for i, t in enumerate(resp.outputs)}


def _counts(out: Outcome, values: dict) -> int | None:
    it, ot = values.get("num_input_tokens"), values.get("num_output_tokens")
    if isinstance(it, int):
        out.prompt_tokens = it
    return ot if isinstance(ot, int) else None


class GrpcInferHandler(ResponseHandler):
    """Reads the one ModelInferResponse of a unary call."""

    __slots__ = ("_names", "_msg")

    def __init__(self, names: KServeTensors):
        self._names = names
        self._msg = None

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        self._msg = data

    def on_end(self, out: Outcome) -> None:
        if out.error:
            return
        try:
            resp = messages().ModelInferResponse.FromString(self._msg or b"")
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError: a broken message is bad data
            return bad_response(out, f"not a ModelInferResponse: {exc}")
        values = tensors(resp)
        if self._names.text_output not in values:
            return bad_response(out, f"no output tensor {self._names.text_output!r} in the response")
        ot = _counts(out, values)
        if ot is not None:
            output_from_usage(out, ot)


class GrpcStreamHandler(ResponseHandler):
    """Reads the ModelStreamInferResponse messages of a ModelStreamInfer call."""

    __slots__ = ("_names", "_count", "_counted", "_live", "_decode")

    def __init__(self, names: KServeTensors):
        self._names = names
        self._count = 0
        self._counted = 0
        self._live = True
        self._decode = messages().ModelStreamInferResponse.FromString

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        out.bytes_in += len(data)
        if not self._live or out.error:
            return
        try:
            msg = self._decode(data)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
            return self._fail(out, f"not a ModelStreamInferResponse: {exc}")
        if msg.error_message:
            return self._fail(out, "error in stream: " + msg.error_message)
        values = tensors(msg.infer_response)
        n = _counts(out, values)
        if values.get(self._names.text_output):
            if self._count == 0:
                out.start_tokens(now)
                out.first_answer = now
            self._count += 1
            out.token_times.append(now)
            if n is not None:
                out.chunk_tokens.append(n)
                self._counted += n

    def _fail(self, out: Outcome, detail: str) -> None:
        out.error, out.error_detail = "bad_stream", detail[:DETAIL]
        self._live = False

    def on_end(self, out: Outcome) -> None:
        if self._counted and len(out.chunk_tokens) == len(out.token_times):
            output_from_usage(out, self._counted)
        elif not counted_by_server(out):
            out.output_tokens, out.output_tokens_source = self._count, "chunks"


class KServeGrpcProtocol(ApiProtocol):
    """``inference.GRPCInferenceService/ModelInfer`` (or ``ModelStreamInfer`` with ``stream: true``)."""

    name = "kserve-v2"
    per_request = False
    streams_tokens = True  # ModelStreamInfer

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        url = (base_url or target.url or "").rstrip("/")
        if not is_grpc_url(url):
            raise ValueError(f"kserve-v2 over gRPC needs a grpc:// or grpcs:// URL, got {url!r}")
        if not model:
            raise ValueError("api kserve-v2: the model name goes into every request; set target.model")
        self.url, self.model, self.stream, self.names = url, model, target.stream, target.kserve
        self.path = MODEL_STREAM_INFER if self.stream else MODEL_INFER
        self.headers = tuple((k.lower(), v) for k, v in target_headers({}, target))  # gRPC metadata: lower case
        self._m = messages()

    def _request(self, prompt: Prompt):
        m, n = self._m, self.names
        req = m.ModelInferRequest(model_name=self.model)
        t = req.inputs.add(name=n.text_input, datatype="BYTES", shape=[1])
        t.contents.bytes_contents.append(prompt.text.encode())
        if n.max_tokens:
            t = req.inputs.add(name=n.max_tokens, datatype="INT32", shape=[1])
            t.contents.int_contents.append(prompt.max_tokens)
        if self.stream and n.stream:
            t = req.inputs.add(name=n.stream, datatype="BOOL", shape=[1])
            t.contents.bool_contents.append(True)
        return req

    def build(self, seq: int, prompt: Prompt) -> Request:
        body = self._request(prompt).SerializeToString()
        return Request("GRPC", self.url, self.path, self.headers, body, self.stream)

    def handler(self) -> ResponseHandler:
        return GrpcStreamHandler(self.names) if self.stream else GrpcInferHandler(self.names)
