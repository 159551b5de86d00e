"""A real aiohttp server on 127.0.0.1 that answers like vLLM and serves vLLM's own /metrics text.

``/metrics`` is ``tests/data/vllm_metrics.txt`` (trimmed from a real vLLM 0.32.0), served line for line
with the values of the families below replaced by what this server actually did, so the report's server
panels are tested against vLLM's real names, label sets, bucket bounds and ``_created`` samples:

- ``vllm:num_requests_waiting`` / ``_running``: a request waits ``queue`` seconds, then runs until done;
- ``vllm:kv_cache_usage_perc``: ``kv_per_request`` (a fraction) per running request;
- ``vllm:prefix_cache_queries_total`` / ``_hits_total``: prompt tokens asked for, and those of prompts
  seen before (a repeated prompt is a full prefix hit);
- ``vllm:request_queue_time_seconds`` and ``vllm:time_to_first_token_seconds``: histograms observed per
  request, TTFT from the request's arrival to its first token being written (as vLLM's engine counts);
- ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:request_success_total``.

Every other sample is served as recorded. Streams: a role-only chunk, the first token ``ttft`` seconds
after arrival, ``tokens - 1`` more every ``gap`` seconds, a usage chunk and ``[DONE]``.

As vLLM, it serves ``POST /reset_prefix_cache`` (forgets the prompts seen: ``{"success": true}``) only in dev mode,
``VLLM_SERVER_DEV_MODE=1`` in its environment when it starts; otherwise that path answers 404.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from pathlib import Path

from aiohttp import web

from tests.servers import sleep_until

RECORDED = Path(__file__).resolve().parent / "data" / "vllm_metrics.txt"
_SAMPLE = re.compile(r"^(?P<name>[^\s{#]+)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)$")
_LE = re.compile(r'le="([^"]+)"')
_HISTOGRAMS = {"vllm:time_to_first_token_seconds": "ttft", "vllm:request_queue_time_seconds": "queue"}


def _chunk(delta: dict, finish=None) -> bytes:
    obj = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "model": "tiny-llama",
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class VllmLikeServer:
    """See the module docstring; ``start()`` runs it in its own thread and event loop."""

    def __init__(self, ttft=0.03, queue=0.005, gap=0.005, tokens=16, kv_per_request=0.125):
        self.ttft, self.queue, self.gap, self.tokens, self.kv_per_request = ttft, queue, gap, tokens, kv_per_request
        self.lines = RECORDED.read_text().splitlines()
        self.waiting = self.running = 0
        self.queries = self.hits = self.prompt_tokens = self.generation_tokens = self.finished = 0
        self.observed: dict[str, list[float]] = {"ttft": [], "queue": []}
        self.seen: set[str] = set()
        self.dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"  # read at start, as vLLM does
        self.resets = 0
        self.port = None
        self._loop = None
        self._started = threading.Event()

    # --- the API -------------------------------------------------------------------------------

    async def chat(self, request: web.Request):
        arrived = time.perf_counter()
        body = await request.json()
        text = "".join(m.get("content", "") for m in body.get("messages", []))
        n_prompt = max(1, len(text) // 4)
        self.queries += n_prompt
        if text in self.seen:
            self.hits += n_prompt
        self.seen.add(text)
        self.waiting += 1
        await sleep_until(arrived + self.queue)
        self.waiting -= 1
        self.running += 1
        self.observed["queue"].append(time.perf_counter() - arrived)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(_chunk({"role": "assistant", "content": ""}))
            for i in range(self.tokens):
                await sleep_until(arrived + self.ttft + i * self.gap)
                if i == 0:
                    self.observed["ttft"].append(time.perf_counter() - arrived)
                await resp.write(_chunk({"content": f" w{i}"}))
            await resp.write(_chunk({"content": ""}, finish="length"))
            usage = {"prompt_tokens": n_prompt, "completion_tokens": self.tokens,
                     "total_tokens": n_prompt + self.tokens}
            await resp.write(b"data: " + json.dumps({"id": "chatcmpl-x", "object": "chat.completion.chunk",
                                                     "choices": [], "usage": usage}).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        finally:
            self.running -= 1
        self.prompt_tokens += n_prompt
        self.generation_tokens += self.tokens
        self.finished += 1
        return resp

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "tiny-llama", "object": "model",
                                                              "owned_by": "vllm"}]})

    async def reset_prefix_cache(self, request):
        self.seen.clear()
        self.resets += 1
        return web.json_response({"success": True})

    async def metrics(self, request):
        return web.Response(text=self.render(), content_type="text/plain")

    # --- /metrics --------------------------------------------------------------------------------

    def _value(self, name: str, labels: str) -> float | None:
        """This server's value of one recorded sample, or None to serve the recorded value."""
        simple = {
            "vllm:num_requests_waiting": self.waiting,
            "vllm:num_requests_running": self.running,
            "vllm:kv_cache_usage_perc": self.running * self.kv_per_request,
            "vllm:prefix_cache_queries_total": self.queries,
            "vllm:prefix_cache_hits_total": self.hits,
            "vllm:prompt_tokens_total": self.prompt_tokens,
            "vllm:generation_tokens_total": self.generation_tokens,
        }
        if name in simple:
            return float(simple[name])
        if name == "vllm:request_success_total":
            return float(self.finished if 'finished_reason="length"' in labels else 0)
        for base, key in _HISTOGRAMS.items():
            obs = self.observed[key]
            if name == base + "_count":
                return float(len(obs))
            if name == base + "_sum":
                return float(sum(obs))
            if name == base + "_bucket":
                le = float(_LE.search(labels).group(1))  # "+Inf" parses as inf
                return float(sum(1 for v in obs if v <= le))
        return None

    def render(self) -> str:
        out = []
        for line in self.lines:
            m = _SAMPLE.match(line)
            value = self._value(m["name"], m["labels"] or "") if m else None
            out.append(line if value is None else f"{m['name']}{m['labels'] or ''} {value!r}")
        return "\n".join(out) + "\n"

    # --- running -----------------------------------------------------------------------------------

    def _serve(self, port: int = 0):
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        self.add_routes(app)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", port)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        if self.dev_mode:
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)

    def start(self) -> "VllmLikeServer":
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._started.wait(10), "the vLLM-like server did not start"
        return self

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


def main(argv=None) -> None:
    """``python -m tests.vllm_like --port N``: serve in the foreground (a ``command:`` target for tests)."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft", type=float, default=0.03)
    args = ap.parse_args(argv)
    VllmLikeServer(ttft=args.ttft)._serve(args.port)


if __name__ == "__main__":
    main()
