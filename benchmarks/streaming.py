"""Token streams at scale: latbench against `vllm bench serve`, AIPerf and Locust on one streaming server
(a script, not a test).

The server is ``benchmarks/stream_server.py``, pinned to the first CPU; every client is pinned to the last one
(``taskset``), so on 2 cores the server and the client each have a core. Every token event carries the server's
send time on CLOCK_MONOTONIC, so each tool's recorded token times are compared with the truth.

1. **Efficiency** (closed loop, every tool): ``--streams`` concurrent streams of ``--tokens`` tokens, one every
   ``--itl`` (the first after ``--itl``), ``--duration`` seconds; ``--rounds`` interleaved rounds, medians.
   - *steady*: token events the server sent in a 10 s window (from 4 s after the first event) divided by the
     client's CPU seconds in that window (utime + stime of the tool's whole process tree, read from /proc);
     the tool keeps up at this load, so what the server sent is what it recorded;
   - *whole*: token events the tool itself recorded divided by the CPU of its whole process tree from exec to
     exit (start-up, imports, writing results included; ``wait4`` rusage);
   - *timestamp error*: recorded token time minus the server's stamp, p50/p99 over every token, from each
     tool's own per-token times (latbench: ``requests.parquet`` + ``meta.json``'s ``t0_monotonic``; vLLM:
     ``start_times + ttfts + cumsum(itls)`` of ``--save-detailed``; AIPerf: ``perf_ns`` of each response in
     ``--export-level raw``; Locust: ``perf_counter()`` right after each SSE line was read, in the user code).
     AIPerf's raw export costs CPU, so it is its own row ("aiperf raw"), run in the first round only.
   - latbench runs as a CI job would (``--quiet --no-report``: the RunDir, summary.md and junit.xml, no charts),
     its token times the kernel's arrival stamps; beneath it, *read-time* (``receive_stamps: read``: stamped
     when latbench's code reads them, as every peer stamps) and *+report* (report.html rendered too);
   - *floor*: the least a Python client does per event (uvloop, one asyncio.Protocol a connection, a clock
     reading per read, the stamps picked out of the bytes by a regex; no HTTP or SSE parsing): what any
     asyncio client pays on this machine at that moment, and the timestamp error the machine allows.
2. **Scale** (open loop, latbench): streams of 50 tokens at one every 200 ms (TTFT 200 ms: 10 s each)
   arriving at ``--rates`` per second (Poisson) for ``--scale-duration`` s: in flight, recorded, errors, send lag
   p50/p99 (``sent - scheduled``) against the run's threshold, timestamp error p50/p99, and the server's
   own send lag behind its timetable; the peers at ``--peer-rates``.

Peers: ``/root/.cache/latbench-peers/{vllm,aiperf,locust}`` (their own virtual environments); a missing one
is skipped with a note. vLLM and AIPerf need a tokenizer: a small word-level one is written to a temporary
Hugging Face cache (offline), since nothing may be downloaded.

    python benchmarks/streaming.py [--rounds 3] [--streams 100] [--tokens 100] [--itl 0.02] [--duration 20]
                                   [--rates 250,500,1000] [--skip vllm,aiperf,locust,scale]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from array import array
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path("/root/.cache/latbench-peers")
CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPU, CLIENT_CPU = str(CPUS[0]), str(CPUS[-1])
TICK = os.sysconf("SC_CLK_TCK")
WARM_S, WINDOW_S = 4.0, 10.0  # the steady-state window: from WARM_S after the first token event, WINDOW_S long


# --- the server ----------------------------------------------------------------------------------------------


class Server:
    """``stream_server.py`` on CPU 0: start, read its counters, take its stamp log, stop."""

    def __init__(self, itl: float, ttft: float, tokens: int):
        argv = [sys.executable, str(ROOT / "benchmarks" / "stream_server.py"), "--port", "0", "--itl", str(itl),
                "--ttft", str(ttft), "--tokens", str(tokens)]
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *argv], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split("=")[1])
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                self.get("/health")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read()

    def stats(self, reset: bool = False, lags: bool = False) -> dict:
        """The server's counters (``lags``: and its send lag percentiles, a sort of every event: once a run)."""
        return json.loads(self.get("/stats?" + "&".join(k for k, v in (("lags", lags), ("reset", reset)) if v)))

    def dump(self) -> dict[int, np.ndarray]:
        """Stamps of the streams whose prompt held ``req-N``, by N (the log is emptied)."""
        return {n: np.asarray(s) for n, _, s in json.loads(self.get("/dump"))}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# --- CPU of a process tree -----------------------------------------------------------------------------------


