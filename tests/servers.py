"""Small real HTTP servers whose latency is known, for testing measurements against.

Each runs aiohttp.web in its own thread and event loop on 127.0.0.1 with a free port, so the engine
under test (in the test's own loop or a subprocess) talks to it over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import web


def _chat_body(n_tokens: int) -> dict:
    return {
        "id": "x", "object": "chat.completion", "model": "known",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * n_tokens},
                     "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": n_tokens, "total_tokens": 5 + n_tokens},
    }


async def sleep_until(due: float) -> None:
    """Sleep until perf_counter() reaches ``due``: a timer for most of it, then yielding.

    Event-loop timers fire up to a millisecond late; a server of "known" latency must not add that.
    """
    while True:
        left = due - time.perf_counter()
        if left <= 0:
            return
        await asyncio.sleep(left - 0.0015 if left > 0.0015 else 0)


def _chunk(delta: dict, finish=None) -> bytes:
    obj = {"id": "x", "object": "chat.completion.chunk", "model": "known",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class KnownServer:
    """An OpenAI-compatible server with a known delay, TTFT and inter-token gap.

    ``delay``: seconds before a non-streaming answer. Streams: a role-only chunk at once, the first
    token after ``ttft``, then ``tokens - 1`` more every ``gap`` seconds, a usage chunk and [DONE].
    ``stall_at`` / ``stall_for``: every request that *arrives* in that window of server time is held
    until the stall ends (a server that stops answering for a moment).
    """

    def __init__(self, delay=0.05, ttft=0.08, gap=0.01, tokens=20, stall_at=None, stall_for=0.0, status=200, slots=0):
        self.delay, self.ttft, self.gap, self.tokens = delay, ttft, gap, tokens
        self.slots = slots  # > 0: at most this many requests served at once, the rest queue (a known capacity)
        self._sem = None
        self.stall_at, self.stall_for, self.status = stall_at, stall_for, status
        self.requests = 0
        self.queries: list[str] = []  # the query string of each request, as the server read it
        self.t0 = None
        self._loop = None
        self._runner = None
        self.port = None
        self._started = threading.Event()

    async def _maybe_stall(self):
        now = time.perf_counter() - self.t0
        if self.stall_at is not None and self.stall_at <= now < self.stall_at + self.stall_for:
            await asyncio.sleep(self.stall_at + self.stall_for - now)

    async def chat(self, request: web.Request):
        arrived = time.perf_counter()
        self.requests += 1
        self.queries.append(request.query_string)
        body = await request.json()
        await self._maybe_stall()
        if self.status != 200:
            return web.json_response({"error": {"message": "nope", "type": "server_error"}}, status=self.status)
        if not body.get("stream"):
            if self.slots:
                if self._sem is None:
                    self._sem = asyncio.Semaphore(self.slots)
                async with self._sem:  # capacity = slots / delay requests per second
                    await sleep_until(time.perf_counter() + self.delay)
            else:
                await sleep_until(arrived + self.delay)
            return web.json_response(_chat_body(self.tokens))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = time.perf_counter()
        await resp.write(_chunk({"role": "assistant", "content": ""}))
        for i in range(self.tokens):
            await sleep_until(start + self.ttft + i * self.gap)
            await resp.write(_chunk({"content": f"t{i} "}))
        await resp.write(_chunk({}, finish="length"))
        usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 5, "completion_tokens": self.tokens, "total_tokens": 5 + self.tokens}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request):
        self.queries.append(request.query_string)
        return web.json_response({"object": "list", "data": [{"id": "known", "object": "model"}]})

    def _serve(self):
        try:
            import uvloop

            self._loop = uvloop.new_event_loop()
        except ImportError:
            self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self.t0 = time.perf_counter()
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    def start(self) -> "KnownServer":
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def main(argv=None) -> None:
    """Run a KnownServer in its own process (no GIL shared with the generator under test)."""
    import argparse
    import signal

    ap = argparse.ArgumentParser()
    for name in ("delay", "ttft", "gap", "stall_at", "stall_for"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=None)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--status", type=int, default=200)
    ap.add_argument("--slots", type=int, default=0)
    a = ap.parse_args(argv)
    kw = {k: v for k, v in vars(a).items() if v is not None}
    srv = KnownServer(**kw).start()
    print(f"PORT={srv.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    srv.stop()


if __name__ == "__main__":
    main()
