"""A server's lifecycle, where its three parts meet: the model backend (:mod:`.models`), the serving engine
(:mod:`.serving`) and the front ends (:mod:`.api`).

``start`` resolves the backend, binds (127.0.0.1 by default), prints ``LATBENCH_SERVER_URL=...`` and
``LATBENCH_SERVER_CONFIG=<json>`` to stdout as soon as it listens, then starts the engine, which loads the
model in the background when ``preload`` is set.
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
from .api.generation import ServerState
from .api.http_app import build_app
from .api.kserve_grpc import start_grpc
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
    runner = web.AppRunner(build_app(state), handler_cancellation=True, access_log=None)
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
