"""The HTTP server: routes, error handling, start-up announcement and lifecycle.

``start`` resolves the backend, binds (127.0.0.1 by default), prints ``LATBENCH_SERVER_URL=...`` and
``LATBENCH_SERVER_CONFIG=<json>`` to stdout as soon as it listens, then starts the engine, which loads the
model in the background when ``preload`` is set.

``/health`` answers 503 while a preloaded model is loading or warming and 200 once it is ready. A lazy
server (``preload`` off, the naive architecture) answers 200 with ``"status": "lazy"`` from the start: it is
ready to accept requests, and the first request pays the load. After a failed load it answers 503.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from aiohttp import web

from .api.counting import make_counter
from .api.generation import ServerState, handle_generation
from .api.kserve_grpc import start_grpc
from .api.kserve_http import add_routes as add_kserve_routes
from .api.openai_protocol import ApiError, parse_json, parse_messages
from .config import ServerConfig
from .models.backends import resolve_backend
from .serving.faults import FaultInjector
from .serving.metrics import Metrics
from .serving.result_cache import ResultCache
from .serving.scheduler import ServingEngine

LOGGER_NAME = "reference_server"


class _BackendLog(logging.LoggerAdapter):
    """Prefixes every log line with the backend, so no figure is read without knowing where it came from."""

    def process(self, msg, kwargs):
        return f"[backend={self.extra['backend']}] {msg}", kwargs


def _error_response(exc: ApiError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


def _build_app(state: ServerState) -> web.Application:
    @web.middleware
    async def errors(request: web.Request, handler):
        counted = request.path.startswith(("/v1/", "/v2/models/"))
        try:
            resp = await handler(request)
        except ApiError as exc:
            resp = _error_response(exc)
        except web.HTTPException as exc:  # 404, 405, 413 from aiohttp: same OpenAI-style body
            kind = "invalid_request_error" if exc.status < 500 else "server_error"
            message = exc.reason or str(exc)
            if exc.status == 413:  # name the limit, as every other refusal does
                message = f"request body larger than the limit of {state.config.max_body_bytes} bytes"
            resp = _error_response(ApiError(exc.status, message, kind))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:  # a bug: answer 500 in the same shape, keep serving
            state.log.exception("unhandled error on %s", request.path)
            resp = _error_response(ApiError(500, f"internal error: {exc}", "server_error"))
        if counted:
            state.metrics.request_done(resp.status)
        return resp

    async def add_backend_header(request: web.Request, resp: web.StreamResponse) -> None:
        resp.headers["x-backend"] = state.resolved.label

    async def health(request: web.Request) -> web.Response:
        engine = state.engine
        ok = engine.state in ("ready", "lazy") or (engine.state == "loading" and not state.config.preload)
        body = {"status": engine.state, "lazy": not state.config.preload, "backend": state.resolved.label}
        if engine.error:
            body["error"] = engine.error
        return web.json_response(body, status=200 if ok else 503)

    async def models(request: web.Request) -> web.Response:
        card = {"id": state.served_model, "object": "model", "created": int(state.started_wall),
                "owned_by": "latbench", "max_model_len": state.resolved.spec.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=state.metrics.render(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    def _model(body: dict) -> None:
        model = body.get("model")
        if model is not None and model != state.served_model:
            raise ApiError(404, f"The model `{model}` does not exist; this server serves `{state.served_model}`",
                           param="model", code="model_not_found")

    def _flag(body: dict, name: str, default: bool) -> bool:
        v = body.get(name, default)
        if not isinstance(v, bool):
            raise ApiError(400, f"'{name}' must be a boolean", param=name)
        return v

    async def tokenize(request: web.Request) -> web.Response:
        """vLLM's /tokenize: a prompt (special tokens added by default) or chat messages (template rendered)."""
        body = parse_json(await request.read())
        _model(body)
        if "messages" in body:
            ids = state.counter.tokenize_chat(parse_messages(body), _flag(body, "add_generation_prompt", True),
                                              _flag(body, "add_special_tokens", False))
        elif isinstance(body.get("prompt"), str):
            ids = state.counter.tokenize(body["prompt"], _flag(body, "add_special_tokens", True))
        else:
            raise ApiError(400, "expected 'prompt' (a string) or 'messages'", param="prompt")
        return web.json_response({"count": len(ids), "max_model_len": state.resolved.spec.max_model_len,
                                  "tokens": ids, "token_strs": None})

    async def detokenize(request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        _model(body)
        ids = body.get("tokens")
        if not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
            raise ApiError(400, "'tokens' must be a list of integers", param="tokens")
        return web.json_response({"prompt": state.counter.detokenize(ids)})

    async def chat(request: web.Request) -> web.StreamResponse:
        return await handle_generation(state, request, "chat")

    async def completions(request: web.Request) -> web.StreamResponse:
        return await handle_generation(state, request, "completion")

    app = web.Application(client_max_size=state.config.max_body_bytes, middlewares=[errors])
    app.on_response_prepare.append(add_backend_header)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    add_kserve_routes(app, state)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    return app


@dataclass
class RunningServer:
    """A started server. ``resolved`` is the JSON-ready configuration it announced."""

    url: str
    resolved: dict
    state: ServerState
    runner: web.AppRunner
    grpc: object = None  # the gRPC server (--grpc-port), or None

    async def close(self) -> None:
        """Stop accepting, stop the engine worker, release the port."""
        if self.grpc is not None:
            await self.grpc.stop(None)
        await self.runner.cleanup()
        await asyncio.get_running_loop().run_in_executor(None, self.state.engine.stop)


async def start(config: ServerConfig, *, announce: TextIO | None = None) -> RunningServer:
    """Start a server for ``config`` on the running loop; write the two announcement lines to ``announce``.

    Raises ValueError for an impossible configuration (unknown model, torch missing, ...).
    """
    config.validate()
    counter = make_counter(config.tokenizer)  # before binding: a bad --tokenizer is a configuration error
    resolved = resolve_backend(config)
    metrics = Metrics(resolved.label)
    if resolved.device == "cuda":
        metrics.add_gpu_collector()
    log = _BackendLog(logging.getLogger(LOGGER_NAME), {"backend": resolved.label})
    faults = FaultInjector(config)
    engine = ServingEngine(config, resolved, metrics, faults, log)
    state = ServerState(config, resolved, engine, metrics, faults,
                        ResultCache(config.cache_size) if config.cache_size > 0 else None, log,
                        config.served_model_name or resolved.spec.name, time.perf_counter(), time.time(), counter)
    runner = web.AppRunner(_build_app(state), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    await site.start()
    port = runner.addresses[0][1]
    host = f"[{config.host}]" if ":" in config.host else config.host
    url = f"http://{host}:{port}"
    grpc_server = grpc_port = None
    if config.grpc_port is not None:
        try:
            grpc_server, grpc_port = await start_grpc(state, config.host, config.grpc_port)
        except BaseException:
            await runner.cleanup()
            raise
    resolved_config = dict(config.to_dict(), port=port, backend_requested=config.backend, model=resolved.spec.name,
                           served_model_name=state.served_model, grpc_port=grpc_port,
                           parameter_count=resolved.spec.parameter_count(), cache_dir=str(resolved.cache_dir),
                           **resolved.to_dict())
    if announce is not None:
        announce.write(f"LATBENCH_SERVER_URL={url}\n")
        announce.write(f"LATBENCH_SERVER_CONFIG={json.dumps(resolved_config, sort_keys=True)}\n")
        announce.flush()
    log.info("listening on %s (arch=%s, model=%s, %d parameters)", url, config.arch, resolved.spec.name,
             resolved.spec.parameter_count())
    engine.start(asyncio.get_running_loop())
    return RunningServer(url, resolved_config, state, runner, grpc_server)


def _loop_factory():
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_server(config: ServerConfig, *, out: TextIO | None = None) -> int:
    """Run a server until SIGINT/SIGTERM; announce on ``out`` (stdout by default), log to stderr.

    Returns the process exit status (0 after a clean shutdown).
    """
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s reference_server %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    async def main() -> None:
        server = await start(config, announce=out or sys.stdout)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # not the main thread, or Windows
                pass
        try:
            await stop.wait()
        finally:
            server.state.log.info("shutting down")
            await server.close()

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(main())
    finally:
        logger.removeHandler(handler)
    return 0
