"""Images (and tools) against a server of known timing: a real aiohttp server on 127.0.0.1 stamps each chat
request with ``time.monotonic()`` once its whole body is read (so upload time does not count), charges a known
time per image pixel and per tool, then streams. latbench's first token (``meta.json``'s ``t0_monotonic`` plus
the record's ``first_token``) must come the known cost after that stamp, within 1 ms, at every image size; and
the server must have received exactly the images the scenario asked for (counted and hashed server-side)."""

import asyncio
import base64
import hashlib
import io
import json
import re
import sys
import threading
import time

import numpy as np
import pytest
from aiohttp import web
from PIL import Image

from loadgen.protocols.tools import tool_definitions
from loadgen.records.schema import read_records
from loadgen.scenario.images import image_pool
from loadgen.scenario.loader import load_scenario
from tests.helpers import run, write_scenario

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)

PER_PIXEL = 1e-6  # seconds the server charges per image pixel before the first token
PER_TOOL = 0.004  # and per tool definition
TOKENS = 3
SIZES = ("32x32", "96x96", "160x160")  # 1.0, 9.2 and 25.6 ms of known cost; a few kB each as JPEG
_ID = re.compile(r"req-(\d+)")


def _chunk(delta: dict) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


class MediaServer:
    """Streams ``TOKENS`` chunks after a known cost; ``seen[N]`` keeps, for prompt ``req-N``: the monotonic time its
    body was read, the first token's write time, each image's SHA-256 and pixels, and each tool's name."""

    def __init__(self):
        self.seen: dict[int, dict] = {}
        self._ready = threading.Event()

    async def chat(self, request: web.Request):
        raw = await request.read()
        received = time.monotonic()
        body = json.loads(raw)
        text, images = "", []
        for m in body["messages"]:
            content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            for part in content:
                if part["type"] == "text":
                    text += part["text"]
                elif part["type"] == "image_url":
                    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                    with Image.open(io.BytesIO(data)) as img:
                        w, h = img.size
                    images.append({"sha256": hashlib.sha256(data).hexdigest(), "pixels": w * h, "bytes": len(data)})
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        tool_hashes = [hashlib.sha256(json.dumps(t, sort_keys=True).encode()).hexdigest()
                       for t in body.get("tools", [])]
        cost = PER_PIXEL * sum(i["pixels"] for i in images) + PER_TOOL * len(tools)
        entry = {"received": received, "images": images, "tools": tool_hashes, "cost": cost,
                 "choice": body.get("tool_choice")}
        self.seen[int(_ID.search(text).group(1))] = entry
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk({"role": "assistant"}))
        while (left := received + cost - time.monotonic()) > 0:  # a timer for most of it, then yielding
            await asyncio.sleep(left - 0.0015 if left > 0.0015 else 0)
        entry["first"] = time.monotonic()
        for i in range(TOKENS):
            if tools:  # a call of the first tool, its arguments in TOKENS fragments
                call = {"index": 0, "function": {"arguments": ['{"q":"', "x", '"}'][i % 3]}}
                if i == 0:
                    call.update(id="call_1", type="function", function={"name": tools[0], "arguments": '{"q":"'})
                await resp.write(_chunk({"tool_calls": [call]}))
            else:
                await resp.write(_chunk({"content": "x"}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def _serve(self):
        self.loop = asyncio.new_event_loop()
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def __enter__(self):
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def media_server():
    with MediaServer() as s:
        yield s


def _scenario(port: int, requests: int,
              extra: str = f"images: {{count: 1, sizes: {list(SIZES)}, distinct: {len(SIZES)}, quality: 80}}") -> str:
    return f"""
        name: media
        target: {{url: "http://127.0.0.1:{port}/v1", stream: true, model: m}}
        workload:
          dataset: prompts.jsonl
          max_tokens: {TOKENS}
          {extra}
        load:
          mode: closed
          seed: 7
          phases: [{{name: main, duration: 10s, concurrency: 1, max_requests: {requests}}}]
        """


def _records(result):
    meta = json.loads((result.rundir.path / "meta.json").read_text())
    (entry,) = meta["targets"]
    rows = read_records(result.rundir.path / entry["dir"] / "requests.parquet").to_pylist()
    return entry["t0_monotonic"], rows


@pytest.mark.skipif(sys.platform != "linux", reason="perf_counter is CLOCK_MONOTONIC on Linux")
def test_ttft_moves_by_the_known_cost_per_image_size(tmp_path, media_server):
    requests = 4 * len(SIZES)
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"req-{i}"}) + "\n"
                                                    for i in range(requests)))
    result, _, _ = run(tmp_path, _scenario(media_server.port, requests))
    t0, rows = _records(result)
    assert len(rows) == requests and all(r["error"] == "" for r in rows)
    # exactly the images asked for: image i % 3 of the pool the scenario makes, hashed on both sides
    spec = load_scenario(write_scenario(tmp_path, _scenario(media_server.port, requests), "again.yaml")
                         ).scenario.workload.images
    pool, _ = image_pool(spec, tmp_path, 7)
    by_size: dict[int, list[float]] = {}
    for r in rows:
        seen = media_server.seen[r["seq"]]  # dataset line seq is prompt req-<seq>
        (image,) = seen["images"]
        assert image["sha256"] == pool[r["seq"] % len(SIZES)].sha256
        assert (r["images"], r["image_pixels"], r["image_bytes"]) == (1, image["pixels"], image["bytes"])
        # first token from the server's stamp of the received request: the known cost, and just after it
        from_stamp = t0 + r["first_token"] - seen["received"]
        assert from_stamp >= seen["cost"] - 1e-4
        by_size.setdefault(image["pixels"], []).append(from_stamp - seen["cost"])
    assert sorted(by_size) == [32 * 32, 96 * 96, 160 * 160]
    excess = {px: float(np.median(v)) for px, v in by_size.items()}
    assert all(0 <= e < 0.001 for e in excess.values()), excess  # within 1 ms of the known cost, at every size
    # TTFT from the server's stamp moves by the known amount per image size (the upload does not count)
    moved = {px: float(np.median([e + PER_PIXEL * px for e in v])) for px, v in by_size.items()}
    small = min(moved)
    for px in moved:
        assert abs((moved[px] - moved[small]) - PER_PIXEL * (px - small)) < 0.001, (moved, px)