def tree_cpu(root: int) -> float:
    """utime + stime (seconds) of ``root`` and its living descendants, from /proc."""
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / TICK
    total, todo = 0.0, [root]
    kids: dict[int, list[int]] = {}
    for p, pp in parent.items():
        kids.setdefault(pp, []).append(p)
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo.extend(kids.get(p, ()))
    return total


def run_client(argv: list[str], server: Server, limit: float, env: dict | None = None, cwd=None) -> dict:
    """Run a tool on the client CPU; its whole-tree CPU (rusage) and the steady window's CPU and server events."""
    server.stats(reset=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.Popen(["taskset", "-c", CLIENT_CPU, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, cwd=cwd, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    steady = None
    try:
        while proc.poll() is None and time.monotonic() - t < limit:  # the first token event starts the clock
            if server.stats()["events"] > 0:
                break
            time.sleep(0.1)
        if proc.poll() is None:
            time.sleep(WARM_S)
            w0, c0, e0 = time.monotonic(), tree_cpu(proc.pid), server.stats()["events"]
            time.sleep(WINDOW_S)
            if proc.poll() is None:
                w1, c1, e1 = time.monotonic(), tree_cpu(proc.pid), server.stats()["events"]
                steady = {"cpu": c1 - c0, "sent": e1 - e0, "wall": w1 - w0, "t0": w0, "t1": w1}
        proc.wait(max(1.0, limit - (time.monotonic() - t)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": proc.returncode, "cpu": cpu, "wall": time.monotonic() - t, "steady": steady, "output": "".join(out),
            "server": server.stats(lags=True)}


def recorded_in_window(res: dict, times: np.ndarray | None) -> None:
    """The steady window's events: the tool's own recorded token times inside it, else (no per-token times)
    what the server sent in it."""
    st = res.get("steady")
    if st is None:
        return
    if times is None:
        st["events"], st["source"] = st["sent"], "server"
    else:
        st["events"], st["source"] = int(((times >= st["t0"]) & (times < st["t1"])).sum()), "client"


# --- the load, per tool ---------------------------------------------------------------------------------------


class Load:
    """One closed- or open-loop load, as each tool spells it."""

    def __init__(self, streams: int, tokens: int, itl: float, duration: float, rate: float = 0.0):
        self.streams, self.tokens, self.itl, self.duration, self.rate = streams, tokens, itl, duration, rate
        stream_s = itl + (tokens - 1) * itl
        self.requests = int(rate * duration) if rate else max(1, int(streams * duration / stream_s))


def latbench(load: Load, server: Server, tmp: Path, report: bool = False, stamps: str = "auto") -> dict:
    """``latbench run`` (``report``: with report.html, else ``--no-report``; ``stamps``: the target's
    ``receive_stamps``)."""
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="lb-"))
    with open(work / "prompts.jsonl", "w") as f:
        for i in range(load.requests + 10 * max(load.streams, 100)):
            f.write(f'{{"prompt": "req-{i}", "max_tokens": {load.tokens}}}\n')
    phase = (f"{{name: main, duration: {load.duration:g}s, qps: {load.rate:g}}}" if load.rate else
             f"{{name: main, duration: {load.duration:g}s, concurrency: {load.streams}}}")
    (work / "s.yaml").write_text(textwrap.dedent(f"""
        name: streaming
        target: {{url: "{server.url}/v1", api: openai-chat, stream: true, model: bench, timeout: 60s,
                  receive_stamps: {stamps}}}
        workload: {{dataset: prompts.jsonl}}
        load:
          mode: {"open" if load.rate else "closed"}
          arrival: poisson
          max_in_flight: 30000
          grace: 30s
          phases: [{phase}]
        """))
    exe = Path(sys.executable).parent / "latbench"  # the console script of the environment running this
    res = run_client([str(exe) if exe.exists() else "latbench", "run", str(work / "s.yaml"), "--out",
                      str(work / "runs"), "--quiet", *([] if report else ["--no-report"])], server,
                     load.duration + 120, cwd=work)
    rundir = next((work / "runs").iterdir())
    meta = json.loads((rundir / "meta.json").read_text())
    (entry,) = meta["targets"]
    table = pq.read_table(rundir / entry["dir"] / "requests.parquet").to_pydict()
    stamps = server.dump()
    t0 = entry["t0_monotonic"]
    errs, events, times = [], 0, []
    for seq, ft, tt in zip(table["seq"], table["first_token"], table["token_times"]):
        if not tt:
            continue
        events += len(tt)
        got = t0 + ft + np.asarray(tt, dtype=np.float64)
        times.append(got)
        truth = stamps.get(seq)
        if truth is not None and len(truth) == len(tt):
            errs.append(got - truth)
    err = np.concatenate(errs) if errs else np.array([])
    recorded_in_window(res, np.concatenate(times) if times else np.array([]))
    sched, sent = np.asarray(table["scheduled"]), np.asarray(table["sent"])
    error = np.asarray(table["error"], dtype=object)
    classes, counts = np.unique(error[error != ""], return_counts=True)
    res.update(events=events, err=err, streams=len(sched), failed=int((error != "").sum()),
               lag=np.sort((sent - sched)[error != "dropped"]),
               note=" ".join(f"{c}:{n}" for c, n in zip(classes, counts)))
    summary = json.loads((rundir / entry["dir"] / "summary.json").read_text())
    res["lag_threshold"] = summary["generator"]["send_lag_threshold"]
    shutil.rmtree(work, ignore_errors=True)
    return res


def vllm(load: Load, server: Server, tmp: Path, tokenizer: Path) -> dict:
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="vllm-"))
    argv = [str(PEERS / "vllm" / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
            "--base-url", server.url, "--endpoint", "/v1/chat/completions", "--model", "bench",
            "--tokenizer", str(tokenizer),
            "--dataset-name", "random", "--random-input-len", "10", "--random-output-len", str(load.tokens),
            "--ignore-eos", "--num-prompts", str(load.requests), "--save-result", "--save-detailed",
            "--result-dir", str(work), "--result-filename", "r.json", "--disable-tqdm"]
    argv += ["--request-rate", str(load.rate)] if load.rate else ["--request-rate", "inf", "--max-concurrency",
                                                                   str(load.streams)]
    res = run_client(argv, server, load.duration + 300, env={"HF_HUB_OFFLINE": "1"})
    d = json.loads((work / "r.json").read_text())
    errs, events, times = [], 0, []
    for st, ttft, itl, text in zip(d["start_times"], d["ttfts"], d["itls"], d["generated_texts"]):
        truth = np.array([float(x) for x in text.split()])
        if not ttft:
            continue
        got = st + ttft + np.concatenate([[0.0], np.cumsum(itl)])
        events += len(got)
        times.append(got)
        if len(got) == len(truth):
            errs.append(got - truth)
    recorded_in_window(res, np.concatenate(times) if times else np.array([]))
    res.update(events=events, err=np.concatenate(errs) if errs else np.array([]), streams=len(d["start_times"]),
               failed=int(d.get("failed", 0)))
    shutil.rmtree(work, ignore_errors=True)
    return res


def aiperf(load: Load, server: Server, tmp: Path, hf_home: Path, raw: bool) -> dict:
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="aiperf-"))
    argv = [str(PEERS / "aiperf" / "bin" / "aiperf"), "profile", "--model", "bench", "--url", server.url,
            "--endpoint-type", "chat", "--streaming", "--tokenizer", "latbench/bench-tokenizer",
            "--isl", "10", "--osl", str(load.tokens), "--extra-inputs", "ignore_eos:true",
            "--ui", "none", "--artifact-dir", str(work), "--no-server-metrics", "--no-gpu-telemetry",
            "--export-level", "raw" if raw else "records", "--random-seed", "1"]
    argv += (["--request-rate", str(load.rate), "--request-count", str(load.requests)] if load.rate else
             ["--concurrency", str(load.streams), "--request-count", str(load.requests)])
    res = run_client(argv, server, load.duration + 300, env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}, cwd=work)
    events, errs, times, streams, failed = 0, [], [], 0, 0
    if raw:
        with open(work / "profile_export_raw.jsonl") as f:
            for line in f:
                r = json.loads(line)
                streams += 1
                failed += r.get("status") != 200
                got, truth = [], []
                for resp in r.get("responses") or ():
                    for pk in resp.get("packets") or ():
                        v = pk.get("value", "")
                        if '"server_t"' in v:
                            got.append(resp["perf_ns"] / 1e9)
                            truth.append(json.loads(v)["server_t"])
                events += len(got)
                if got:
                    errs.append(np.asarray(got) - np.asarray(truth))
                    times.append(np.asarray(got))
        recorded_in_window(res, np.concatenate(times) if times else np.array([]))
    else:
        with open(work / "profile_export.jsonl") as f:
            for line in f:
                r = json.loads(line)
                streams += 1
                m = r.get("metrics") or {}
                if r.get("error"):
                    failed += 1
                events += int((m.get("output_token_count") or {}).get("value") or 0)
        recorded_in_window(res, None)  # no per-token times at this export level
    res.update(events=events, err=np.concatenate(errs) if errs else np.array([]), streams=streams, failed=failed)
    shutil.rmtree(work, ignore_errors=True)
    return res


