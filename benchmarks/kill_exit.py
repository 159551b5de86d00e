"""How fast does ``latbench run`` end when its managed server dies? (a script that prints a table, not a test)

    python benchmarks/kill_exit.py [--reps 3] [--baseline /work/main] [--after 5] [--report-reps 3]

Each rep runs ``latbench run scenarios/burst.yaml --out TMP --quiet`` as a subprocess, waits until the first
records exist (``<target>/requests.parquet`` or its ``.partial`` stream), waits ``--after`` seconds more, then
SIGKILLs the managed reference server (the child process whose command line holds ``reference_server``). It
prints, per rep: kill -> the ``verdict:`` line on stdout, kill -> the ``RunDir:`` line (printed once the reports
are written), kill -> the process's exit, the exit code, the
process's CPU (its own and its reaped children's, from ``wait4``), and whether report.html and server.log are in
the RunDir. Then it times ``latbench report RUNDIR`` on the RunDirs the reps left (``--report-reps`` times each),
a fresh process each time, as a user re-rendering a report runs it.

With ``--baseline CHECKOUT`` every rep runs this checkout and the baseline back to back (order alternating), each
with ``PYTHONPATH`` set to its own checkout, so both see the same load on a shared machine; medians side by side.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "scenarios/burst.yaml"
LIMIT_S = 120.0  # a run that has not ended this long after start is killed and counted as a failure


def _env(checkout: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(checkout), PYTHONUNBUFFERED="1")


def _server(proc: psutil.Process) -> psutil.Process | None:
    try:
        for child in proc.children(recursive=True):
            try:
                if any("reference_server" in part for part in child.cmdline()):
                    return child
            except psutil.Error:
                continue
    except psutil.Error:
        return None
    return None


def _records(out: Path) -> bool:
    return any(out.glob("*/*/requests.parquet*"))


def _wait4(pid: int, deadline: float) -> tuple[int, float, float]:
    """(exit code, monotonic time of exit, CPU seconds of the process and its reaped children)."""
    while True:
        wpid, status, ru = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            return os.waitstatus_to_exitcode(status), time.monotonic(), ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.002)


def kill_once(checkout: Path, after: float) -> dict:
    """One run of burst.yaml from ``checkout`` whose server is SIGKILLed ``after`` s after the first records."""
    out = Path(tempfile.mkdtemp(prefix="latbench-kill-"))
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "run", SCENARIO, "--out", str(out), "--quiet"],
                            cwd=checkout, env=_env(checkout), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    verdict_at: list[float] = []
    written_at: list[float] = []
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("verdict:") and not verdict_at:
                verdict_at.append(time.monotonic())
            if line.startswith("RunDir:") and not written_at:  # printed once the reports are written
                written_at.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ps = psutil.Process(proc.pid)
    deadline = start + LIMIT_S
    while not _records(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first = time.monotonic()
    server = None
    while time.monotonic() < first + after and proc.poll() is None:
        server = server or _server(ps)
        time.sleep(0.01)
    server = server or _server(ps)
    killed = None
    if server is not None and proc.poll() is None:
        server.send_signal(signal.SIGKILL)
        killed = time.monotonic()
    code, ended, cpu = _wait4(proc.pid, deadline)
    proc.returncode = code
    reader.join(5)
    rundirs = [p for p in out.iterdir() if p.is_dir()]
    rundir = rundirs[0] if rundirs else None
    return {
        "killed": killed is not None,
        "verdict_s": (verdict_at[0] - killed) if killed and verdict_at else float("nan"),
        "written_s": (written_at[0] - killed) if killed and written_at else float("nan"),
        "exit_s": (ended - killed) if killed else float("nan"),
        "code": code,
        "cpu_s": cpu,
        "report": bool(rundir and (rundir / "report.html").is_file()),
        "server_log": bool(rundir and any(rundir.glob("*/server.log"))),
        "rundir": rundir,
        "reason": next((ln.strip() for ln in lines if ln.startswith("  - ") and "reference server" in ln), ""),
    }


def report_once(checkout: Path, rundir: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``latbench report RUNDIR`` in a fresh process."""
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "report", str(rundir)], cwd=checkout,
                            env=_env(checkout), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code, ended, cpu = _wait4(proc.pid, t + LIMIT_S)
    if code != 0:
        raise RuntimeError(f"latbench report {rundir} exited {code} ({checkout})")
    return ended - t, cpu


def _med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--after", type=float, default=5.0, help="seconds after the first records to kill the server")
    ap.add_argument("--baseline", type=Path, help="another checkout to run side by side (e.g. /work/main)")
    ap.add_argument("--report-reps", type=int, default=3, help="`latbench report` timings per RunDir and checkout")
    ap.add_argument("--report-dirs", type=Path, nargs="*", default=[],
                    help="more RunDirs to time `latbench report` on (besides those the reps leave)")
    args = ap.parse_args()
    checkouts = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rows: dict[str, list[dict]] = {k: [] for k in checkouts}
    print(f"{'rep':>3} | {'checkout':<8} | {'kill->verdict s':>15} | {'kill->written s':>15} | {'kill->exit s':>12} | "
          f"{'exit':>4} | {'CPU s':>6} | {'report':>6} | {'server.log':>10}")
    for rep in range(args.reps):
        order = list(checkouts.items())
        for label, path in order if rep % 2 == 0 else order[::-1]:
            r = kill_once(path, args.after)
            rows[label].append(r)
            report, log = ("yes" if r[k] else "NO" for k in ("report", "server_log"))
            print(f"{rep:>3} | {label:<8} | {r['verdict_s']:>15.2f} | {r['written_s']:>15.2f} | {r['exit_s']:>12.2f} | "
                  f"{r['code']:>4} | {r['cpu_s']:>6.2f} | {report:>6} | {log:>10}", flush=True)
    print()
    print(f"{'checkout':<8} | {'median kill->verdict s':>22} | {'median kill->written s':>22} | "
          f"{'median kill->exit s':>19} | {'exit 3':>6} | {'< 2 s':>5} | {'median CPU s':>12}")
    for label, rs in rows.items():
        exits = [r["exit_s"] for r in rs]
        verdict, written = _med([r["verdict_s"] for r in rs]), _med([r["written_s"] for r in rs])
        print(f"{label:<8} | {verdict:>22.2f} | {written:>22.2f} | {_med(exits):>19.2f} | "
              f"{sum(r['code'] == 3 for r in rs)}/{len(rs):<4} | {sum(e < 2 for e in exits)}/{len(rs):<3} | "
              f"{_med([r['cpu_s'] for r in rs]):>12.2f}")
    reasons = {r["reason"] for rs in rows.values() for r in rs if r["reason"]}
    for reason in sorted(reasons):
        print("reason:", reason)
    dirs = [r["rundir"] for rs in rows.values() for r in rs if r["rundir"]][:2] + list(args.report_dirs)
    if not dirs or args.report_reps <= 0:
        return
    print()
    print(f"{'RunDir':<40} | {'checkout':<8} | {'median wall s':>13} | {'median CPU s':>12}")
    for d in dirs:
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in checkouts}
        for i in range(args.report_reps):
            order = list(checkouts.items())
            for label, path in order if i % 2 == 0 else order[::-1]:
                times[label].append(report_once(path, d))
        for label, ts in times.items():
            print(f"{d.name[:40]:<40} | {label:<8} | {_med([w for w, _ in ts]):>13.2f} | "
                  f"{_med([c for _, c in ts]):>12.2f}")


if __name__ == "__main__":
    main()
