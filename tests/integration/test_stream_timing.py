"""Token timestamps against the server's own clock: a real aiohttp server on 127.0.0.1 stamps every token
event with ``time.monotonic()`` as it writes it; latbench's records (``meta.json``'s ``t0_monotonic`` plus each
record's times) must land just after those stamps, and the recorded inter-token gaps must be the server's."""

import asyncio
import json
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import yaml
from aiohttp import web

from loadgen.engine.options import EngineOptions
from loadgen.records.schema import read_records
from tests.helpers import run

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)

TOKENS, TTFT, GAP = 8, 0.03, 0.02
_ID = re.compile(r"req-(\d+)")


class StampingServer:
    """Streams ``TOKENS`` chat chunks (first after ``TTFT``, then every ``GAP``), each holding the
    ``time.monotonic()`` at which it was written; ``stamps[N]`` keeps them for the prompt ``req-N``."""

    def __init__(self):
        self.stamps: dict[int, list[float]] = {}
        self._ready = threading.Event()

    async def chat(self, request: web.Request):
        body = await request.json()
        n = int(_ID.search(body["messages"][0]["content"]).group(1))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start, mine = time.monotonic(), []
        self.stamps[n] = mine  # filled as each is written: the client may read [DONE] before this handler returns
        for i in range(TOKENS):
            await asyncio.sleep(max(0.0, start + TTFT + i * GAP - time.monotonic()))
            t = time.monotonic()
            chunk = {"choices": [{"index": 0, "delta": {"content": "x"}}], "server_t": t}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            mine.append(t)
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
def stamping_server():
    with StampingServer() as s:
        yield s


@pytest.mark.skipif(sys.platform != "linux", reason="perf_counter is CLOCK_MONOTONIC on Linux")
def test_perf_counter_is_the_monotonic_clock():
    assert time.get_clock_info("perf_counter").implementation == time.get_clock_info("monotonic").implementation


