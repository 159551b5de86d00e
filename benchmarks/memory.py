"""Bytes of memory per recorded request over a 1,000,000-request run (a script, not a test).

Three measurements, each in a fresh subprocess so one's heap does not inflate the next, RSS read
from /proc/self/statm (sampled every 20 ms for the peak):

1. ``buffer``: 1,000,000 synthetic non-streaming Outcomes appended to one RecordBuffer and never
   drained: the cost of holding records in memory, the engine's worst case (a writer that stalls).
2. ``engine``: the real NativeEngine path, closed loop at 64 workers, ``max_requests`` 1,000,000,
   against an in-process null transport (it fills the Outcome as a 200 with a 3-byte body and yields
   to the loop once; no socket): Outcome, handler, RecordBuffer, periodic drain to the parquet
   writer, live stats. RSS growth over the run divided by the requests. ``engine-cb``: the same through
   the callback path (a null transport with ``submit``, as the lean one has).
3. ``stream``: as 1, with 20 token times per request (stored as float32 offsets: 80 bytes of them).
4. ``stream-engine``: the real NativeEngine and openai-chat stream handler, closed loop at ``--streams``
   concurrent streams of ``--tokens`` token events each, ``--stream-requests`` streams, against an in-process
   callback transport that delivers one SSE chunk (a real chat-completion chunk, through ``on_body``) per
   event loop turn and stream, so every stream is in flight for ``--tokens`` turns: the SSE parser, the
   handler, the token-time array and the Outcome of every stream in flight, the RecordBuffer and the
   periodic drain to parquet. RSS growth over the run divided by the token events recorded (the issue's
   bound: 16 bytes a token).

    python benchmarks/memory.py [--requests 1000000] [--stream-requests 40000 --streams 1000 --tokens 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRSS:
    """Samples RSS every 20 ms in a thread; ``peak`` is the largest seen."""

    def __init__(self):
        self.peak = rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(1)
        self.peak = max(self.peak, rss())


def measure_buffer(n: int, tokens: int) -> dict:
    from loadgen.records.schema import Outcome, RecordBuffer

    buf = RecordBuffer()
    base = rss()
    with PeakRSS() as peak:
        for i in range(n):
            out = Outcome(sent=1.0 + i, first_byte=1.001 + i, done=1.002 + i, status=200, bytes_in=3)
            if tokens:
                out.first_token = 1.0015 + i
                out.token_times = [out.first_token + k * 1e-3 for k in range(tokens)]
            buf.append(i, 0, True, float(i), out, 0.5)
        end = rss()
    return {"requests": len(buf), "rss_growth": end - base, "peak_growth": peak.peak - base}


def measure_stream_engine(n: int, streams: int, tokens: int) -> dict:
    """RSS growth of the engine recording ``n`` streams of ``tokens`` events, ``streams`` of them in flight."""
    import asyncio

    import numpy as np
    import pyarrow as pa

    from loadgen.engine.base import EngineSettings, run_async
    from loadgen.engine.native import NativeEngine
    from loadgen.protocols.registry import make_protocol
    from loadgen.records.schema import RecordWriter, read_records
    from loadgen.scenario.model import Target, Workload
    from loadgen.scenario.prompts import make_prompt_source
    from loadgen.schedule.arrivals import PhasePlan

    pa.array(np.zeros(1))
    clock = time.perf_counter
    chunk = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
             b'"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}\n\n')
    tail = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
            b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n'
            % (tokens, tokens + 5))

    class StreamCall:
        __slots__ = ("handler", "out", "on_done", "ctx", "finished", "left")

        def cancel(self):
            self.finished = True

    class NullStreamTransport:
        """``submit``: the status at once, then one token chunk per loop turn, then usage and [DONE]."""

        name = "null-stream"

        def __init__(self):
            self.loop = None

        async def start(self):
            self.loop = asyncio.get_running_loop()

        async def close(self):
            pass

        def submit(self, req, handler, out, on_done, ctx=None):
            out.sent = clock()
            call = StreamCall()
            call.handler, call.out, call.on_done, call.ctx, call.finished, call.left = \
                handler, out, on_done, ctx, False, tokens
            self.loop.call_soon(self.step, call)
            return call

        def step(self, call):
            if call.finished:
                return
            out, handler = call.out, call.handler
            now = clock()
            if call.left == tokens:
                out.first_byte = now
                handler.on_status(200, out)
            if call.left:
                call.left -= 1
                handler.on_body(chunk, now, out)
                self.loop.call_soon(self.step, call)
                return
            handler.on_body(tail, now, out)
            handler.on_end(out)
            out.done = clock()
            call.finished = True
            call.on_done(call)

    tmp = Path(tempfile.mkdtemp(prefix="latbench-mem-"))
    target = Target(url="http://127.0.0.1:9/v1", api="openai-chat", stream=True)
    plan = PhasePlan(index=0, name="main", start=0.0, end=3600.0, concurrency=streams, max_requests=n)
    settings = EngineSettings([plan], grace=5.0)

    async def go():
        transport = NullStreamTransport()
        await transport.start()
        engine = NativeEngine(settings, make_protocol(target, Workload(), "m"), make_prompt_source(Workload(), 0, tmp),
                              transport, RecordWriter(tmp / "requests.parquet"))
        ticker = asyncio.ensure_future(_stop_when_done(engine, n))
        marker = asyncio.ensure_future(mark(engine))
        try:
            return await engine.run()
        finally:
            ticker.cancel()
            marker.cancel()

    warm = {}

    async def mark(engine):
        """RSS once a fifth of the streams are done: growth after it is what a longer run adds per token."""
        while engine.live.completed < n // 5:
            await asyncio.sleep(0.05)
        warm["rss"], warm["completed"] = rss(), engine.live.completed

    base = rss()
    t = time.perf_counter()
    with PeakRSS() as peak:
        result = run_async(go())
        end = rss()
    table = read_records(tmp / "requests.parquet")
    events = int(sum(len(x) for x in table.column("token_times").to_pylist()))
    ok = int(sum(1 for e in table.column("error").to_pylist() if e == ""))
    return {"requests": result.requests, "ok": ok, "events": events, "rss_growth": end - base,
            "peak_growth": peak.peak - base, "seconds": time.perf_counter() - t, "cpu": result.cpu_seconds,
            "late_growth": end - warm["rss"], "late_events": (result.requests - warm["completed"]) * tokens}


def measure_engine(n: int, callbacks: bool = False) -> dict:
    import asyncio

    import numpy as np
    import pyarrow as pa

    from loadgen.engine.base import EngineSettings, run_async
    from loadgen.engine.native import NativeEngine
    from loadgen.protocols.registry import make_protocol
    from loadgen.records.schema import RecordWriter
    from loadgen.scenario.model import Target, Workload
    from loadgen.scenario.prompts import make_prompt_source
    from loadgen.schedule.arrivals import PhasePlan

    pa.array(np.zeros(1))  # pyarrow's first conversion imports pandas: not inside the measurement
    clock = time.perf_counter

    class NullTransport:
        name = "null"
        submit = None  # the Task path

        async def start(self):
            pass

        async def close(self):
            pass

        async def send(self, req, handler, out):
            out.sent = clock()
            await asyncio.sleep(0)
            out.first_byte = clock()
            handler.on_status(200, out)
            handler.on_body(b"ok\n", out.first_byte, out)
            handler.on_end(out)
            out.done = clock()

    class NullCall:
        __slots__ = ("handler", "out", "on_done", "ctx", "finished")

        def cancel(self):
            self.finished = True

    def answer(call):
        out, handler = call.out, call.handler
        out.first_byte = clock()
        handler.on_status(200, out)
        handler.on_body(b"ok\n", out.first_byte, out)
        handler.on_end(out)
        out.done = clock()
        call.finished = True
        call.on_done(call)

    class NullCallbackTransport(NullTransport):
        """The lean transport's callback interface: ``submit``, answered on the loop's next turn."""

        def submit(self, req, handler, out, on_done, ctx=None):
            out.sent = clock()
            call = NullCall()
            call.handler, call.out, call.on_done, call.ctx, call.finished = handler, out, on_done, ctx, False
            asyncio.get_running_loop().call_soon(answer, call)
            return call

    tmp = Path(tempfile.mkdtemp(prefix="latbench-mem-"))
    target = Target(url="http://127.0.0.1:9/", api="http", stream=False)
    plan = PhasePlan(index=0, name="main", start=0.0, end=3600.0, concurrency=64, max_requests=n)
    settings = EngineSettings([plan], grace=5.0)

    async def go():
        transport = NullCallbackTransport() if callbacks else NullTransport()
        engine = NativeEngine(settings, make_protocol(target, Workload(), None), make_prompt_source(Workload(), 0, tmp),
                              transport, RecordWriter(tmp / "requests.parquet"))
        ticker = asyncio.ensure_future(_stop_when_done(engine, n))
        try:
            return await engine.run()
        finally:
            ticker.cancel()

    base = rss()
    t = time.perf_counter()
    with PeakRSS() as peak:
        result = run_async(go())
        end = rss()
    return {"requests": result.requests, "rss_growth": end - base, "peak_growth": peak.peak - base,
            "seconds": time.perf_counter() - t, "parquet_bytes": (tmp / "requests.parquet").stat().st_size}


async def _stop_when_done(engine, n: int) -> None:
    """The closed-loop phase lasts an hour: end it once its budget of requests is spent."""
    import asyncio

    while engine.live.completed < n:
        await asyncio.sleep(0.05)
    engine._stopping = True


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--stream-requests", type=int, default=40_000)
    ap.add_argument("--streams", type=int, default=1000, help="stream-engine: streams in flight")
    ap.add_argument("--tokens", type=int, default=50, help="stream-engine: token events a stream")
    ap.add_argument("--only", default="", help="comma-separated: buffer,stream,engine,engine-cb,stream-engine")
    a = ap.parse_args(argv)
    only = set(filter(None, a.only.split(",")))
    print(f"{'measurement':<34}{'requests':>10}{'RSS growth':>14}{'peak growth':>14}{'B/request':>11}"
          f"{'peak B/req':>11}")
    for kind in ("buffer", "stream", "engine", "engine-cb", "stream-engine"):
        if only and kind not in only:
            continue
        if kind == "stream-engine":
            out = subprocess.run([sys.executable, __file__, "_one", kind, str(a.stream_requests), str(a.streams),
                                  str(a.tokens)], stdout=subprocess.PIPE, text=True, timeout=1800)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"engine, {a.streams} streams in flight x {a.tokens} tokens: {r['ok']} of {r['requests']} streams, "
                  f"{r['events']} token events, {r['seconds']:.1f} s, {r['events'] / r['cpu']:,.0f} events per "
                  f"engine CPU-second\n  RSS growth {r['rss_growth'] / 2**20:.1f} MB "
                  f"(peak {r['peak_growth'] / 2**20:.1f} MB): {r['rss_growth'] / r['events']:.2f} B per token event "
                  f"(in-flight state and first-use costs included)\n  after the first fifth of the streams: "
                  f"{r['late_growth'] / 2**20:.2f} MB over "
                  f"{r['late_events']} events: {r['late_growth'] / max(1, r['late_events']):.2f} B per token event")
            continue
        out = subprocess.run([sys.executable, __file__, "_one", kind, str(a.requests)], stdout=subprocess.PIPE,
                             text=True, timeout=1800)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        label = {"buffer": "RecordBuffer, all held, no drain", "stream": "RecordBuffer, 20 tokens each",
                 "engine": "engine, Task path, flushing", "engine-cb": "engine, callback path, flushing"}[kind]
        n = r["requests"]
        print(f"{label:<34}{n:>10}{r['rss_growth'] / 2**20:>11.1f} MB{r['peak_growth'] / 2**20:>11.1f} MB"
              f"{r['rss_growth'] / n:>11.1f}{r['peak_growth'] / n:>11.1f}")
        if kind.startswith("engine"):
            print(f"  ({r['seconds']:.1f} s, {n / r['seconds']:.0f} req/s; "
                  f"requests.parquet {r['parquet_bytes'] / n:.1f} B/request)")


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "_one":
        kind, n = sys.argv[2], int(sys.argv[3])
        if kind == "stream-engine":
            res = measure_stream_engine(n, int(sys.argv[4]), int(sys.argv[5]))
        elif kind.startswith("engine"):
            res = measure_engine(n, callbacks=kind == "engine-cb")
        else:
            res = measure_buffer(n, 20 if kind == "stream" else 0)
        print(json.dumps(res))
    else:
        main()
