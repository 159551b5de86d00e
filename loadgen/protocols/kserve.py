"""The KServe v2 / Triton inference protocol over HTTP/JSON (gRPC: :mod:`loadgen.protocols.kserve_grpc`).

- **kserve-v2** over HTTP: ``POST {base}/v2/models/{model}/infer`` with the text model's tensors (names in
  ``target.kserve``): the prompt as a one-element BYTES tensor, ``max_tokens`` as INT32. Success needs an
  ``outputs`` list holding the answer tensor; ``num_input_tokens`` / ``num_output_tokens`` output tensors,
  when the model returns them (Triton's vLLM backend does on request; the reference server always), are the
  usage. Never streamed over HTTP: a decoupled model streams over gRPC (``grpc://``) or with triton-generate.
- **triton-generate** (Triton's generate extension): ``POST {base}/v2/models/{model}/generate`` with
  ``{text_input, max_tokens}`` answers one JSON object; ``generate_stream`` (``stream: true``) answers one
  server-sent event per response, each with a piece of ``text_output`` (a token chunk; its
  ``num_output_tokens``, when present, the tokens it carried), and closes: the extension has no end event,
  so a stream is complete when the connection closes cleanly. ``{"error": ...}`` in the stream is ``bad_stream``.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from loadgen.protocols.base import ApiProtocol, Request, ResponseHandler
from loadgen.protocols.shared import (
    EventStreamHandler,
    JsonBodyHandler,
    as_int,
    base_url_of,
    dumps,
    output_from_usage,
    path_of,
    target_headers,
)
from loadgen.protocols.sse import MAX_EVENT_BYTES
from loadgen.records.schema import Outcome
from loadgen.scenario.model import KServeTensors, Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.urls import join_url

__all__ = ["KServeHttpProtocol", "TritonGenerateProtocol"]


def _model_root(target: Target, model: str | None, base_url: str | None) -> str:
    """``{base}/v2/models/{model}``."""
    if not model:
        raise ValueError(f"api {target.api}: the model name goes into the URL; set target.model")
    return join_url(base_url_of(target, base_url), f"/v2/models/{quote(model, safe='')}")


def _scalar(v):
    return v[0] if isinstance(v, list) and len(v) == 1 else v


class KServeInferJson(JsonBodyHandler):
    __slots__ = ("_names",)
    api = "kserve-v2"

    def __init__(self, names: KServeTensors):
        super().__init__()
        self._names = names

    def read(self, obj: dict, out: Outcome) -> str | None:
        outputs = obj.get("outputs")
        if not isinstance(outputs, list):  # too long to parse (a Large list): its tensors are not looked into
            return None
        by_name = {t.get("name"): t for t in outputs if isinstance(t, dict)}
        if self._names.text_output not in by_name:
            return f"no output tensor {self._names.text_output!r} in the response"
        read_counts(out, {k: _scalar(t.get("data")) for k, t in by_name.items()})
        return None


def read_counts(out: Outcome, values: dict) -> None:
    """Token counts of a KServe/Triton answer, when the model returns them."""
    it, ot = as_int(values.get("num_input_tokens")), as_int(values.get("num_output_tokens"))
    if it is not None:
        out.prompt_tokens = it
    if ot is not None:
        output_from_usage(out, ot)


class KServeHttpProtocol(ApiProtocol):
    """``POST {base}/v2/models/{model}/infer`` (KServe v2 over HTTP/JSON)."""

    name = "kserve-v2"
    per_request = False

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        if target.stream:
            raise ValueError("api kserve-v2 over HTTP does not stream: set stream: false, use a grpc:// URL "
                             "(ModelStreamInfer), or api: triton-generate")
        self.url = join_url(_model_root(target, model, base_url), "/infer")
        self.path = path_of(self.url)
        self.names = target.kserve
        self.headers = target_headers({"Content-Type": "application/json", "Accept": "application/json"}, target)

    def _body(self, prompt: Prompt) -> dict:
        n = self.names
        inputs = [{"name": n.text_input, "shape": [1], "datatype": "BYTES", "data": [prompt.text]}]
        if n.max_tokens:
            inputs.append({"name": n.max_tokens, "shape": [1], "datatype": "INT32", "data": [prompt.max_tokens]})
        return {"inputs": inputs}

    def build(self, seq: int, prompt: Prompt) -> Request:
        return Request("POST", self.url, self.path, self.headers, dumps(self._body(prompt)).encode(), False)

    def handler(self) -> ResponseHandler:
        return KServeInferJson(self.names)


class TritonStream(EventStreamHandler):
    __slots__ = ("_key", "_counted")
    end_event = False

    def __init__(self, key: str, max_event_bytes: int = MAX_EVENT_BYTES):
        super().__init__(max_event_bytes)
        self._key = key
        self._counted = 0  # tokens the responses said they carried (num_output_tokens)

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        if obj.get("error"):
            return "error in stream: " + json.dumps(obj["error"])
        if obj.get(self._key):
            n = as_int(obj.get("num_output_tokens"))
            self.token(out, now, True, n)
            if n is not None:
                self._counted += n
        it = as_int(obj.get("num_input_tokens"))
        if it is not None:
            out.prompt_tokens = it
        return None

    def on_end(self, out: Outcome) -> None:
        if self._counted and len(out.chunk_tokens) == len(out.token_times):
            output_from_usage(out, self._counted)
        EventStreamHandler.on_end(self, out)


class TritonGenerateJson(JsonBodyHandler):
    __slots__ = ("answer_key",)
    api = "triton-generate"

    def __init__(self, key: str):
        super().__init__()
        self.answer_key = key  # the answer tensor, which shape_problem requires

    def read(self, obj: dict, out: Outcome) -> str | None:
        read_counts(out, obj)
        return None


class TritonGenerateProtocol(ApiProtocol):
    """``POST {base}/v2/models/{model}/generate`` or ``generate_stream`` (Triton's generate extension)."""

    name = "triton-generate"
    per_request = False
    streams_tokens = True

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        self.stream = target.stream
        self.url = join_url(_model_root(target, model, base_url), "/generate_stream" if self.stream else "/generate")
        self.max_event_bytes = target.max_event_bytes
        self.path = path_of(self.url)
        self.names = target.kserve
        accept = "text/event-stream" if self.stream else "application/json"
        self.headers = target_headers({"Content-Type": "application/json", "Accept": accept}, target)

    def _body(self, prompt: Prompt) -> dict:
        n = self.names
        body: dict = {n.text_input: prompt.text}
        if n.max_tokens:
            body[n.max_tokens] = prompt.max_tokens
        if n.stream:
            body[n.stream] = self.stream
        return body

    def build(self, seq: int, prompt: Prompt) -> Request:
        return Request("POST", self.url, self.path, self.headers, dumps(self._body(prompt)).encode(), self.stream)

    def handler(self) -> ResponseHandler:
        key = self.names.text_output
        return TritonStream(key, self.max_event_bytes) if self.stream else TritonGenerateJson(key)