@pytest.mark.skipif(sys.platform != "linux", reason="perf_counter is CLOCK_MONOTONIC on Linux")
@pytest.mark.parametrize("transport, processes", [("lean", 1), ("aiohttp", 1), ("lean", 2)])
def test_token_times_match_the_servers_stamps(tmp_path, stamping_server, transport, processes):
    """One process, and the multi-process engine (each process its own event loop and record file, one t0)."""
    requests = 12
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"req-{i}"}) + "\n" for i in range(requests)))
    result, summary, _ = run(tmp_path, f"""
        name: stamps
        target: {{url: "http://127.0.0.1:{stamping_server.port}/v1", stream: true, model: m, transport: {transport}}}
        workload: {{dataset: prompts.jsonl, max_tokens: {TOKENS}}}
        load:
          mode: closed
          phases: [{{name: main, duration: 2s, concurrency: 4, max_requests: {requests}}}]
        """, opts=EngineOptions(processes=processes))
    meta = json.loads((result.rundir.path / "meta.json").read_text())
    (entry,) = meta["targets"]
    t0 = entry["t0_monotonic"]
    table = read_records(result.rundir.path / entry["dir"] / "requests.parquet").to_pylist()
    assert len(table) == requests and all(r["error"] == "" for r in table)
    assert {r["worker"] for r in table} == set(range(processes)), "each process sent its share"
    errors, itl_errors = [], []
    for r in table:
        stamps = np.array(stamping_server.stamps[r["seq"]])  # dataset line seq is prompt req-<seq>
        got = t0 + r["first_token"] + np.array(r["token_times"], dtype=np.float64)
        assert len(got) == TOKENS
        errors.extend(got - stamps)
        itl_errors.extend(np.diff(got) - np.diff(stamps))
    errors = np.array(errors)
    # a token is read after it was written (float32 offsets: a few microseconds of rounding), and soon after
    assert errors.min() > -1e-4, errors.min()
    assert np.median(errors) < 0.005 and errors.max() < 0.1, (np.median(errors), errors.max())
    assert np.median(np.abs(itl_errors)) < 0.005
    assert summary["generator"]["receive_stamps"] == ("kernel" if transport == "lean" else "read")
    itl = summary["overall"]["metrics"]["itl"]["percentiles"]["p50"]["value"]
    assert GAP * 0.9 < itl < GAP + 0.01, itl


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux's")
@pytest.mark.parametrize("kernel_stamps", [True, False])
def test_a_busy_client_still_stamps_tokens_when_they_arrived(stamping_server, kernel_stamps):
    """The client's event loop is blocked from 10 to 45 ms after the request, as the first token arrives (at 30 ms).
    With the kernel's receive stamps (a streaming target's default on Linux) every token keeps its arrival time;
    without them (``receive_stamps: read``) the first is stamped when the client got to it, ~15 ms late. (Two
    tokens that wait in the socket together are one read, stamped with the later one's arrival: TCP keeps the last
    packet's.)"""
    from loadgen.protocols.base import Request
    from loadgen.protocols.openai import StreamHandler
    from loadgen.records.schema import Outcome
    from loadgen.transports.lean import LeanTransport

    busy, block_end = 0.035, []
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "req-7"}]}).encode()
    url = f"http://127.0.0.1:{stamping_server.port}/v1/chat/completions"
    req = Request("POST", url, "/v1/chat/completions", (("Content-Type", "application/json"),), body, True)

    async def go():
        t = LeanTransport(receive_stamps=kernel_stamps)
        await t.start()
        out = Outcome()
        loop = asyncio.get_running_loop()
        def block():
            time.sleep(busy)
            block_end.append(time.perf_counter())

        loop.call_later(0.01, block)  # TTFT 0.03, then a token every 0.02: only the first waits
        await asyncio.wait_for(t.send(req, StreamHandler(chat=True), out), 10)
        await t.close()
        return out

    out = asyncio.run(go())
    assert out.error == "", out.error_detail
    stamps = np.array(stamping_server.stamps[7])
    got = np.array(out.token_times)
    assert len(got) == TOKENS
    late = got - stamps
    waited = stamps < block_end[0]  # tokens that arrived while the client was blocked
    assert waited.any(), (stamps, block_end)
    assert late.min() > -1e-4, late  # never before the server wrote it
    if kernel_stamps:
        assert late.max() < 0.004, late  # the arrival, though the client read the first token ~15 ms later
    else:
        assert (got[waited] >= block_end[0]).all(), late  # read when the block ended


@pytest.mark.parametrize("fields, engine, expected", [
    ("stream: true", "native", "kernel"),
    ("stream: false", "native", "read"),
    ("stream: false, receive_stamps: kernel", "native", "kernel"),
    ("stream: true, receive_stamps: read", "native", "read"),
    ("stream: true, transport: aiohttp", "native", "read"),
    ("stream: true", "locust", "read"),
])
def test_which_reads_are_stamped_by_the_kernel(fields, engine, expected):
    from loadgen.scenario.model import Target
    from loadgen.transports.factory import receive_stamps
    from loadgen.transports.lean_socket import available

    t = Target.model_validate(yaml.safe_load(f"{{url: 'http://127.0.0.1:9/v1', {fields}}}"))
    assert receive_stamps(t, engine) == (expected if available() else "read")


