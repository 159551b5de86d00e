"""Headless Chromium over the DevTools protocol, for tests that look at a report as a person does: load a page at a
given width, evaluate JavaScript in it, take a PNG of the whole page.

Driven with aiohttp's websocket client (a core dependency), so nothing is downloaded: the system's ``chromium`` is
started with ``--remote-debugging-port=0``, the port it chose is read from the ``DevTools listening on ws://...``
line it prints, and one page target is driven through a flattened session. Every wait is bounded by a timeout and
the browser process is always killed, whatever happened.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import aiohttp

START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0


def chromium() -> str | None:
    """The Chromium executable on PATH (Debian's ``chromium``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page. Use as ``async with Browser(profile_dir) as b:``."""

    def __init__(self, profile: Path):
        self.profile = profile
        self.proc: subprocess.Popen | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._events: list[tuple[str, str | None]] = []
        self._event_seen = asyncio.Event()
        self._reader: asyncio.Task | None = None
        self.session: str | None = None

    async def __aenter__(self) -> Browser:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _start(self) -> None:
        exe = chromium()
        assert exe, "chromium is not installed"
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--hide-scrollbars", "--mute-audio", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = await asyncio.wait_for(asyncio.to_thread(self._devtools_url), START_TIMEOUT_S)
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(url, max_msg_size=0, timeout=aiohttp.ClientWSTimeout(ws_close=5))
        self._reader = asyncio.ensure_future(self._read())
        target = (await self.call("Target.createTarget", url="about:blank"))["targetId"]
        self.session = (await self.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        await self.call("Page.enable", session=True)
        await self.call("Runtime.enable", session=True)

    def _devtools_url(self) -> str:
        """The browser's websocket address, from the line Chromium prints on stderr (at most 200 lines read)."""
        seen = []
        for _ in range(200):
            line = self.proc.stderr.readline().decode(errors="replace")
            if not line:
                break
            seen.append(line)
            if line.startswith("DevTools listening on "):
                # stderr is not read any more: let it go to a sink so the browser never blocks on a full pipe
                _drain(self.proc.stderr)
                return line.split(" on ", 1)[1].strip()
        raise RuntimeError("chromium printed no DevTools address:\n" + "".join(seen[-20:]))

    async def _read(self) -> None:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    if "error" in data:
                        fut.set_exception(RuntimeError(f"{data['error']}"))
                    else:
                        fut.set_result(data.get("result", {}))
            elif "method" in data:
                self._events.append((data["method"], data.get("sessionId")))
                self._event_seen.set()
        for fut in self._pending.values():  # the browser went away: nobody waits forever
            if not fut.done():
                fut.set_exception(RuntimeError("chromium closed the DevTools connection"))

    async def call(self, method: str, session: bool = False, timeout: float = CALL_TIMEOUT_S, **params) -> dict:
        """One DevTools command (on the page's session when ``session``), its result."""
        i = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[i] = fut
        msg = {"id": i, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        await self._ws.send_str(json.dumps(msg))
        return await asyncio.wait_for(fut, timeout)

    async def _event(self, method: str, timeout: float) -> None:
        """Wait for ``method`` on the page's session (events from before the wait started are dropped first)."""
        deadline = time.monotonic() + timeout
        while True:
            if any(m == method and s == self.session for m, s in self._events):
                return
            self._event_seen.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} within {timeout:g} s")
            await asyncio.wait_for(self._event_seen.wait(), left)

    async def open(self, url: str, width: int, height: int = 800, timeout: float = CALL_TIMEOUT_S) -> None:
        """Load ``url`` in a window ``width`` x ``height`` CSS pixels wide; returns after its load event (images
        included)."""
        await self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                        deviceScaleFactor=1, mobile=False)
        self._events.clear()
        await self.call("Page.navigate", session=True, url=url)
        await self._event("Page.loadEventFired", timeout)

    async def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-able; a promise is awaited)."""
        r = await self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                            awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JavaScript failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def screenshot(self, path: Path, max_height: int = 16000) -> Path:
        """A PNG of the whole page (up to ``max_height`` CSS pixels of it) at ``path``."""
        size = (await self.call("Page.getLayoutMetrics", session=True))["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], max_height), "scale": 1}
        r = await self.call("Page.captureScreenshot", session=True, format="png", clip=clip,
                            captureBeyondViewport=True, timeout=60.0)
        path.write_bytes(base64.b64decode(r["data"]))
        return path

    async def close(self) -> None:
        try:
            if self._ws is not None and not self._ws.closed:
                await asyncio.wait_for(self._ws.close(), 5)
            if self._reader is not None:
                self._reader.cancel()
                await asyncio.gather(self._reader, return_exceptions=True)
            if self._http is not None:
                await self._http.close()
        finally:
            if self.proc is not None:
                if self.proc.poll() is None:
                    self.proc.kill()
                self.proc.wait(10)


def _drain(stream) -> None:
    """Read ``stream`` to its end on a daemon thread (a browser's stderr nobody reads any more)."""
    def read() -> None:
        while stream.read(65536):  # ends when the browser exits (it is always killed)
            pass

    threading.Thread(target=read, daemon=True).start()
