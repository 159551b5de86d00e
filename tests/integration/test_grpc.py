"""KServe v2 over gRPC: the vendored interface, the gRPC transport against a gRPC server of known timing, and
latbench against the reference server's --grpc-port (unary ModelInfer, streaming ModelStreamInfer)."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("google.protobuf")

from google.protobuf import descriptor_pb2  # noqa: E402

from loadgen.protocols.kserve_grpc import DESCRIPTOR_FILE, MODEL_INFER, MODEL_STREAM_INFER, messages  # noqa: E402
from loadgen.protocols.kserve_grpc.generate import compile_descriptor  # noqa: E402
from reference_server.background import BackgroundServer  # noqa: E402
from reference_server.config import ServerConfig  # noqa: E402
from tests.helpers import pct, run  # noqa: E402
from tests.servers import sleep_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TTFT, GAP, TOKENS = 0.08, 0.01, 20


def test_one_interface_for_latbench_and_the_reference_server():
    """The reference server keeps its own copy of the compiled descriptor (it imports nothing of latbench): the
    same bytes; and, where grpcio-tools is installed, both are what the vendored .proto compiles to."""
    ours = DESCRIPTOR_FILE.read_bytes()
    assert (ROOT / "reference_server" / "api" / "grpc_predict_v2.desc").read_bytes() == ours
    assert (DESCRIPTOR_FILE.parent / "NOTICE").read_text().count("Apache License") == 1
    try:
        fresh = compile_descriptor()
    except ImportError:
        pytest.skip("grpcio-tools not installed: the descriptor cannot be compiled here")
    assert descriptor_pb2.FileDescriptorSet.FromString(fresh) == descriptor_pb2.FileDescriptorSet.FromString(ours)


def test_the_wire_contract_is_the_published_one():
    """Field numbers and names a KServe v2 / Triton server relies on (a renumbered field would break the wire)."""
    m = messages()
    fields = {f.name: f.number for f in m.ModelInferRequest.DESCRIPTOR.fields}
    assert fields == {"model_name": 1, "model_version": 2, "id": 3, "parameters": 4, "inputs": 5, "outputs": 6,
                      "raw_input_contents": 7}
    tensor = {f.name: f.number for f in m.ModelInferRequest.DESCRIPTOR.nested_types_by_name["InferInputTensor"].fields}
    assert tensor == {"name": 1, "datatype": 2, "shape": 3, "parameters": 4, "contents": 5}
    assert {f.name: f.number for f in m.ModelStreamInferResponse.DESCRIPTOR.fields} == {
        "error_message": 1, "infer_response": 2}
    contents = {f.name: f.number for f in m.InferTensorContents.DESCRIPTOR.fields}
    assert contents["bytes_contents"] == 8 and contents["int_contents"] == 2 and contents["uint_contents"] == 4
    service = m.ModelInferRequest.DESCRIPTOR.file.services_by_name["GRPCInferenceService"]
    assert {"ModelInfer", "ModelStreamInfer", "ServerLive", "ServerReady", "ModelReady",
            "ModelMetadata"} <= set(service.methods_by_name)
    assert MODEL_INFER == "/inference.GRPCInferenceService/ModelInfer"
    assert MODEL_STREAM_INFER == "/inference.GRPCInferenceService/ModelStreamInfer"


class KnownGrpcServer:
    """A gRPC KServe v2 server of known timing: ModelInfer answers after ttft + (tokens - 1) gaps; ModelStreamInfer
    sends token i at ttft + i * gap after the request arrived. It records the requests it received."""

    def __init__(self):
        self.requests = []
        self.port = None
        self._ready = threading.Event()

    def _serve(self):
        m = messages()

        def add(resp, name, dt, value):
            t = resp.outputs.add(name=name, datatype=dt, shape=[1])
            (t.contents.bytes_contents if dt == "BYTES" else t.contents.uint_contents).append(value)

        async def infer(raw, ctx):
            start = time.perf_counter()
            req = m.ModelInferRequest.FromString(raw)
            self.requests.append(req)
            if req.model_name != "m":
                await ctx.abort(grpc.StatusCode.NOT_FOUND, "unknown model")
            await sleep_until(start + TTFT + (TOKENS - 1) * GAP)
            resp = m.ModelInferResponse(model_name="m")
            add(resp, "text_output", "BYTES", b"hello")
            add(resp, "num_input_tokens", "UINT32", 7)
            add(resp, "num_output_tokens", "UINT32", TOKENS)
            return resp.SerializeToString()

        async def stream(requests, ctx):
            async for raw in requests:
                start = time.perf_counter()
                self.requests.append(m.ModelInferRequest.FromString(raw))
                for i in range(TOKENS):
                    await sleep_until(start + TTFT + i * GAP)
                    r = m.ModelStreamInferResponse()
                    add(r.infer_response, "text_output", "BYTES", f"t{i} ".encode())
                    add(r.infer_response, "num_output_tokens", "UINT32", 1)
                    yield r.SerializeToString()

        async def main():
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
                "ModelInfer": grpc.unary_unary_rpc_method_handler(infer),
                "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(stream)}),))
            self.port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            self._ready.set()
            await server.wait_for_termination()

        asyncio.run(main())

    def start(self):
        threading.Thread(target=self._serve, daemon=True).start()
        self._ready.wait(10)
        return self


@pytest.fixture(scope="module")
def known_grpc():
    return KnownGrpcServer().start()


def scenario(url: str, stream: bool, model: str = "m", qps: int = 10) -> str:
    return f"""
    name: g
    target: {{url: "{url}", api: kserve-v2, stream: {str(stream).lower()}, model: "{model}"}}
    workload: {{prompts: {{input_tokens: 8, output_tokens: 20, distinct: 4}}}}
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 1s, qps: {qps}}}
    """


def test_unary_model_infer_latency_and_usage(tmp_path, known_grpc):
    _, s, df = run(tmp_path, scenario(f"grpc://127.0.0.1:{known_grpc.port}", False))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 9, o["errors"]
    wait = TTFT + (TOKENS - 1) * GAP
    assert wait <= pct(o, "latency", "p50") < wait + 0.03
    assert (df["output_tokens"] == TOKENS).all() and (df["prompt_tokens"] == 7).all()
    req = known_grpc.requests[-1]
    names = [(t.name, t.datatype, list(t.shape)) for t in req.inputs]
    assert names == [("text_input", "BYTES", [1]), ("max_tokens", "INT32", [1])]
    assert req.inputs[1].contents.int_contents[0] == 20 and req.model_name == "m"


def test_streaming_model_stream_infer_ttft_and_itl(tmp_path, known_grpc):
    _, s, df = run(tmp_path, scenario(f"grpc://127.0.0.1:{known_grpc.port}", True))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 9, o["errors"]
    assert TTFT <= pct(o, "ttft", "p50") < TTFT + 0.025
    assert pct(o, "itl", "p50") == pytest.approx(GAP, abs=0.002)
    assert (df["output_tokens"] == TOKENS).all() and (df["chunk_tokens_source"] == "chunk_usage").all()
    req = known_grpc.requests[-1]
    assert [t.name for t in req.inputs] == ["text_input", "max_tokens", "stream"]
    assert req.inputs[2].contents.bool_contents[0] is True


def test_grpc_errors_are_classified(tmp_path, known_grpc):
    _, s, df = run(tmp_path, scenario(f"grpc://127.0.0.1:{known_grpc.port}", False, model="other", qps=4))
    assert set(df["error"]) == {"http_4xx"} and set(df["status"]) == {404}
    # nothing listens on port 9: what the load path records (the pre-flight would stop the run before any load)
    _, s, df = run(tmp_path / "b", scenario("grpc://127.0.0.1:9", False, qps=4), preflight=False)
    assert set(df["error"]) == {"connect"}


def test_reference_server_serves_kserve_v2_over_grpc(tmp_path):
    """A managed reference target with transport: grpc: the server is started with a gRPC port, and both methods
    answer with the server's own token counts."""
    for stream in (False, True):
        text = f"""
        name: r
        target:
          reference: {{arch: optimized, model: tiny, backend: numpy}}
          api: kserve-v2
          transport: grpc
          stream: {str(stream).lower()}
        workload: {{prompts: {{input_tokens: 4, output_tokens: 12, distinct: 4}}, ignore_eos: true}}
        load:
          arrival: constant
          phases:
            - {{name: main, duration: 1s, qps: 8}}
        """
        _, s, df = run(tmp_path / str(stream), text)
        o = s["overall"]
        assert o["ok"] == o["count"] >= 7, o["errors"]
        assert (df["output_tokens"] == 12).all() and (df["prompt_tokens"] > 0).all()
        assert o["metrics"]["ttft"]["n"] == (o["ok"] if stream else 0)


def _gauge(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith(f"refserver:{name}{{")))


def test_an_aborted_grpc_stream_frees_its_slot(tmp_path, tmp_path_factory):
    cfg = ServerConfig.from_preset("batching", model="tiny", backend="numpy", grpc_port=0,
                                   cache_dir=str(tmp_path_factory.getbasetemp() / "weights-cache"))
    with BackgroundServer(cfg) as srv:
        port = srv.resolved["grpc_port"]
        text = f"""
        name: c
        target: {{url: "grpc://127.0.0.1:{port}", api: kserve-v2, stream: true, model: tiny}}
        workload:
          prompts: {{input_tokens: 4, output_tokens: 1500}}
          cancel: {{fraction: 1.0, after: 300ms}}
        load:
          phases:
            - {{name: main, duration: 1s, concurrency: 2}}
        """
        _, s, df = run(tmp_path, text)
        t_end = time.monotonic()
        while _gauge(srv.url, "num_requests_running") > 0 and time.monotonic() < t_end + 2:
            time.sleep(0.02)
        assert _gauge(srv.url, "num_requests_running") == 0 and time.monotonic() - t_end < 1.0
        assert (df["error"] == "aborted").all() and len(df) >= 4 and (df["output_tokens"] < 1500).all()