def test_kernel_stamps_where_they_cannot_be_taken_are_refused_with_the_scenario_line(tmp_path):
    from loadgen.errors import TransportError
    from loadgen.scenario.model import Target
    from loadgen.transports.factory import make_transport

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: k\ntarget:\n  url: https://127.0.0.1:9/v1\n  stream: true\n  receive_stamps: kernel\n"
                   "load:\n  phases: [{name: main, duration: 1s, qps: 2}]\n")
    r = subprocess.run([sys.executable, "-m", "loadgen.cli", "validate", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "bad.yaml:3" in r.stderr and "receive_stamps: kernel needs the lean transport" \
        in r.stderr, r.stderr
    # and a target built past the loader meets the same refusal where its transport is made
    t = Target.model_construct(**{**Target(url="http://127.0.0.1:9/v1").__dict__, "url": "https://127.0.0.1:9/v1",
                                  "receive_stamps": "kernel"})
    with pytest.raises(TransportError, match="receive_stamps: kernel needs the lean transport"):
        make_transport(t)


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux's")
def test_a_request_larger_than_the_socket_buffer_is_written_whole_with_kernel_stamps(stamping_server):
    """8 MB of prompt: the stamped socket writes what the kernel takes, the rest as it drains (add_writer)."""
    from loadgen.protocols.base import Request
    from loadgen.protocols.openai import StreamHandler
    from loadgen.records.schema import Outcome
    from loadgen.transports.lean import LeanTransport

    url = f"http://127.0.0.1:{stamping_server.port}/v1/chat/completions"

    def request(n: int) -> Request:
        prompt = f"req-{n} " + "x" * (8 << 20)
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": prompt}]})
        return Request("POST", url, "/v1/chat/completions", (("Content-Type", "application/json"),), body.encode(),
                       True)

    async def go():
        t = LeanTransport(receive_stamps=True)
        await t.start()
        outs = []
        for n in (9, 10):  # and the connection is reused after it
            out = Outcome()
            await asyncio.wait_for(t.send(request(n), StreamHandler(chat=True), out), 30)
            outs.append(out)
        assert len(t.conns) == 1
        await t.close()
        return outs

    outs = asyncio.run(go())
    deadline = time.monotonic() + 5
    while 10 not in stamping_server.stamps and time.monotonic() < deadline:  # the server logs after its last write
        time.sleep(0.01)
    for n, out in zip((9, 10), outs):
        assert out.error == "", out.error_detail
        late = np.array(out.token_times) - np.array(stamping_server.stamps[n])
        assert late.min() > -1e-4 and late.max() < 0.004, late


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux's")
def test_a_kernel_that_refuses_the_stamps_leaves_reads_stamped_when_read(stamping_server, monkeypatch):
    """A sandboxed kernel may refuse SO_TIMESTAMPNS (this one does not: the refusal is simulated). The request must
    still succeed, its reads stamped when read."""
    import socket

    from loadgen.protocols.base import Request
    from loadgen.protocols.openai import StreamHandler
    from loadgen.records.schema import Outcome
    from loadgen.transports.lean import LeanTransport
    from loadgen.transports.lean_socket import SO_TIMESTAMPNS

    real = socket.socket.setsockopt

    def refuse(self, level, name, value):
        if (level, name) == (socket.SOL_SOCKET, SO_TIMESTAMPNS):
            raise OSError(92, "Protocol not available")
        return real(self, level, name, value)

    monkeypatch.setattr(socket.socket, "setsockopt", refuse)
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "req-11"}]}).encode()
    url = f"http://127.0.0.1:{stamping_server.port}/v1/chat/completions"
    req = Request("POST", url, "/v1/chat/completions", (("Content-Type", "application/json"),), body, True)
    block_end = []

    async def go():
        t = LeanTransport(receive_stamps=True)
        await t.start()
        out = Outcome()

        def block():
            time.sleep(0.035)
            block_end.append(time.perf_counter())

        asyncio.get_running_loop().call_later(0.01, block)
        await asyncio.wait_for(t.send(req, StreamHandler(chat=True), out), 10)
        await t.close()
        return out

    out = asyncio.run(go())
    assert out.error == "", out.error_detail
    got, stamps = np.array(out.token_times), np.array(stamping_server.stamps[11])
    waited = stamps < block_end[0]
    assert len(got) == TOKENS and waited.any()
    assert (got[waited] >= block_end[0]).all()  # read time: no stamp came