LOCUSTFILE = '''
import json, os, time
from locust import FastHttpUser, constant, events, task

BODY = json.dumps({"model": "bench", "stream": True, "max_tokens": int(os.environ["LB_TOKENS"]),
                   "messages": [{"role": "user", "content": "hi"}]})
HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
GOT, TRUTH, STREAMS, FAILED = [], [], [0], [0]


class SSEUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 60.0
    connection_timeout = 60.0

    @task
    def stream(self):
        with self.client.post("/v1/chat/completions", data=BODY, headers=HEADERS, stream=True,
                              catch_response=True) as r:
            STREAMS[0] += 1
            done = False
            while True:
                line = r._response.readline(b"\\n")  # one SSE line as soon as it arrived (read(n) waits for n bytes)
                if not line:
                    break
                now = time.perf_counter()
                if line.startswith(b"data: {"):
                    obj = json.loads(line[6:])
                    if obj.get("choices") and obj["choices"][0]["delta"].get("content"):
                        GOT.append(now)
                        TRUTH.append(obj["server_t"])
                elif line.startswith(b"data: [DONE]"):
                    done = True
            if done:
                r.success()
            else:
                FAILED[0] += 1
                r.failure("no [DONE]")


@events.quitting.add_listener
def _save(environment, **kw):
    with open(os.environ["LB_OUT"], "w") as f:
        json.dump({"got": GOT, "truth": TRUTH, "streams": STREAMS[0], "failed": FAILED[0]}, f)
'''


