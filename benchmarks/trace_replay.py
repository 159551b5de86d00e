"""A Mooncake-format trace replayed against the reference server: does every request go out at its trace time,
with the trace's lengths, sharing the prefix blocks its hash ids say?

1. ``latbench trace generate``'s generator writes ``--requests`` requests in Mooncake's format (Poisson at
   ``--qps``; blocks of ``--block-tokens``; 8 shared prefixes of 2 blocks; each request's own part ``--own-tokens``
   +- half of it; 8 +- 2 output tokens). The defaults (128-token blocks, short prompts) keep the tiny CPU model's
   prefill (about 4,000 tokens/s on a 2-core VM) under the offered load; ``--block-tokens 512`` is Mooncake's own.
2. The reference server (optimized, tiny, numpy) is started on a free port and the trace replayed against it at
   ``--speed`` with ``tokenizer: server`` (its /tokenize: its tokens are bytes), ``too_long: clip`` against the
   ``max_model_len`` it reports (2048).
3. From the RunDir: intended send time against trace time / speed (every request), send lag, each request's
   input length (latbench's count and the server's usage, less the chat template) and output length against the
   trace (clipped requests against their fitted lengths).
4. The prompts, rebuilt after the run exactly as every sender built them (same trace, seed and server), compared
   pairwise: the common prefix of two prompts, in the server's tokens, against the blocks their hash ids share.

5. With ``--rounds R``: R trace windows of ``--window`` seconds and R Poisson phases of the same rate and lengths,
   alternately against the same server: the generator's send lag on a trace against its lag on any schedule.

    python benchmarks/trace_replay.py [--requests 1000] [--qps 8] [--speed 1] [--block-tokens 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import yaml

from loadgen.protocols.workload import make_workload
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import TokenDist
from loadgen.scenario.trace import read_trace, select
from loadgen.schedule.tracegen import generate_trace, write_trace

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "reference_server", "--host", "127.0.0.1", "--port", str(port),
                             "--arch", "optimized", "--model", "tiny", "--backend", "numpy"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the reference server did not start")


def lcp(a: bytes, b: bytes) -> int:
    """Length of the common prefix of ``a`` and ``b`` (binary search over slice comparisons, done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def lag_of(scenario: dict, path: Path, out: Path) -> tuple[float, float]:
    """(p50, p99) send lag in seconds of one run of ``scenario``."""
    path.write_text(yaml.safe_dump(scenario))
    res = run_scenario(load_scenario(path), out=str(out / "runs"))
    df = read_records(res.rundir.path / res.targets[0].dir / "requests.parquet").to_pandas()
    lag = (df["sent"] - df["scheduled"]).to_numpy()
    return pct(lag, 50), pct(lag, 99)


def interleaved(scenario: dict, rows: list[dict], rounds: int, window: float, out: Path) -> dict:
    """Send lag of trace windows against Poisson phases of the same rate and lengths, run alternately (A B A B ...)
    against the same server, so that the machine's own noise falls on both alike."""
    inp = np.array([r["input_length"] for r in rows])
    rate = len(rows) / (rows[-1]["timestamp"] / 1000.0)
    got: dict[str, list] = {"trace": [], "poisson": []}
    for r in range(rounds):
        trace = {**scenario, "name": f"side-trace-{r}",
                 "load": {**scenario["load"], "start": f"{r * window:g}s", "duration": f"{window:g}s"}}
        got["trace"].append(lag_of(trace, out / "side-trace.yaml", out))
        poisson = {**scenario, "name": f"side-poisson-{r}",
                   "workload": {**scenario["workload"], "prompts": {
                       "input_tokens": {"mean": float(inp.mean()), "stddev": float(inp.std()), "min": 1},
                       "output_tokens": {"mean": 8, "stddev": 2, "min": 1}, "distinct": 1000}},
                   "load": {"seed": r, "arrival": "poisson", "grace": "120s",
                            "phases": [{"name": "main", "duration": f"{window:g}s", "qps": rate}]}}
        got["poisson"].append(lag_of(poisson, out / "side-poisson.yaml", out))
    return {k: (float(np.median([v[0] for v in vals])), float(np.median([v[1] for v in vals])), vals)
            for k, vals in got.items()}


def pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q, method="inverted_cdf"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--qps", type=float, default=8.0)
    ap.add_argument("--block-tokens", type=int, default=128)
    ap.add_argument("--own-tokens", type=int, default=80, help="mean of each request's own part, after its prefix")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=0, help="then this many rounds of a trace window against a Poisson "
                                                          "phase of the same rate and lengths, alternately: send lag")
    ap.add_argument("--window", type=float, default=30.0, help="seconds of each side-by-side run")
    ap.add_argument("--out", default=None, help="folder for the trace, scenario and RunDir (default: a temp folder)")
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="latbench-trace-"))
    out.mkdir(parents=True, exist_ok=True)
    block = a.block_tokens
    rows = generate_trace(a.requests, a.qps, input_tokens=TokenDist(mean=a.own_tokens, stddev=a.own_tokens / 2),
                          output_tokens=TokenDist(mean=8, stddev=2), groups=8, prefix_tokens=2 * block,
                          block_tokens=block, seed=11)
    trace = write_trace(rows, out / "trace.jsonl")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    server = start_server(port)
    try:
        scenario = {"name": "trace-acceptance", "description": "a generated Mooncake-format trace, replayed",
                    "target": {"url": url, "api": "openai-chat", "stream": True},
                    "workload": {"tokenizer": "server", "ignore_eos": True},
                    "load": {"mode": "trace", "file": str(trace), "speed": a.speed, "block_tokens": block,
                             "grace": "120s"}}
        path = out / "trace.yaml"
        path.write_text(yaml.safe_dump(scenario))
        loaded = load_scenario(path)
        t0 = time.perf_counter()
        res = run_scenario(loaded, out=str(out / "runs"))
        wall = time.perf_counter() - t0
        tdir = res.rundir.path / res.targets[0].dir
        s = json.loads((tdir / "summary.json").read_text())
        df = read_records(tdir / "requests.parquet").to_pandas().sort_values("seq")
        spec = loaded.scenario.load.trace
        # the prompts as every sender made them: same trace, seed, server (its /tokenize and /v1/models)
        target = loaded.scenario.target_list()[0]
        _, prompts = make_workload(target, loaded.scenario.workload, s["model"], url, loaded.scenario.load.seed,
                                   path.parent, trace=spec)
        side = interleaved(scenario, rows, a.rounds, a.window, out) if a.rounds else None
    finally:
        server.terminate()
        server.wait(10)

    data = read_trace(trace)
    sl = select(spec, data)
    n = sl.count
    t_ms = data.times_ms[sl.lo : sl.hi]
    sched = df["scheduled"].to_numpy()
    lag = (df["sent"] - df["scheduled"]).to_numpy()
    exact = np.abs(sched - t_ms / (1000.0 * a.speed))
    inp, outl = data.input_tokens[sl.lo : sl.hi], data.output_tokens[sl.lo : sl.hi]
    fitted = np.array([prompts.get(i).input_tokens for i in range(n)])
    fitted_out = np.array([prompts.get(i).max_tokens for i in range(n)])
    ok = (df["error"] == "").to_numpy()
    clipped = (fitted != inp) | (fitted_out != outl)
    print(f"trace: {trace} ({n} requests over {t_ms[-1] / 1000:.1f} s of trace time; replayed at speed {a.speed:g} "
          f"in {wall:.1f} s wall, RunDir {res.rundir.path})")
    print(f"exit code {res.exit_code}; errors {int((~ok).sum())}; records {len(df)}; seq 0..{n - 1} "
          f"{'each once' if df['seq'].tolist() == list(range(n)) else 'NOT each once'}")
    print(f"intended time - trace time / speed: max |diff| {exact.max():.3g} s over {n} requests "
          f"({int((exact == 0).sum())} bit-exact, {int((exact < 1e-9).sum())} within 1 ns)")
    print(f"send lag: p50 {pct(lag, 50) * 1e3:.3f} ms, p99 {pct(lag, 99) * 1e3:.3f} ms, max {lag.max() * 1e3:.3f} ms "
          f"(summary's p99 {s['overall']['metrics']['send_lag']['percentiles']['p99']['value'] * 1e3:.3f} ms)")
    rec_in, usage = df["input_tokens"].to_numpy(), df["prompt_tokens"].to_numpy()
    added = df["added_tokens"].to_numpy()
    print(f"input lengths: latbench's count = trace length for {int((rec_in == inp).sum())}/{n} "
          f"(= fitted length for {int((rec_in == fitted).sum())}/{n}; {int(clipped.sum())} clipped to "
          f"max_model_len {s['trace']['max_model_len']} from {s['trace']['max_model_len_source']}); server usage = "
          f"count + template ({int(added[0])}) for {int((usage[ok] == rec_in[ok] + added[ok]).sum())}/{int(ok.sum())}")
    print(f"output lengths: server usage = trace output_length for "
          f"{int((df['output_tokens'].to_numpy()[ok] == fitted_out[ok]).sum())}/{int(ok.sum())} "
          f"(sources: {dict(df['output_tokens_source'].value_counts())})")
    print(f"summary trace block: {json.dumps(s['trace'])}")

    texts = [prompts.get(i).text.encode() for i in range(n)]  # the server's tokens are bytes
    ids = [data.hash_ids(sl.lo + i).tolist()[: -(-int(fitted[i]) // block)] for i in range(n)]
    agree, extra, pairs, by_shared = 0, [], 0, {}
    for i in range(n):
        for j in range(i):
            shared = next((k for k, (u, v) in enumerate(zip(ids[i], ids[j])) if u != v), min(len(ids[i]), len(ids[j])))
            common = lcp(texts[i], texts[j])
            full = min(len(texts[i]), len(texts[j]))
            want = min(shared * block, full)
            pairs += 1
            by_shared[shared] = by_shared.get(shared, 0) + 1
            if common >= want and (common - want < block if want < full else common == full):
                agree += 1
                extra.append(common - want)
    extra = np.array(extra)
    print(f"prefix blocks: {pairs} pairs of prompts (by hash ids shared at the start: "
          f"{dict(sorted(by_shared.items()))}); the prompts' common prefix covers exactly the shared blocks "
          f"for {agree}/{pairs} "
          f"(beyond them, chance agreement: mean {extra.mean():.2f} tokens, max {int(extra.max())})")

    if side:
        (t50, t99, tv), (p50, p99, pv) = side["trace"], side["poisson"]
        ms = lambda vals: [(round(x * 1e3, 3), round(y * 1e3, 3)) for x, y in vals]  # noqa: E731
        print(f"side by side, {len(tv)} rounds of {a.window:g} s alternating (medians over rounds): send lag p50 "
              f"{t50 * 1e3:.3f} ms trace vs {p50 * 1e3:.3f} ms Poisson; p99 {t99 * 1e3:.3f} ms vs {p99 * 1e3:.3f} ms "
              f"(ratio {t99 / p99:.2f}); per round (p50, p99 ms): trace {ms(tv)}, Poisson {ms(pv)}")


if __name__ == "__main__":
    main()