@pytest.mark.skipif(sys.platform != "linux", reason="perf_counter is CLOCK_MONOTONIC on Linux")
def test_ttft_moves_by_the_known_cost_per_tool_and_ttftc_matches_the_servers_stamps(tmp_path, media_server):
    requests = 4
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"req-{i}"}) + "\n"
                                                    for i in range(2 * requests)))
    excess = {}
    for tools in (1, 5):
        media_server.seen.clear()
        extra = f"tools: {{generate: {{count: {tools}, tokens: 40}}, choice: required}}"
        result, _, _ = run(tmp_path / str(tools), _scenario(media_server.port, requests, extra).replace(
            "prompts.jsonl", str(tmp_path / "prompts.jsonl")))
        t0, rows = _records(result)
        assert len(rows) == requests and all(r["error"] == "" for r in rows)
        sc = load_scenario(write_scenario(tmp_path, _scenario(media_server.port, requests, extra), "t.yaml")).scenario
        asked = [hashlib.sha256(json.dumps(t, sort_keys=True).encode()).hexdigest()
                 for t in tool_definitions(sc.workload.tools)]
        stamps = []
        for r in rows:
            seen = media_server.seen[r["seq"]]
            assert seen["tools"] == asked and seen["choice"] == "required"  # exactly the tools asked, in order
            assert (r["tools"], r["tool_calls"], r["tool_call_tokens"]) == (tools, 1, TOKENS)
            assert r["first_tool_call"] == r["first_token"]  # the answer's first token is the call's
            stamps.append(t0 + r["first_tool_call"] - seen["first"])  # after the server wrote it, and soon
            excess.setdefault(tools, []).append(t0 + r["first_token"] - seen["received"] - seen["cost"])
        assert min(stamps) > -1e-4 and float(np.median(stamps)) < 0.001, stamps
    # from the server's stamp of the received request, TTFT is the known cost per tool, within 1 ms, at 1 and 5
    assert all(0 <= float(np.median(e)) < 0.001 for e in excess.values()), excess