def locust(load: Load, server: Server, tmp: Path) -> dict:
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="locust-"))
    (work / "locustfile.py").write_text(LOCUSTFILE)
    argv = [str(PEERS / "locust" / "bin" / "locust"), "-f", str(work / "locustfile.py"), "--headless",
            "-u", str(load.streams), "-r", str(max(load.streams, 1)), "-t", f"{load.duration:g}s",
            "--host", server.url, "--only-summary", "--loglevel", "ERROR", "--stop-timeout", "30"]
    env = {"LB_TOKENS": str(load.tokens), "LB_OUT": str(work / "o.json")}
    res = run_client(argv, server, load.duration + 120, env=env)
    d = json.loads((work / "o.json").read_text())
    got, truth = np.asarray(d["got"]), np.asarray(d["truth"])
    res.update(events=len(got), err=got - truth, streams=d["streams"], failed=d["failed"])
    recorded_in_window(res, got)
    shutil.rmtree(work, ignore_errors=True)
    return res


async def _floor_client(url: str, streams: int, tokens: int, duration: float, out: str) -> None:
    """The least a Python client can do per event: uvloop, one asyncio.Protocol per connection, a clock reading
    per read and the stamps picked out of the bytes (no HTTP or SSE parsing, nothing recorded but the pairs)."""
    import asyncio
    import re

    host, port = url.split("//")[1].split(":")
    body = b'{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}' % tokens
    req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    stamp = re.compile(rb'"server_t":\s*([0-9.]+)')
    got, truth = array("d"), array("d")
    loop = asyncio.get_running_loop()
    end = time.perf_counter() + duration
    clock = time.perf_counter
    done = loop.create_future()
    live = [0]

    class Floor(asyncio.Protocol):
        def connection_made(self, tr):
            self.tr = tr
            tr.write(req)

        def data_received(self, data):
            now = clock()
            for m in stamp.finditer(data):
                got.append(now)
                truth.append(float(m.group(1)))
            if data.endswith(b"0\r\n\r\n"):  # the stream's last chunk: the next request, while time remains
                if clock() < end:
                    self.tr.write(req)
                else:
                    self.tr.close()
                    live[0] -= 1
                    if live[0] == 0 and not done.done():
                        done.set_result(None)

    for _ in range(streams):
        await loop.create_connection(Floor, host, int(port))
        live[0] += 1
    await asyncio.wait_for(done, duration + 60)
    with open(out, "w") as f:
        json.dump({"got": got.tolist(), "truth": truth.tolist()}, f)


