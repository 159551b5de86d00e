"""Run a reference server inside this process, on its own event loop in a daemon thread.

For tests and for embedding: ``with BackgroundServer(ServerConfig.from_preset("optimized", model="tiny")) as
srv: ... srv.url ...``. The server is real (a real socket on 127.0.0.1, a real model); only the process is
shared.
"""

from __future__ import annotations

import asyncio
import threading

from .config import ServerConfig
from .server import RunningServer, start


class BackgroundServer:
    """Context manager: starts the server on enter (raising its start-up error, if any), stops it on exit."""

    def __init__(self, config: ServerConfig, start_timeout_s: float = 60.0):
        self.config = config
        self.start_timeout_s = start_timeout_s
        self.server: RunningServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def resolved(self) -> dict:
        return self.server.resolved

    def __enter__(self) -> "BackgroundServer":
        self._thread = threading.Thread(target=self._main, name="refserver-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            raise TimeoutError("reference server did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                self.server = await start(self.config)
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.server.close()

        asyncio.run(main())
