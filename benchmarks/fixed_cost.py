"""What a short CI run costs as a whole process: ``latbench run`` against nginx, report included, beside wrk
(a script that prints a table, not a test).

    python benchmarks/fixed_cost.py [--duration 6] [--rounds 3] [--baseline /work/main] [--no-report]

Starts nginx (one worker, a fixed 200 on 127.0.0.1; :func:`benchmarks.generator.start_server`), then, ``--rounds``
times, interleaved: wrk (1 thread, 32 connections, ``--duration`` s) and ``latbench run S.yaml --quiet`` of a
closed loop of 32 (``api: http``) for ``--duration`` s, from this checkout and from ``--baseline`` when given
(each with ``PYTHONPATH`` set to its own checkout; order alternating). Every tool's CPU is its whole process tree
from exec to exit (``wait4`` rusage: the process and every child it reaped), so latbench's imports, summary,
report.html, summary.md and junit.xml are counted. Prints per run and as medians: requests, CPU seconds (all, the
generator's during the load from its summary, and the rest: the fixed cost of a run, start-up, imports, summary,
reports, exit), wall seconds, requests per CPU-second and its ratio to wrk's.
"""

from __future__ import annotations

import argparse
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
from generator import CONNECTIONS, bench_wrk, ensure_tools, start_server  # noqa: E402

SCENARIO = """\
name: fixed-cost
target: {{url: "http://127.0.0.1:{port}/", api: http}}
load:
  mode: closed
  phases:
    - {{name: main, duration: {dur}s, concurrency: {conc}}}
"""


def run_latbench(checkout: Path, scenario: Path, out: Path, report: bool) -> dict:
    """Whole-process CPU (s), wall (s), exit code and request count of one ``latbench run``."""
    argv = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--out", str(out), "--quiet"]
    argv += [] if report else ["--no-report"]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    rundir = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    import pyarrow.parquet as pq

    requests = sum(pq.ParquetFile(p).metadata.num_rows for p in rundir.glob("*/requests.parquet"))
    engine = 0.0  # the generator's own CPU during the load (one process: the target is on this machine)
    for f in rundir.glob("*/summary.json"):
        s = json.loads(f.read_text())
        engine += (s["generator"]["cpu_utilization"] or 0.0) * s["duration_s"]
    missing = [f for f in ("summary.md", "junit.xml") + (("report.html",) if report else ())
               if not (rundir / f).is_file()]
    cpu = ru.ru_utime + ru.ru_stime
    return {"cpu": cpu, "wall": wall, "code": proc.returncode, "requests": requests, "missing": missing,
            "engine": engine, "rest": cpu - engine}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout to run side by side (e.g. /work/main)")
    ap.add_argument("--no-report", action="store_true", help="latbench with --no-report (no report.html)")
    args = ap.parse_args()
    tools = ensure_tools(["nginx", "wrk"])
    if not tools["nginx"] or not tools["wrk"]:
        sys.exit("needs nginx and wrk")
    tmp = Path(tempfile.mkdtemp(prefix="latbench-fixed-cost-"))
    server, port, kind = start_server(tools["nginx"], tmp)
    scenario = tmp / "s.yaml"
    scenario.write_text(SCENARIO.format(port=port, conc=CONNECTIONS, dur=f"{args.duration:g}"))
    checkouts = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rows: dict[str, list[dict]] = {"wrk": [], **{k: [] for k in checkouts}}
    print(f"server: {kind} on 127.0.0.1:{port}; closed loop of {CONNECTIONS}, {args.duration:g} s; "
          f"latbench {'--no-report' if args.no_report else 'with report.html, summary.md, junit.xml'}")
    print(f"{'round':>5} | {'client':<8} | {'requests':>9} | {'CPU s':>6} | {'load CPU s':>10} | {'rest CPU s':>10} | "
          f"{'wall s':>6} | {'req/CPU-s':>9} | exit")
    try:
        for rnd in range(args.rounds):
            w = bench_wrk(tools["wrk"], f"http://127.0.0.1:{port}/", args.duration)
            rows["wrk"].append(w)
            print(f"{rnd:>5} | {'wrk':<8} | {w['requests']:>9.0f} | {w['cpu']:>6.2f} | {'':>10} | {'':>10} | "
                  f"{args.duration:>6.1f} | {w['requests'] / w['cpu']:>9.0f} |", flush=True)
            order = list(checkouts.items())
            for label, path in order if rnd % 2 == 0 else order[::-1]:
                r = run_latbench(path, scenario, tmp / label, not args.no_report)
                rows[label].append(r)
                note = f" missing {', '.join(r['missing'])}" if r["missing"] else ""
                print(f"{rnd:>5} | {label:<8} | {r['requests']:>9} | {r['cpu']:>6.2f} | {r['engine']:>10.2f} | "
                      f"{r['rest']:>10.2f} | {r['wall']:>6.1f} | {r['requests'] / r['cpu']:>9.0f} | {r['code']}{note}",
                      flush=True)
    finally:
        server.terminate()
        server.wait(10)
    wrk = statistics.median(r["requests"] / r["cpu"] for r in rows["wrk"])
    print()
    print(f"{'client':<8} | {'median requests':>15} | {'median CPU s':>12} | {'median rest CPU s':>17} | "
          f"{'median req/CPU-s':>16} | {'x wrk':>5}")
    for label, rs in rows.items():
        eff = statistics.median(r["requests"] / r["cpu"] for r in rs)
        rest = f"{statistics.median(r['rest'] for r in rs):>17.2f}" if label != "wrk" else f"{'':>17}"
        print(f"{label:<8} | {statistics.median(r['requests'] for r in rs):>15.0f} | "
              f"{statistics.median(r['cpu'] for r in rs):>12.2f} | {rest} | {eff:>16.0f} | {eff / wrk:>5.2f}")


if __name__ == "__main__":
    main()