def floor(load: Load, server: Server, tmp: Path) -> dict:
    out = tmp / f"floor-{time.monotonic_ns()}.json"
    res = run_client([sys.executable, __file__, "_floor", server.url, str(load.streams), str(load.tokens),
                      str(load.duration), str(out)], server, load.duration + 120)
    d = json.loads(out.read_text())
    got, truth = np.asarray(d["got"]), np.asarray(d["truth"])
    res.update(events=len(got), err=got - truth, streams=0, failed=0)
    recorded_in_window(res, got)
    return res


def make_tokenizer(tmp: Path) -> tuple[Path, Path]:
    """A word-level tokenizer (whitespace split; the server's token texts are one word each) as a local folder
    and as the Hugging Face cache entry ``latbench/bench-tokenizer`` (AIPerf loads offline from the cache only)."""
    words = ["[UNK]", *"the of and to in is it you that he was for on are as with his they at be this".split(),
             *(str(i) for i in range(1000))]
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True}],
           "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(dict.fromkeys(words))},
                     "unk_token": "[UNK]"}}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1_000_000}
    local = tmp / "tokenizer"
    hf = tmp / "hf"
    repo = hf / "hub" / "models--latbench--bench-tokenizer"
    snap = repo / "snapshots" / ("0" * 40)
    for d in (local, snap):
        d.mkdir(parents=True)
        (d / "tokenizer.json").write_text(json.dumps(tok))
        (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return local, hf


# --- the tables ---------------------------------------------------------------------------------------------


def q(a: np.ndarray, p: float) -> float:
    """Nearest-rank percentile (nan when empty)."""
    if len(a) == 0:
        return float("nan")
    a = np.sort(a)
    return float(a[min(len(a) - 1, max(0, int(np.ceil(p * len(a))) - 1))])


def med(vals) -> float:
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else float("nan")


def show_efficiency(results: dict[str, list[dict]], load: Load) -> None:
    print(f"\nefficiency: {load.streams} concurrent streams x {load.tokens} tokens, one every {load.itl * 1e3:g} ms "
          f"({load.streams / load.itl:,.0f} events/s), {load.duration:g} s; server on CPU {SERVER_CPU}, client on "
          f"CPU {CLIENT_CPU}; medians of the rounds (n = rounds)")
    print(f"{'client':<14}{'n':>3}{'events':>9}{'fail':>6}{'steady ev/CPU-s':>17}{'x':>7}{'whole ev/CPU-s':>16}{'x':>7}"
          f"{'CPU s':>7}{'err p50 ms':>11}{'p99 ms':>9}")
    rows = {}
    for name, rs in results.items():
        ok = [r for r in rs if r.get("events")]
        if not ok:
            print(f"{name:<14} no result ({'; '.join(str(r.get('note', r.get('rc'))) for r in rs)})")
            continue
        steady = med([r["steady"]["events"] / r["steady"]["cpu"] if r.get("steady") and r["steady"]["cpu"] else
                      float("nan") for r in ok])
        whole = med([r["events"] / r["cpu"] for r in ok])
        rows[name] = (steady, whole, ok)
    for name, (steady, whole, ok) in rows.items():
        lb = rows.get("latbench")
        xs = lb[0] / steady if lb and name != "latbench" else float("nan")
        xw = lb[1] / whole if lb and name != "latbench" else float("nan")
        name = name.replace("lb ", "  ", 1)  # latbench's variants under its row
        print(f"{name:<14}{len(ok):>3}{med([r['events'] for r in ok]):>9.0f}{med([r['failed'] for r in ok]):>6.0f}"
              f"{steady:>17,.0f}{xs:>7.1f}{whole:>16,.0f}{xw:>7.1f}{med([r['cpu'] for r in ok]):>7.2f}"
              f"{med([q(r['err'], 0.5) * 1e3 for r in ok]):>11.3f}{med([q(r['err'], 0.99) * 1e3 for r in ok]):>9.3f}")
    if len(rows) > 1:
        print("x = latbench's events per CPU-second divided by this tool's (how many times more latbench records)")
    rep = rows.get("lb +report")
    peers = [n for n in rows if n != "floor" and not n.startswith(("latbench", "lb "))]
    if rep and peers:  # a CI job's whole process with its report, against each peer's whole process
        print("latbench +report, whole process per CPU-second, x each peer's: "
              + ", ".join(f"{n} {rep[1] / rows[n][1]:.1f}x" for n in peers))
    print("latbench: `latbench run --quiet --no-report` (the RunDir: records, summary.json, summary.md, junit.xml), "
          "token times the kernel's arrival stamps; read-time: receive_stamps: read; +report: report.html too")


def show_scale(results: dict[str, list[dict]]) -> None:
    print("\nscale, open loop: streams of 50 tokens at one every 200 ms (TTFT 200 ms), Poisson arrivals; medians")
    print(f"{'run':<18}{'n':>3}{'streams':>9}{'failed':>7}{'peak in flight':>15}{'events/s':>10}{'lag p50 ms':>11}"
          f"{'p99 ms':>9}{'thresh':>7}{'err p50 ms':>11}{'p99 ms':>9}{'srv lag p99':>12}{'CPU s':>7}")
    for name, rs in results.items():
        ok = [r for r in rs if r.get("streams")]
        if not ok:
            print(f"{name:<22} no result")
            continue
        lag50 = med([q(r["lag"], 0.5) * 1e3 if "lag" in r else float("nan") for r in ok])
        lag99 = med([q(r["lag"], 0.99) * 1e3 if "lag" in r else float("nan") for r in ok])
        th = med([r.get("lag_threshold", float("nan")) * 1e3 for r in ok])
        print(f"{name:<18}{len(ok):>3}{med([r['streams'] for r in ok]):>9.0f}{med([r['failed'] for r in ok]):>7.0f}"
              f"{med([r['peak'] for r in ok]):>15.0f}{med([r['events_per_s'] for r in ok]):>10.0f}{lag50:>11.1f}"
              f"{lag99:>9.1f}{th:>7.0f}{med([q(r['err'], 0.5) * 1e3 for r in ok]):>11.1f}"
              f"{med([q(r['err'], 0.99) * 1e3 for r in ok]):>9.1f}"
              f"{med([r['server']['lag_p99_s'] * 1e3 for r in ok]):>12.1f}{med([r['cpu'] for r in ok]):>7.2f}")


def with_peak(fn, server: Server):
    """Run ``fn()`` while sampling the server's active streams; the result gets ``peak`` and ``events_per_s``."""
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.wait(0.25):
            try:
                peak[0] = max(peak[0], server.stats()["active"])
            except OSError:
                pass

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        r = fn()
    finally:
        stop.set()
        th.join(2)
    r["peak"] = peak[0]
    st = r.get("steady")
    r["events_per_s"] = st["events"] / st["wall"] if st else float("nan")
    return r


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--rates", default="250,500,1000", help="scale: latbench's stream arrival rates per second")
    ap.add_argument("--peer-rates", default="", help="scale: the peers' rates (default: none)")
    ap.add_argument("--scale-duration", type=float, default=20.0)
    ap.add_argument("--skip", default="",
                    help="comma-separated: latbench,lb-read-time,lb-report,vllm,aiperf,aiperf-raw,locust,floor,"
                         "efficiency,scale")
    a = ap.parse_args(argv)
    skip = set(filter(None, a.skip.split(",")))
    tmp = Path(tempfile.mkdtemp(prefix="latbench-streaming-"))
    tokenizer, hf_home = make_tokenizer(tmp)
    tools = {}
    if "latbench" not in skip:
        tools["latbench"] = lambda load, srv: latbench(load, srv, tmp)
    if "lb-read-time" not in skip:  # token times taken when read, not the kernel's arrival stamps
        tools["lb read-time"] = lambda load, srv: latbench(load, srv, tmp, stamps="read")
    if "lb-report" not in skip:  # and report.html rendered, as `latbench run` does by default
        tools["lb +report"] = lambda load, srv: latbench(load, srv, tmp, report=True)
    for peer in ("vllm", "aiperf", "locust"):
        if peer in skip:
            continue
        if not (PEERS / peer / "bin" / peer).exists():
            print(f"note: {PEERS / peer} is not installed: {peer} skipped")
            continue
        tools[peer] = {"vllm": lambda load, srv: vllm(load, srv, tmp, tokenizer),
                       "aiperf": lambda load, srv: aiperf(load, srv, tmp, hf_home, raw=False),
                       "locust": lambda load, srv: locust(load, srv, tmp)}[peer]
    if "floor" not in skip:
        tools["floor"] = lambda load, srv: floor(load, srv, tmp)
    if "aiperf" in tools and "aiperf-raw" not in skip:
        tools["aiperf raw"] = lambda load, srv: aiperf(load, srv, tmp, hf_home, raw=True)
    print(f"{os.cpu_count()} CPUs; server on CPU {SERVER_CPU}, clients on CPU {CLIENT_CPU}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    try:
        if "efficiency" not in skip:
            load = Load(a.streams, a.tokens, a.itl, a.duration)
            server = Server(a.itl, a.itl, a.tokens)
            results: dict[str, list[dict]] = {name: [] for name in tools}
            try:
                for rnd in range(a.rounds):
                    for name, fn in tools.items():
                        if name == "aiperf raw" and rnd > 0:
                            continue
                        try:
                            r = fn(load, server)
                        except Exception as exc:  # a peer that fails is a row with a note, not a lost benchmark
                            r = {"note": f"{type(exc).__name__}: {exc}"}
                        results[name].append(r)
                        st = r.get("steady") or {}
                        print(f"  round {rnd + 1} {name:<11} events {r.get('events', 0):>8} "
                              f"CPU {r.get('cpu', 0):6.2f} s"
                              f"  steady {st.get('events', 0) / st['cpu'] if st.get('cpu') else 0:>9,.0f} ev/CPU-s"
                              f"  err p99 {q(r.get('err', np.array([])), 0.99) * 1e3:.3f} ms {r.get('note', '')}",
                              flush=True)
            finally:
                server.stop()
            show_efficiency(results, load)
        if "scale" not in skip:
            scale: dict[str, list[dict]] = {}
            server = Server(0.2, 0.2, 50)
            runs = [("latbench", float(r)) for r in a.rates.split(",") if r and "latbench" in tools]
            runs += [(p, float(r)) for r in a.peer_rates.split(",") if r for p in tools
                     if p not in ("latbench", "aiperf raw", "floor", "lb +report")]
            try:
                for rnd in range(a.rounds):
                    for name, rate in runs:
                        load = Load(int(rate * 10), 50, 0.2, a.scale_duration, rate=rate)
                        try:
                            r = with_peak(lambda: tools[name](load, server), server)
                        except Exception as exc:
                            r = {"note": f"{type(exc).__name__}: {exc}"}
                        scale.setdefault(f"{name} {rate:g}/s", []).append(r)
                        print(f"  round {rnd + 1} {name} {rate:g}/s: streams {r.get('streams')} "
                              f"failed {r.get('failed')} "
                              f"peak {r.get('peak')} lag p99 {q(r.get('lag', np.array([])), 0.99) * 1e3:.2f} ms "
                              f"err p99 {q(r.get('err', np.array([])), 0.99) * 1e3:.3f} ms {r.get('note', '')}",
                              flush=True)
            finally:
                server.stop()
            show_scale(scale)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_floor":
        import uvloop

        uvloop.run(_floor_client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]))
    else:
        main()
