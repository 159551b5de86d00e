"""A server of known timing that speaks the other APIs: Anthropic Messages, OpenAI Responses, rerank, KServe v2
infer and Triton generate / generate_stream.

Streams: the first token ``ttft`` after the request arrived, then one every ``gap``; ``thinking`` of them are
reasoning (Anthropic thinking, Responses reasoning text) before the answer. Usage: prompt 7 tokens, output
``tokens``. The path's first part picks a fault: ``/ok/...`` (none), ``/noend/...`` (the stream stops without
its end event), ``/error/...`` (an error event after 5 tokens), ``/500/...``.
Run in its own process: ``python -m tests.api_servers --ttft 0.08`` prints ``PORT=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import threading
import time

from aiohttp import web

from tests.servers import sleep_until

PROMPT_TOKENS = 7


def sse(obj: dict, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(obj).encode() + b"\n\n"


class ApiServer:
    def __init__(self, ttft=0.08, gap=0.01, tokens=20, thinking=0):
        self.ttft, self.gap, self.tokens, self.thinking = ttft, gap, tokens, thinking
        self.seen: dict = {}
        self.port = None
        self._loop = None
        self._started = threading.Event()

    async def _tokens(self, start: float, resp, mode: str, write):
        """Write token i at start + ttft + i * gap with ``write(i, reasoning)``; False when a fault ended it."""
        for i in range(self.tokens):
            if mode == "error" and i == 5:
                return "error"
            await sleep_until(start + self.ttft + i * self.gap)
            await resp.write(write(i, i < self.thinking))
        return None

    async def _begin(self, request):
        start = time.perf_counter()
        mode = request.match_info["mode"]
        body = await request.json()
        self.seen[request.match_info.get("api", "x")] = {"body": body, "headers": dict(request.headers),
                                                         "path": request.path}
        return start, mode, body

    async def _stream_response(self, request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        return resp

    # --- Anthropic ---------------------------------------------------------------------------------
    async def anthropic(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"type": "error", "error": {"type": "api_error", "message": "no"}}, status=500)
        usage = {"input_tokens": 5, "cache_read_input_tokens": 2, "output_tokens": self.tokens}
        if not body.get("stream"):
            await sleep_until(start + self.ttft + (self.tokens - 1) * self.gap)
            return web.json_response({"id": "msg_1", "type": "message", "role": "assistant",
                                      "content": [{"type": "text", "text": "hi"}], "usage": usage})
        resp = await self._stream_response(request)
        msg = {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
               "usage": {"input_tokens": 5, "cache_read_input_tokens": 2, "output_tokens": 1}}
        await resp.write(sse({"type": "message_start", "message": msg}, "message_start"))
        await resp.write(sse({"type": "ping"}, "ping"))
        await resp.write(sse({"type": "content_block_start", "index": 0,
                              "content_block": {"type": "thinking", "thinking": ""}}, "content_block_start"))

        def delta(i, reasoning):
            d = {"type": "thinking_delta", "thinking": f"r{i} "} if reasoning else {"type": "text_delta",
                                                                                  "text": f"t{i} "}
            return sse({"type": "content_block_delta", "index": 0 if reasoning else 1, "delta": d},
                       "content_block_delta")

        if await self._tokens(start, resp, mode, delta) == "error":
            await resp.write(sse({"type": "error", "error": {"type": "overloaded_error"}}, "error"))
            return resp
        await resp.write(sse({"type": "content_block_stop", "index": 1}, "content_block_stop"))
        await resp.write(sse({"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                              "usage": {"output_tokens": self.tokens}}, "message_delta"))
        if mode != "noend":
            await resp.write(sse({"type": "message_stop"}, "message_stop"))
        return resp

    # --- OpenAI Responses --------------------------------------------------------------------------
    async def responses(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"error": {"message": "no"}}, status=500)
        usage = {"input_tokens": PROMPT_TOKENS, "output_tokens": self.tokens,
                 "output_tokens_details": {"reasoning_tokens": self.thinking}}
        if not body.get("stream"):
            await sleep_until(start + self.ttft + (self.tokens - 1) * self.gap)
            return web.json_response({"id": "resp_1", "object": "response", "status": "completed",
                                      "output": [{"type": "message", "content": []}], "usage": usage})
        resp = await self._stream_response(request)
        await resp.write(sse({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}))

        def delta(i, reasoning):
            kind = "response.reasoning_summary_text.delta" if reasoning else "response.output_text.delta"
            return sse({"type": kind, "delta": f"t{i} "}, kind)

        if await self._tokens(start, resp, mode, delta) == "error":
            await resp.write(sse({"type": "response.failed", "response": {"status": "failed"}}))
            return resp
        await resp.write(sse({"type": "response.output_text.done", "text": "..."}))
        if mode != "noend":
            await resp.write(sse({"type": "response.completed",
                                  "response": {"id": "resp_1", "status": "completed", "usage": usage}}))
        return resp

    # --- rerank ------------------------------------------------------------------------------------
    async def rerank(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"error": "no"}, status=500)
        await sleep_until(start + self.ttft)
        if mode == "noend":  # a body without results
            return web.json_response({"id": "r"})
        docs = body.get("documents") or []
        return web.json_response({"id": "r", "results": [{"index": i, "relevance_score": 1.0 / (i + 1)}
                                                         for i in range(len(docs))],
                                  "usage": {"total_tokens": 11 * len(docs)}})

    # --- KServe v2 / Triton ------------------------------------------------------------------------
    async def infer(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"error": "no"}, status=500)
        await sleep_until(start + self.ttft + (self.tokens - 1) * self.gap)
        outputs = [{"name": "text_output", "datatype": "BYTES", "shape": [1], "data": ["hi"]},
                   {"name": "num_input_tokens", "datatype": "UINT32", "shape": [1], "data": [PROMPT_TOKENS]},
                   {"name": "num_output_tokens", "datatype": "UINT32", "shape": [1], "data": [self.tokens]}]
        return web.json_response({"model_name": "m", "model_version": "1",
                                  "outputs": outputs if mode != "noend" else []})

    async def generate(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"error": "no"}, status=500)
        await sleep_until(start + self.ttft + (self.tokens - 1) * self.gap)
        return web.json_response({"model_name": "m", "text_output": "hi", "num_input_tokens": PROMPT_TOKENS,
                                  "num_output_tokens": self.tokens})

    async def generate_stream(self, request):
        start, mode, body = await self._begin(request)
        if mode == "500":
            return web.json_response({"error": "no"}, status=500)
        resp = await self._stream_response(request)

        def piece(i, reasoning):
            return sse({"model_name": "m", "model_version": "1", "text_output": f"t{i} ", "num_output_tokens": 1})

        if await self._tokens(start, resp, mode, piece) == "error":
            await resp.write(sse({"error": "overloaded"}))
        return resp

    def start(self) -> "ApiServer":
        def serve():
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/{mode}/v1/messages", self.anthropic)
            app.router.add_post("/{mode}/v1/responses", self.responses)
            app.router.add_post("/{mode}/v1/rerank", self.rerank)
            app.router.add_post("/{mode}/rerank", self.rerank)
            app.router.add_post("/{mode}/v2/models/{model}/infer", self.infer)
            app.router.add_post("/{mode}/v2/models/{model}/generate", self.generate)
            app.router.add_post("/{mode}/v2/models/{model}/generate_stream", self.generate_stream)
            runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            self._started.set()
            self._loop.run_forever()

        threading.Thread(target=serve, daemon=True).start()
        self._started.wait(10)
        return self


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft", type=float, default=0.08)
    ap.add_argument("--gap", type=float, default=0.01)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--thinking", type=int, default=0)
    a = ap.parse_args(argv)
    srv = ApiServer(a.ttft, a.gap, a.tokens, a.thinking).start()
    print(f"PORT={srv.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
