"""What a short CI run costs as a whole process: ``latbench run`` against nginx, report included, beside wrk
(a script that prints a table, not a test).

    python benchmarks/fixed_cost.py [--duration 6] [--rounds 3] [--baseline REF] [--no-report]
                                    [--skip closed,streaming,fixed]

``--baseline REF``: a commit of this repository (checked out with ``git worktree add`` into a temporary folder, as
``benchmarks/generator.py --baseline`` does) or another checkout's path. Each checkout's Python files are compiled
first (``compileall``: the ``__pycache__`` that an installed package or any earlier run leaves), so that neither side
pays for compiling its sources when ``PYTHONDONTWRITEBYTECODE`` is set (about 0.2 CPU-s a run);
``--no-compile`` measures them as they are.

Starts nginx (one worker, a fixed 200 on 127.0.0.1; :func:`benchmarks.generator.start_server`), then, ``--rounds``
times, interleaved: wrk (1 thread, 32 connections, ``--duration`` s) and ``latbench run S.yaml --quiet`` of a
closed loop of 32 (``api: http``) for ``--duration`` s, from this checkout and from ``--baseline`` when given
(each with ``PYTHONPATH`` set to its own checkout; order alternating). Every tool's CPU is its whole process tree
from exec to exit (``wait4`` rusage: the process and every child it reaped), so latbench's imports, summary,
report.html, summary.md and junit.xml are counted. Prints per run and as medians: requests, CPU seconds (all, the
generator's during the load from its summary, and the rest: the fixed cost of a run, start-up, imports, summary,
reports, exit), wall seconds, requests per CPU-second and its ratio to wrk's.

Two more rows per checkout, in the same rounds and order: *streaming* (the setup of ``benchmarks/streaming.py``:
``stream_server.py`` on the first CPU, ``latbench run`` of 50 concurrent streams of 100 tokens, one every 20 ms,
10 s, report included, on the last CPU): microseconds of the whole process tree's CPU per token event it recorded;
and *fixed* (one request against nginx, report included): the CPU seconds of a run that sends almost nothing. The
last table sets each checkout's medians side by side, with this checkout's ratio to each baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from generator import CONNECTIONS, bench_wrk, checkout, describe, ensure_tools, start_server  # noqa: E402
from streaming import CLIENT_CPU, Server  # noqa: E402

SCENARIO = """\
name: fixed-cost
target: {{url: "http://127.0.0.1:{port}/", api: http}}
load:
  mode: closed
  phases:
    - {{name: main, duration: {dur}s, concurrency: {conc}}}
"""
ONE_REQUEST = """\
name: fixed-cost-one
target: {{url: "http://127.0.0.1:{port}/", api: http}}
load:
  mode: closed
  phases:
    - {{name: main, duration: 5s, max_requests: 1, concurrency: 1}}
"""
STREAMS, TOKENS, ITL, STREAM_S = 50, 100, 0.02, 10.0
STREAMING = """\
name: fixed-cost-streaming
target: {{url: "{url}/v1", api: openai-chat, stream: true, model: bench, timeout: 60s}}
workload: {{dataset: prompts.jsonl}}
load:
  mode: closed
  grace: 30s
  phases: [{{name: main, duration: {dur:g}s, concurrency: {conc}}}]
