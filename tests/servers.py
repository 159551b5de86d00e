"""Small real HTTP servers whose latency is known, for testing measurements against.

Each runs aiohttp.web in its own thread and event loop on 127.0.0.1 with a free port, so the engine
under test (in the test's own loop or a subprocess) talks to it over real sockets.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time

from aiohttp import web

PREFLIGHT_HEADER = "X-Latbench-Preflight"  # loadgen.run.preflight.PREFLIGHT_HEADER

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

    Token ``i`` is produced at ``ttft + i * gap``. ``per_chunk``: the first token goes alone, then each chunk
    carries up to that many tokens and leaves when its last one is produced (speculative decoding, a stream
    interval). ``reasoning``: the first that many tokens are ``reasoning_content`` (or ``reasoning_field``),
    the rest ``content``; usage then says so in ``completion_tokens_details.reasoning_tokens``. A request with
    ``stream_options.continuous_usage_stats`` gets a cumulative ``usage`` in every chunk, as vLLM sends it.
    """

    def __init__(self, delay=0.05, ttft=0.08, gap=0.01, tokens=20, stall_at=None, stall_for=0.0, status=200, slots=0,
                 per_chunk=1, reasoning=0, reasoning_field="reasoning_content", port=0):
        self.delay, self.ttft, self.gap, self.tokens = delay, ttft, gap, tokens
        self.per_chunk, self.reasoning, self.reasoning_field = per_chunk, reasoning, reasoning_field
        self.slots = slots  # > 0: at most this many requests served at once, the rest queue (a known capacity)
        self._sem = None
        self.stall_at, self.stall_for, self.status = stall_at, stall_for, status
        self.requests = 0
        self._rng = random.Random(0)
        self.queries: list[str] = []  # the query string of each request, as the server read it
        self.t0 = None
        self._loop = None
        self._runner = None
        self.port = port or None
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
        per_chunk_usage = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))

        def usage(n):
            u = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
            if self.reasoning:
                u["completion_tokens_details"] = {"reasoning_tokens": min(n, self.reasoning)}
            return u

        def with_usage(raw: bytes, n: int) -> bytes:
            if not per_chunk_usage:
                return raw
            obj = json.loads(raw[6:])
            obj["usage"] = usage(n)
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        try:
            await self._stream(resp, with_usage, usage)
        except ConnectionResetError:  # the client went away (an abort, a timeout): nothing more to send
            pass
        return resp

    async def _stream(self, resp, with_usage, usage):
        start = time.perf_counter()
        await resp.write(with_usage(_chunk({"role": "assistant", "content": ""}), 0))
        bounds = [0, 1] + list(range(1 + self.per_chunk, self.tokens, self.per_chunk)) + [self.tokens]
        for a, b in zip(bounds, bounds[1:]):
            if a >= b:
                continue
            await sleep_until(start + self.ttft + (b - 1) * self.gap)
            think = "".join(f"r{i} " for i in range(a, min(b, self.reasoning)))
            say = "".join(f"t{i} " for i in range(max(a, self.reasoning), b))
            delta = {**({self.reasoning_field: think} if think else {}), **({"content": say} if say else {})}
            await resp.write(with_usage(_chunk(delta), b))
        await resp.write(_chunk({}, finish="length"))
        last = {"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage(self.tokens)}
        await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()

    async def sleep(self, request: web.Request):
        """``GET /sleep?ms=M&sigma=S``: answers after M * LogNormal(0, S) milliseconds, timed from arrival.

        The delay is chosen by the caller, per request: a benchmark puts a run's drift factor into the URL
        (``api: http`` targets), so every run draws its own, known, latency distribution."""
        arrived = time.perf_counter()
        self.requests += 1
        try:
            ms = float(request.query.get("ms", "10"))
            sigma = float(request.query.get("sigma", "0"))
        except ValueError:
            return web.Response(status=400, text="ms and sigma must be numbers")
        factor = self._rng.lognormvariate(0.0, sigma) if sigma > 0 else 1.0
        await sleep_until(arrived + ms * factor / 1e3)
        return web.Response(text="ok")

    def more_routes(self) -> list:
        """POST routes beyond /v1/chat/completions, as (path, handler)."""
        return []

    async def models(self, request):
        self.queries.append(request.query_string)
        return web.json_response({"object": "list", "data": [{"id": "known", "object": "model"}]})

    def get_routes(self) -> list:
        """(path, handler) of GET routes a subclass adds (an engine's /metrics)."""
        return []

    def _serve(self):
        try:
            import uvloop

            self._loop = uvloop.new_event_loop()
        except ImportError:
            self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/sleep", self.sleep)
        for path, handler in self.more_routes():
            app.router.add_post(path, handler)
        for path, handler in self.get_routes():
            app.router.add_get(path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port or 0)
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


class RecordingServer(KnownServer):
    """Chat and completions that answer at once with ``pieces`` as stream chunks (with a usage chunk only when
    ``usage``), and keep every request body received in ``bodies`` (what the server was sent): the load's; the
    pre-flight's minimal request (its ``X-Latbench-Preflight`` header) in ``preflight``."""

    def __init__(self, pieces=("Hello", " there", ", the", " way is", " long."), usage=True):
        super().__init__()
        self.pieces, self.usage, self.bodies, self.preflight = list(pieces), usage, [], []

    def _keep(self, request: web.Request, body: dict) -> bool:
        """Keep ``body`` where it belongs; False for the pre-flight's request (answered, not counted as load)."""
        if request.headers.get(PREFLIGHT_HEADER):
            self.preflight.append(body)
            return False
        self.bodies.append(body)
        return True

    async def chat(self, request: web.Request):
        body = await request.json()
        self._keep(request, body)
        chat = request.path.endswith("/chat/completions")
        text = "".join(self.pieces)
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"text": text}
            return web.json_response({"id": "x", "choices": [choice]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in self.pieces:
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await resp.write(b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n")
        if self.usage:
            usage = {"prompt_tokens": 1, "completion_tokens": len(self.pieces), "total_tokens": 1 + len(self.pieces)}
            await resp.write(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def more_routes(self):
        return [("/v1/completions", self.chat)]


class ConversationServer(RecordingServer):
    """Chat and completions that answer every request with its own text (``answer <n> from the server``, n
    counting from 0), after ``delay`` seconds, streamed in two chunks or whole, with usage; each body is kept
    with the answer it got (``bodies``, ``answers``): what a conversation's later turns must resend. A chat
    request whose history holds ``fail_after`` answers gets a 500 (its answer None)."""

    def __init__(self, delay=0.02, fail_after=None):
        super().__init__()
        self.delay, self.fail_after, self.answers = delay, fail_after, []

    async def chat(self, request: web.Request):
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        counted = self._keep(request, body)  # the pre-flight's request is answered, not counted
        if counted and chat and self.fail_after is not None and sum(m["role"] == "assistant"
                                                                    for m in body["messages"]) >= self.fail_after:
            self.answers.append(None)
            return web.json_response({"error": {"message": "nope"}}, status=500)
        text = f"answer {len(self.answers)} from the server"
        if counted:
            self.answers.append(text)
        await asyncio.sleep(self.delay)
        usage = {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"text": text}
            return web.json_response({"id": "x", "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in (text[:7], text[7:]):
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await resp.write(b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n")
        await resp.write(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


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
    ap.add_argument("--per-chunk", type=int, default=1)
    ap.add_argument("--reasoning", type=int, default=0)
    ap.add_argument("--reasoning-field", default="reasoning_content")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed); a `command:` target passes one")
    a = ap.parse_args(argv)
    kw = {k: v for k, v in vars(a).items() if v is not None}
    srv = KnownServer(**kw).start()
    print(f"PORT={srv.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    srv.stop()


if __name__ == "__main__":
    main()
