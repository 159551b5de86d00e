"""The KServe v2 / Triton inference protocol over HTTP/JSON, on the same engine as the OpenAI API.

- ``POST /v2/models/{model}/infer``: the text model's tensors (:mod:`.kserve`) in ``inputs``; the answer's
  in ``outputs``.
- ``POST /v2/models/{model}/generate`` and ``generate_stream`` (Triton's generate extension): a JSON object
  ``{text_input, max_tokens}``; ``generate`` answers one object, ``generate_stream`` one server-sent event per
  token ``{model_name, model_version, text_output, num_output_tokens: 1}`` (the first also
  ``num_input_tokens``) and then closes (the extension has no end event).
- ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2/models/{model}``, ``/v2/models/{model}/ready``.

Errors answer ``{"error": message}`` with the status, as KServe servers do.
"""

from __future__ import annotations

import json
import time

from aiohttp import web

from .generation import ServerState, begin
from .kserve import INPUTS, MODEL_VERSION, OUTPUTS, PLATFORM, run_to_end, stream_pieces, text_request
from .openai_protocol import ApiError, parse_json


def tensor_inputs(body: dict) -> tuple[object, object]:
    """(text, max_tokens) from a KServe v2 infer body's ``inputs``."""
    inputs = body.get("inputs")
    if not isinstance(inputs, list):
        raise ApiError(400, "'inputs' must be a list of tensors", param="inputs")
    by_name = {t.get("name"): t for t in inputs if isinstance(t, dict)}
    text = by_name.get("text_input", {}).get("data")
    if isinstance(text, list) and len(text) == 1:
        text = text[0]
    mt = by_name.get("max_tokens", {}).get("data")
    mt = mt[0] if isinstance(mt, list) and len(mt) == 1 else mt
    if "text_input" not in by_name:
        raise ApiError(400, "no input tensor named 'text_input'", param="inputs")
    return text, mt


def _error(exc: ApiError) -> web.Response:
    return web.json_response({"error": exc.message}, status=exc.status)


def _tensor(name: str, datatype: str, value) -> dict:
    return {"name": name, "datatype": datatype, "shape": [1], "data": [value]}


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class KServeHttpRoutes:
    """The KServe v2 HTTP routes of one server; each method is a route handler."""

    def __init__(self, state: ServerState):
        self.state = state

    def add_to(self, app: web.Application) -> None:
        """Register the routes on ``app``."""
        app.router.add_post("/v2/models/{model}/infer", self.infer)
        app.router.add_post("/v2/models/{model}/versions/{version}/infer", self.infer)
        app.router.add_post("/v2/models/{model}/generate", self.generate)
        app.router.add_post("/v2/models/{model}/generate_stream", self.generate_stream)
        app.router.add_get("/v2/health/live", self.live)
        app.router.add_get("/v2/health/ready", self.ready)
        app.router.add_get("/v2/models/{model}/ready", self.model_ready)
        app.router.add_get("/v2/models/{model}", self.model_metadata)

    async def infer(self, request: web.Request) -> web.Response:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            text, max_tokens = tensor_inputs(body)
            req = text_request(self.state, request.match_info["model"], text, max_tokens, False)
            out, pt, ot = await run_to_end(self.state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        values = dict(zip((name for name, _ in OUTPUTS), (out, pt, ot)))
        resp = {"model_name": self.state.served_model, "model_version": MODEL_VERSION,
                "outputs": [_tensor(name, dt, values[name]) for name, dt in OUTPUTS]}
        if isinstance(body.get("id"), str):
            resp["id"] = body["id"]
        return web.json_response(resp)

    async def generate(self, request: web.Request) -> web.Response:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            req = text_request(self.state, request.match_info["model"], body.get("text_input"),
                               body.get("max_tokens"), False)
            out, pt, ot = await run_to_end(self.state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        return web.json_response({"model_name": self.state.served_model, "model_version": MODEL_VERSION,
                                  "text_output": out, "num_input_tokens": pt, "num_output_tokens": ot})

    async def generate_stream(self, request: web.Request) -> web.StreamResponse:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            req = text_request(self.state, request.match_info["model"], body.get("text_input"),
                               body.get("max_tokens"), True)
            g = await begin(self.state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        head = {"model_name": self.state.served_model, "model_version": MODEL_VERSION}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            async for batch in stream_pieces(self.state, g, arrival):
                if not resp.prepared:
                    await resp.prepare(request)
                await resp.write(b"".join(_sse(self._piece(head, p)) for p in batch))
        except ApiError as exc:
            if not resp.prepared:
                return _error(exc)
            await resp.write(_sse({"error": exc.message}))
        finally:
            g.close(self.state)
        if not resp.prepared:
            await resp.prepare(request)
        await resp.write_eof()
        return resp

    @staticmethod
    def _piece(head: dict, p) -> dict:
        if p.error is not None:
            return {"error": p.error}
        piece = {**head, "text_output": p.text, "num_output_tokens": 1}
        if p.input_tokens is not None:  # the prompt's length, once
            piece["num_input_tokens"] = p.input_tokens
        return piece

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def ready(self, request: web.Request) -> web.Response:
        ok = self.state.engine.state in ("ready", "lazy")
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    async def model_ready(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.state.served_model:
            return _error(ApiError(404, f"unknown model {request.match_info['model']!r}"))
        return await self.ready(request)

    async def model_metadata(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.state.served_model:
            return _error(ApiError(404, f"unknown model {request.match_info['model']!r}"))
        return web.json_response({
            "name": self.state.served_model, "versions": [MODEL_VERSION], "platform": PLATFORM,
            "inputs": [{"name": n, "datatype": dt, "shape": [1]} for n, dt in INPUTS],
            "outputs": [{"name": n, "datatype": dt, "shape": [1]} for n, dt in OUTPUTS]})