"""


def run_latbench(checkout: Path, scenario: Path, out: Path, report: bool, pin: str | None = None) -> dict:
    """Whole-process CPU (s), wall (s), exit code and request count of one ``latbench run`` (``pin``: on that CPU)."""
    argv = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--out", str(out), "--quiet"]
    argv += [] if report else ["--no-report"]
    argv = ["taskset", "-c", pin, *argv] if pin else argv
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    proc = subprocess.Popen(argv, cwd=scenario.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    rundir = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    requests = sum(pq.ParquetFile(p).metadata.num_rows for p in rundir.glob("*/requests.parquet"))
    events = sum(pc.sum(pc.list_value_length(pq.read_table(p, columns=["token_times"]).column(0))).as_py() or 0
                 for p in rundir.glob("*/requests.parquet"))  # token events recorded (chunks), as streaming.py counts
    engine = 0.0  # the generator's own CPU during the load (one process: the target is on this machine)
    for f in rundir.glob("*/summary.json"):
        s = json.loads(f.read_text())
        engine += (s["generator"]["cpu_utilization"] or 0.0) * s["duration_s"]
    missing = [f for f in ("summary.md", "junit.xml") + (("report.html",) if report else ())
               if not (rundir / f).is_file()]
    cpu = ru.ru_utime + ru.ru_stime
    return {"cpu": cpu, "wall": wall, "code": proc.returncode, "requests": requests, "missing": missing,
            "engine": engine, "rest": cpu - engine, "events": int(events)}


def setups(tmp: Path, port: int, duration: float, skip: set[str]) -> list[tuple[str, Path, str | None]]:
    """(kind, scenario, CPU to pin latbench to) of each measured run; the streaming server is started by main."""
    out = []
    if "closed" not in skip:
        (tmp / "closed").mkdir()
        out.append(("closed", tmp / "closed" / "s.yaml", None))
        out[-1][1].write_text(SCENARIO.format(port=port, conc=CONNECTIONS, dur=f"{duration:g}"))
    if "fixed" not in skip:
        (tmp / "fixed").mkdir()
        out.append(("fixed", tmp / "fixed" / "s.yaml", None))
        out[-1][1].write_text(ONE_REQUEST.format(port=port))
    return out


def streaming_setup(tmp: Path, url: str) -> tuple[str, Path, str]:
    work = tmp / "streaming"
    work.mkdir()
    n = int(STREAMS * STREAM_S / (TOKENS * ITL)) + 10 * max(STREAMS, 100)
    (work / "prompts.jsonl").write_text("".join(f'{{"prompt": "req-{i}", "max_tokens": {TOKENS}}}\n'
                                                for i in range(n)))
    (work / "s.yaml").write_text(STREAMING.format(url=url, dur=STREAM_S, conc=STREAMS))
    return "streaming", work / "s.yaml", CLIENT_CPU


def row(kind: str, r: dict) -> str:
    per = {"closed": f"{r['requests'] / r['cpu']:>9.0f} req/CPU-s",
           "streaming": f"{r['cpu'] / max(r['events'], 1) * 1e6:>9.1f} µs/event ({r['events']} events)",
           "fixed": f"{r['cpu']:>9.2f} CPU-s"}[kind]
    note = f" missing {', '.join(r['missing'])}" if r["missing"] else ""
    return (f"{r['requests']:>9} | {r['cpu']:>6.2f} | {r['engine']:>10.2f} | {r['rest']:>10.2f} | {r['wall']:>6.1f} | "
            f"{per} | exit {r['code']}{note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", action="append", default=[], metavar="REF",
                    help="a commit (checked out into a temporary folder) or another checkout's path; repeatable")
    ap.add_argument("--no-report", action="store_true", help="latbench with --no-report (no report.html)")
    ap.add_argument("--skip", default="", help="comma-separated: closed,streaming,fixed")
    ap.add_argument("--no-compile", action="store_true", help="leave each checkout's __pycache__ as it is")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    tools = ensure_tools(["nginx", "wrk"])
    if not tools["nginx"] or not tools["wrk"]:
        sys.exit("needs nginx and wrk")
    tmp = Path(tempfile.mkdtemp(prefix="latbench-fixed-cost-"))
    with contextlib.ExitStack() as stack:
        checkouts = {f"this {describe(ROOT)}": ROOT}
        for ref in args.baseline:
            root = checkout(ref, stack)
            checkouts[f"base {ref if root.name == 'tree' else describe(root)}"] = root
        if not args.no_compile:
            for root in checkouts.values():
                subprocess.run([sys.executable, "-m", "compileall", "-q", "loadgen", "reports", "reference_server"],
                               cwd=root, stdout=subprocess.DEVNULL, check=True)
        server, port, kind = start_server(tools["nginx"], tmp)
        stack.callback(server.wait, 10)
        stack.callback(server.terminate)
        runs = setups(tmp, port, args.duration, skip)
        if "streaming" not in skip:
            streams = Server(ITL, ITL, TOKENS)
            stack.callback(streams.stop)
            runs.append(streaming_setup(tmp, streams.url))
        rows = measure(args, tools, port, kind, checkouts, runs, tmp)
    show(rows, checkouts, [k for k, _, _ in runs])


def measure(args, tools: dict, port: int, kind: str, checkouts: dict[str, Path], runs: list, tmp: Path) -> dict:
    """The interleaved rounds: wrk, then each run of each checkout (their order alternating round by round)."""
    rows: dict[tuple[str, str], list[dict]] = {}
    print(f"server: {kind} on 127.0.0.1:{port}; closed loop of {CONNECTIONS}, {args.duration:g} s; streaming "
          f"{STREAMS} x {TOKENS} tokens every {ITL * 1e3:g} ms, {STREAM_S:g} s; fixed: one request; latbench "
          f"{'--no-report' if args.no_report else 'with report.html, summary.md, junit.xml'}")
    for label, path in checkouts.items():
        print(f"  {label}: {path}")
    print(f"{'round':>5} | {'run':<9} | {'client':<16} | {'requests':>9} | {'CPU s':>6} | {'load CPU s':>10} | "
          f"{'rest CPU s':>10} | {'wall s':>6} | per CPU")
    for rnd in range(args.rounds):
        if any(k == "closed" for k, _, _ in runs):
            w = bench_wrk(tools["wrk"], f"http://127.0.0.1:{port}/", args.duration)
            rows.setdefault(("closed", "wrk"), []).append(w)
            print(f"{rnd:>5} | {'closed':<9} | {'wrk':<16} | {w['requests']:>9.0f} | {w['cpu']:>6.2f} | {'':>10} | "
                  f"{'':>10} | {args.duration:>6.1f} | {w['requests'] / w['cpu']:>9.0f} req/CPU-s", flush=True)
        for run_kind, scenario, pin in runs:
            order = list(checkouts.items())
            for label, path in order if rnd % 2 == 0 else order[::-1]:
                r = run_latbench(path, scenario, tmp / "out" / run_kind / str(rnd) / label.split()[0],
                                 not args.no_report, pin)
                rows.setdefault((run_kind, label), []).append(r)
                print(f"{rnd:>5} | {run_kind:<9} | {label:<16} | {row(run_kind, r)}", flush=True)
    return rows


def show(rows: dict, checkouts: dict[str, Path], kinds: list[str]) -> None:
    """Per checkout, medians: closed-loop req per CPU-s (x wrk), streaming µs per token event, fixed CPU-s."""
    med = statistics.median
    wrk = med(r["requests"] / r["cpu"] for r in rows[("closed", "wrk")]) if ("closed", "wrk") in rows else None
    value = {"closed": lambda r: r["requests"] / r["cpu"], "streaming": lambda r: r["cpu"] / max(r["events"], 1) * 1e6,
             "fixed": lambda r: r["cpu"]}
    print(f"\nmedians of {max(len(v) for v in rows.values())} rounds (whole process tree, report included)")
    heads = {"closed": "closed req/CPU-s", "streaming": "stream µs/event", "fixed": "1-request CPU-s"}
    print(f"{'client':<18} | " + " | ".join(f"{heads[k]:>16}" for k in kinds) + (" | x wrk" if wrk else ""))
    if wrk:
        print(f"{'wrk':<18} | " + " | ".join(f"{wrk:>16.0f}" if k == "closed" else f"{'':>16}" for k in kinds)
              + " |  1.00")
    meds = {label: {k: med(map(value[k], rows[(k, label)])) for k in kinds} for label in checkouts}
    for label, m in meds.items():
        x = f" | {m['closed'] / wrk:>5.2f}" if wrk and "closed" in m else ""
        print(f"{label:<18} | " + " | ".join(f"{m[k]:>16.{0 if k == 'closed' else 2}f}" for k in kinds) + x)
    this = next(iter(meds))
    for base in list(meds)[1:]:
        # better is more requests per CPU-s, fewer µs per event, fewer CPU-s
        ratio = {k: (meds[this][k] / meds[base][k]) if k == "closed" else (meds[base][k] / meds[this][k])
                 for k in kinds}
        print(f"{this} vs {base}: " + ", ".join(f"{heads[k]} {ratio[k]:.2f}x" for k in kinds)
              + " (>1: this is cheaper)")


if __name__ == "__main__":
    main()
