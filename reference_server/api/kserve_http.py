"""The KServe v2 / Triton inference protocol over HTTP/JSON, on the same engine as the OpenAI API.

- ``POST /v2/models/{model}/infer``: a text model's tensors: ``text_input`` (BYTES, one element) and
  ``max_tokens`` (an integer tensor, optional); the answer is ``text_output`` (BYTES) with
  ``num_input_tokens`` and ``num_output_tokens`` (UINT32), the names Triton's vLLM backend uses.
- ``POST /v2/models/{model}/generate`` and ``generate_stream`` (Triton's generate extension): a JSON object
  ``{text_input, max_tokens}``; ``generate`` answers one object, ``generate_stream`` one server-sent event per
  token ``{model_name, model_version, text_output, num_output_tokens: 1}`` (the first also
  ``num_input_tokens``) and then closes (the extension has no end event).
- ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2/models/{model}``, ``/v2/models/{model}/ready``.

Errors answer ``{"error": message}`` with the status, as KServe servers do. The same validation as the
OpenAI endpoints applies (a KServe request is checked as a completions request of that prompt).
"""

from __future__ import annotations

import json
import time

from aiohttp import web

from .generation import ServerState, begin, remember
from .openai_protocol import ApiError, ParsedRequest, parse_json, parse_request

MODEL_VERSION = "1"


def text_request(state: ServerState, model: str, text, max_tokens, stream: bool) -> ParsedRequest:
    """A KServe/Triton text request as the engine's parsed request; ApiError names what is wrong."""
    if not isinstance(text, str):
        raise ApiError(400, "text_input must be one string", param="text_input")
    body = {"model": model, "prompt": text, "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    cfg = state.config
    return parse_request(body, "completion", served_model=state.served_model,
                         max_model_len=state.resolved.spec.max_model_len, default_max_tokens=cfg.default_max_tokens)


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


async def run_to_end(state: ServerState, req: ParsedRequest, arrival: float) -> tuple[str, int, int]:
    """Generate a whole answer: (text, prompt tokens, output tokens)."""
    g = await begin(state, req, arrival)
    try:
        pieces: list[str] = []
        async for batch in g.events:
            for event in batch:
                if event[0] == "text":
                    pieces.append(event[1])
                elif event[0] == "error":
                    raise ApiError(500, event[1], "server_error")
                else:
                    remember(state, g.key, pieces, event[1], g.prompt_tokens, event[2], arrival)
                    return "".join(pieces), g.prompt_tokens, event[2]
        raise ApiError(500, "generation ended without a result", "server_error")
    finally:
        g.close(state)


def _error(exc: ApiError) -> web.Response:
    return web.json_response({"error": exc.message}, status=exc.status)


def _tensor(name: str, datatype: str, value) -> dict:
    return {"name": name, "datatype": datatype, "shape": [1], "data": [value]}


def add_routes(app: web.Application, state: ServerState) -> None:
    """Register the KServe v2 routes on ``app``."""

    async def infer(request: web.Request) -> web.Response:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            text, max_tokens = tensor_inputs(body)
            req = text_request(state, request.match_info["model"], text, max_tokens, False)
            out, pt, ot = await run_to_end(state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        resp = {"model_name": state.served_model, "model_version": MODEL_VERSION,
                "outputs": [_tensor("text_output", "BYTES", out), _tensor("num_input_tokens", "UINT32", pt),
                            _tensor("num_output_tokens", "UINT32", ot)]}
        if isinstance(body.get("id"), str):
            resp["id"] = body["id"]
        return web.json_response(resp)

    async def generate(request: web.Request) -> web.Response:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            req = text_request(state, request.match_info["model"], body.get("text_input"), body.get("max_tokens"),
                               False)
            out, pt, ot = await run_to_end(state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        return web.json_response({"model_name": state.served_model, "model_version": MODEL_VERSION,
                                  "text_output": out, "num_input_tokens": pt, "num_output_tokens": ot})

    async def generate_stream(request: web.Request) -> web.StreamResponse:
        arrival = time.perf_counter()
        try:
            body = parse_json(await request.read())
            req = text_request(state, request.match_info["model"], body.get("text_input"), body.get("max_tokens"),
                               True)
            g = await begin(state, req, arrival)
        except ApiError as exc:
            return _error(exc)
        head = {"model_name": state.served_model, "model_version": MODEL_VERSION}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        pieces: list[str] = []
        try:
            async for batch in g.events:
                if not resp.prepared:
                    await resp.prepare(request)
                out = []
                for event in batch:
                    if event[0] == "text":
                        pieces.append(event[1])
                        piece = {**head, "text_output": event[1], "num_output_tokens": 1}
                        if len(pieces) == 1:  # the prompt's length, once
                            piece["num_input_tokens"] = g.prompt_tokens
                        out.append(piece)
                    elif event[0] == "error":
                        out.append({"error": event[1]})
                    else:
                        remember(state, g.key, pieces, event[1], g.prompt_tokens, event[2], arrival)
                await resp.write(b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in out))
        except ApiError as exc:
            if not resp.prepared:
                return _error(exc)
            await resp.write(b"data: " + json.dumps({"error": exc.message}).encode() + b"\n\n")
        finally:
            g.close(state)
        if not resp.prepared:
            await resp.prepare(request)
        await resp.write_eof()
        return resp

    async def live(request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def ready(request: web.Request) -> web.Response:
        ok = state.engine.state in ("ready", "lazy")
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    async def model_ready(request: web.Request) -> web.Response:
        if request.match_info["model"] != state.served_model:
            return _error(ApiError(404, f"unknown model {request.match_info['model']!r}"))
        return await ready(request)

    async def model_metadata(request: web.Request) -> web.Response:
        if request.match_info["model"] != state.served_model:
            return _error(ApiError(404, f"unknown model {request.match_info['model']!r}"))
        return web.json_response({
            "name": state.served_model, "versions": [MODEL_VERSION], "platform": "latbench-reference",
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]},
                       {"name": "max_tokens", "datatype": "INT32", "shape": [1]}],
            "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [1]},
                        {"name": "num_input_tokens", "datatype": "UINT32", "shape": [1]},
                        {"name": "num_output_tokens", "datatype": "UINT32", "shape": [1]}]})

    app.router.add_post("/v2/models/{model}/infer", infer)
    app.router.add_post("/v2/models/{model}/versions/{version}/infer", infer)
    app.router.add_post("/v2/models/{model}/generate", generate)
    app.router.add_post("/v2/models/{model}/generate_stream", generate_stream)
    app.router.add_get("/v2/health/live", live)
    app.router.add_get("/v2/health/ready", ready)
    app.router.add_get("/v2/models/{model}/ready", model_ready)
    app.router.add_get("/v2/models/{model}", model_metadata)
