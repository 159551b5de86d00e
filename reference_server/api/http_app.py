"""The HTTP application: the error middleware, the server's own routes (``/health``, ``/metrics``,
``/reset_prefix_cache``), and the OpenAI and KServe routes of :mod:`.openai_routes` and :mod:`.kserve_http`, all
on one :class:`ServerState`.

``/health`` answers 503 while a preloaded model is loading or warming and 200 once it is ready. A lazy
server (``preload`` off, the naive architecture) answers 200 with ``"status": "lazy"`` from the start: it is
ready to accept requests, and the first request pays the load. After a failed load it answers 503.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from .generation import ServerState
from .kserve_http import KServeHttpRoutes
from .openai_protocol import ApiError
from .openai_routes import OpenAIRoutes

RESET_WAIT_S = 10.0  # how long a cache reset waits for the engine's step in progress


def _error_response(exc: ApiError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


class ErrorMiddleware:
    """Every refusal in the OpenAI error shape (aiohttp's own 404/405/413 too), a bug a 500 that keeps the server
    serving; counts the API requests' statuses."""

    __middleware_version__ = 1  # aiohttp's mark of a new-style middleware (what @web.middleware sets)

    def __init__(self, state: ServerState):
        self.state = state

    async def __call__(self, request: web.Request, handler):
        counted = request.path.startswith(("/v1/", "/v2/models/"))
        try:
            resp = await handler(request)
        except ApiError as exc:
            resp = _error_response(exc)
        except web.HTTPException as exc:  # 404, 405, 413 from aiohttp: same OpenAI-style body
            kind = "invalid_request_error" if exc.status < 500 else "server_error"
            message = exc.reason or str(exc)
            if exc.status == 413:  # name the limit, as every other refusal does
                message = f"request body larger than the limit of {self.state.config.max_body_bytes} bytes"
            resp = _error_response(ApiError(exc.status, message, kind))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:  # a bug: answer 500 in the same shape, keep serving
            self.state.log.exception("unhandled error on %s", request.path)
            resp = _error_response(ApiError(500, f"internal error: {exc}", "server_error"))
        if counted:
            self.state.metrics.request_done(resp.status)
        return resp


class ServerRoutes:
    """The server's own routes and response header: health, Prometheus metrics, ``x-backend``."""

    def __init__(self, state: ServerState):
        self.state = state

    def add_to(self, app: web.Application) -> None:
        """Register the routes, and the ``x-backend`` header on every response, on ``app``."""
        app.on_response_prepare.append(self.add_backend_header)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset_caches)

    async def add_backend_header(self, request: web.Request, resp: web.StreamResponse) -> None:
        resp.headers["x-backend"] = self.state.resolved.label

    async def health(self, request: web.Request) -> web.Response:
        engine, preload = self.state.engine, self.state.config.preload
        ok = engine.state in ("ready", "lazy") or (engine.state == "loading" and not preload)
        body = {"status": engine.state, "lazy": not preload, "backend": self.state.resolved.label}
        if engine.error:
            body["error"] = engine.error
        return web.json_response(body, status=200 if ok else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.state.metrics.render(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


    async def reset_caches(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /reset_prefix_cache``: empty the prefix, result and image caches, so that the next request
        finds nothing any earlier one left; answers how many entries each held (503 when the engine's worker does
        not reach a step boundary in time)."""
        state = self.state
        future = state.engine.resets.ask()  # the worker's caches, at its next step boundary
        dropped = {"result_cache": state.cache.clear() if state.cache is not None else 0}
        try:
            dropped.update(await asyncio.wait_for(asyncio.wrap_future(future), RESET_WAIT_S))
        except asyncio.TimeoutError:
            raise ApiError(503, f"the engine did not reach a step boundary within {RESET_WAIT_S:g} s: its prefix "
                                "and image caches were not reset", "server_error") from None
        state.log.info("caches reset: %s", ", ".join(f"{k} {v}" for k, v in dropped.items()))
        return web.json_response({"reset": dropped})


def build_app(state: ServerState) -> web.Application:
    """The HTTP application of one server."""
    app = web.Application(client_max_size=state.config.max_body_bytes, middlewares=[ErrorMiddleware(state)])
    for routes in (ServerRoutes(state), OpenAIRoutes(state), KServeHttpRoutes(state)):
        routes.add_to(app)
    return app
