"""Does the baseline gate cry wolf on a noisy machine, and does it catch real slow-downs? A calibration.

    python benchmarks/gate_calibration.py [--rounds 60] [--trials 400] [--duration 1.2] [--qps 150] [--seed 1]
                                          [--save-pool FILE | --pool FILE] [--no-reference]

The target is the known-latency server of ``tests/servers.py`` (its ``/sleep?ms=M&sigma=S`` route answers
after M * LogNormal(0, S) ms). Every run draws a drift factor uniformly from [0.8, 1.2] and multiplies its
latencies by it (the factor goes into the URL of an ``api: http`` target): the run-to-run drift of a shared
CI machine, on top of this machine's own. A slowed-down "current" build multiplies them again by 1.10, 1.25
or 1.50.

1. A pool of short runs (``--duration`` s at ``--qps`` req/s, each a real ``latbench run`` into its own
   RunDir): per round two runs of the unchanged server and one at each slow-down, in a shuffled order, so
   the machine's own drift during the session falls on every condition alike.
2. Trials: an A/A comparison takes 2N distinct unchanged runs (N as baseline, N as current); an A/B one
   takes N unchanged runs and N slowed-down ones. Each trial draws its runs afresh from the pool.
3. Each trial is judged with allowance 0 (``--max-regression 0%``) by both methods, as latbench judges a
   target (the gate fails when any check regresses):
   - within-run (latbench before repeated runs): the requests of the N runs of each side pooled, each
     percentile's ratio bootstrapped as if every request were independent
     (:func:`loadgen.analysis.regression.compare_frames`);
   - between-run: Welch's one-sided test on the per-run log percentiles, each of a target's K checks at
     0.05 / K (:func:`loadgen.analysis.repeated_baseline.compare_run_sets`); with one run on each side latbench falls
     back to the within-run check, so N = 1 is the same method for both (drawn as separate trials).
4. The table: the false-alarm rate (A/A trials that failed) and the detection rate at each slow-down, per
   method and N, each with its binomial standard error. Trials share runs of one pool, so their errors are
   somewhat correlated: the standard errors are a lower bound.

Finally a sanity check against the bundled reference server: one short A/A pair of real repeated runs
(``repeat: {runs: 3}``, each run from a fresh server), judged by ``latbench run --baseline``'s own code path.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.analysis.metrics import records_frame  # noqa: E402
from loadgen.analysis.regression import compare_frames  # noqa: E402
from loadgen.analysis.repeated import run_value  # noqa: E402
from loadgen.analysis.repeated_baseline import compare_run_sets  # noqa: E402
from loadgen.records.results import Check, Summary  # noqa: E402
from loadgen.records.rundir import REGRESSION, REQUESTS, SUMMARY  # noqa: E402
from loadgen.records.schema import read_records  # noqa: E402
from loadgen.run.runner import run_scenario  # noqa: E402
from loadgen.scenario.loader import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SLOWDOWNS = (1.10, 1.25, 1.50)
NS = (1, 3, 5)
BASE_MS = 150.0  # the server's median latency before drift: well above this machine's scheduling stalls
SIGMA = 0.3  # within-run spread of the server's latency (log scale)
DRIFT = (0.8, 1.2)
FRAME_COLUMNS = ("recorded", "ok", "latency", "service_time", "ttft", "token_times", "error")


def start_server() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.servers"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("PORT="):
        raise SystemExit(f"the known-latency server did not start: {line!r}")
    return proc, int(line.split("=")[1])


def scenario_file(folder: Path, duration: float, qps: float) -> Path:
    path = folder / "calibration.yaml"
    path.write_text(textwrap.dedent(f"""
        name: calibration
        target: {{url: "http://127.0.0.1:9/sleep", api: http, timeout: 10s}}
        load:
          arrival: poisson
          phases:
            - {{name: main, duration: {duration}s, qps: {qps}}}
        """))
    return path


def build_pool(port: int, folder: Path, rounds: int, duration: float, qps: float, rng) -> dict[float, list[dict]]:
    """Per condition (1.0 and each slow-down), the runs: their drift, summary and records frame."""
    loaded = load_scenario(scenario_file(folder, duration, qps))
    pool: dict[float, list[dict]] = {1.0: [], **{s: [] for s in SLOWDOWNS}}
    plan = [1.0, 1.0, *SLOWDOWNS]
    t0, done, total = time.perf_counter(), 0, rounds * len(plan)
    for _ in range(rounds):
        for slow in rng.permutation(plan):
            drift = float(rng.uniform(*DRIFT))
            url = f"http://127.0.0.1:{port}/sleep?ms={BASE_MS * drift * slow:.4f}&sigma={SIGMA}"
            res = run_scenario(loaded, out=str(folder / "runs"), target_url=url)
            tdir = res.rundir.path / res.targets[0].dir
            frame = records_frame(read_records(tdir / REQUESTS))
            summary = Summary.model_validate_json((tdir / SUMMARY).read_text())
            pool[float(slow)].append({"drift": drift, "summary": summary, "frame": frame[list(FRAME_COLUMNS)]})
            done += 1
            if done % 25 == 0 or done == total:
                print(f"  pool: {done}/{total} runs, {time.perf_counter() - t0:.0f} s", flush=True)
    return pool


def machine_noise(pool: dict[float, list[dict]]) -> None:
    """What this machine added to the drift it was given: each run's latency p50 against the server's own
    (base x drift x slow-down), and how many runs latbench would call generator-limited (exit 3)."""
    runs = [(slow, r) for slow, rs in pool.items() for r in rs]
    excess = np.array([run_value(r["summary"], "latency.p50") * 1e3 / (BASE_MS * r["drift"] * slow)
                       for slow, r in runs])
    limited = sum(bool(r["summary"].generator_limited) for _, r in runs)
    q = np.quantile(excess, [0.1, 0.5, 0.9, 1.0])
    print(f"  this machine's own noise: measured p50 / the server's, per run: p10 {q[0]:.2f}, median {q[1]:.2f}, "
          f"p90 {q[2]:.2f}, max {q[3]:.2f}; {limited} of {len(runs)} runs generator-limited by latbench's rule "
          "(kept: a busy CI host is what the gate must survive)", flush=True)


def gate_fails(rows: list[Check]) -> bool:
    return any(r.regressed for r in rows)


def within_run(cur: list[dict], base: list[dict]) -> bool:
    return gate_fails(compare_frames(pd.concat([r["frame"] for r in cur], ignore_index=True),
                                     pd.concat([r["frame"] for r in base], ignore_index=True), 0.0))


def between_run(cur: list[dict], base: list[dict]) -> bool:
    if len(cur) == 1 and len(base) == 1:
        return within_run(cur, base)  # latbench's own fallback: one run each, nothing between runs to measure
    return gate_fails(compare_run_sets([r["summary"] for r in cur], [r["summary"] for r in base], 0.0))


def trials(pool: dict[float, list[dict]], n: int, slow: float, count: int, rng) -> list[tuple[list, list]]:
    """``count`` (current, baseline) draws of N runs each; A/A (slow 1.0) from 2N distinct unchanged runs."""
    base_pool, out = pool[1.0], []
    for _ in range(count):
        if slow == 1.0:
            idx = rng.choice(len(base_pool), 2 * n, replace=False)
            out.append(([base_pool[i] for i in idx[:n]], [base_pool[i] for i in idx[n:]]))
        else:
            b = rng.choice(len(base_pool), n, replace=False)
            c = rng.choice(len(pool[slow]), n, replace=False)
            out.append(([pool[slow][i] for i in c], [base_pool[i] for i in b]))
    return out


def rate_text(hits: int, count: int) -> str:
    p = hits / count
    return f"{p * 100:5.1f}% ±{math.sqrt(p * (1 - p) / count) * 100:4.1f}"


def calibrate(pool, count: int, within_count: int, rng) -> list[dict]:
    table = []
    for n in NS:
        for method, fn, k in (("within-run", within_run, within_count), ("between-run", between_run, count)):
            if method == "between-run" and n == 1:
                k = within_count
            row = {"method": method, "n": n, "trials": k}
            for slow in (1.0, *SLOWDOWNS):
                t = time.perf_counter()
                hits = sum(fn(c, b) for c, b in trials(pool, n, slow, k, rng))
                row[slow] = (hits, k)
                row.setdefault("seconds", 0.0)
                row["seconds"] += time.perf_counter() - t
            table.append(row)
            print(f"  {method} N={n}: done ({row['seconds']:.0f} s)", flush=True)
    return table


def print_table(table: list[dict]) -> None:
    head = ["method", "N", "trials", "false alarms (A/A)"] + [f"detects +{(s - 1) * 100:.0f}%" for s in SLOWDOWNS]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|")
    for r in table:
        note = " (falls back to within-run)" if r["method"] == "between-run" and r["n"] == 1 else ""
        cells = [r["method"] + note, str(r["n"]), str(r["trials"])] + [rate_text(*r[s]) for s in (1.0, *SLOWDOWNS)]
        print("| " + " | ".join(cells) + " |")


def reference_sanity(folder: Path, runs: int = 3) -> None:
    """One short A/A pair against the reference server: `repeat: {runs: 3}`, judged by --baseline."""
    path = folder / "reference.yaml"
    path.write_text(textwrap.dedent(f"""
        name: reference-aa
        target: {{reference: {{arch: optimized, model: tiny}}, stream: true}}
        workload: {{prompts: {{input_tokens: 8, output_tokens: 8, distinct: 1000}}}}
        load:
          arrival: poisson
          phases:
            - {{name: warmup, duration: 1s, qps: 5, record: false}}
            - {{name: main, duration: 3s, qps: 10}}
        repeat: {{runs: {runs}}}
        """))
    loaded = load_scenario(path)
    t = time.perf_counter()
    a = run_scenario(loaded, out=str(folder / "ref"))
    b = run_scenario(loaded, out=str(folder / "ref"), baseline=str(a.rundir.path), max_regression=0.0)
    reg = json.loads((b.rundir.path / REGRESSION).read_text())
    print(f"\nreference server, A/A, {runs} runs each side (each from a fresh server), allowance 0, "
          f"{time.perf_counter() - t:.0f} s: gate {'FAILED' if not reg['passed'] else 'passed'}")
    for row in reg["targets"]["target"]:
        if "ratio" in row:
            runs = [[round(v * 1e3, 1) for v in row[k]] for k in ("current_runs", "baseline_runs")]
            print(f"  {row['metric']}.{row['stat']}: ratio {row['ratio']:.3f} ({row['ci_level'] * 100:.3g}% CI "
                  f"{row['ci'][0]:.2f}..{row['ci'][1]:.2f}), one-sided p {row['p_value']:.3f} (needs < "
                  f"{row['alpha']:.4f}), per-run ms {runs[0]} vs {runs[1]}")
    base_dirs = [e["dir"] for e in json.loads((a.rundir.path / "meta.json").read_text())["targets"]]
    cur_dirs = [e["dir"] for e in json.loads((b.rundir.path / "meta.json").read_text())["targets"]]
    frames = [[records_frame(read_records(rd.rundir.path / d / REQUESTS)) for d in dirs]
              for rd, dirs in ((b, cur_dirs), (a, base_dirs))]
    within = compare_frames(pd.concat(frames[0], ignore_index=True), pd.concat(frames[1], ignore_index=True), 0.0)
    bad = [f"{r.metric}.{r.stat} x{r.ratio:.2f}" for r in within if r.regressed]
    print(f"  the within-run bootstrap on the same runs, pooled: {'FAILED: ' + ', '.join(bad) if bad else 'passed'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=60, help="pool rounds (5 runs each)")
    ap.add_argument("--trials", type=int, default=400, help="trials per cell, between-run method")
    ap.add_argument("--within-trials", type=int, default=100, help="trials per cell, within-run bootstrap (slower)")
    ap.add_argument("--duration", type=float, default=1.2, help="seconds per run")
    ap.add_argument("--qps", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-reference", action="store_true", help="skip the reference-server sanity check")
    ap.add_argument("--save-pool", metavar="FILE", help="keep the pool of runs (summaries and records) in FILE")
    ap.add_argument("--pool", metavar="FILE", help="judge a pool saved by --save-pool instead of making one")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    proc, port = start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="latbench-calibration-") as tmp:
            if a.pool:
                pool = pickle.loads(Path(a.pool).read_bytes())
                print(f"pool: {sum(len(v) for v in pool.values())} runs read from {a.pool}", flush=True)
            else:
                print(f"pool: {a.rounds} rounds x 5 runs of {a.duration:g} s at {a.qps:g} req/s; server "
                      f"{BASE_MS:g} ms x LogNormal(0, {SIGMA}) x drift U{DRIFT} x slow-down", flush=True)
                pool = build_pool(port, Path(tmp), a.rounds, a.duration, a.qps, rng)
            if a.save_pool:
                Path(a.save_pool).write_bytes(pickle.dumps(pool))
            machine_noise(pool)
            table = calibrate(pool, a.trials, a.within_trials, rng)
            print_table(table)
            if not a.no_reference:
                reference_sanity(Path(tmp))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
