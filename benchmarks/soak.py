"""Soak: a steady rate against the reference server for a long time (10 minutes by default).

Not a test (not in CI). Checks that latbench and the server hold the load without drifting:

- RSS of the latbench process and of the server: growth under 10% from the end of the warm-up (the
  first tenth of the run) to the end;
- open file descriptors of both: no growth beyond a small constant;
- no record lost: the rows of requests.parquet equal the server's own count of finished API requests,
  ``refserver:requests_total`` (summed over statuses) from its /metrics.

    python benchmarks/soak.py                      # 10 minutes at 20 QPS, streaming
    python benchmarks/soak.py --duration 120 --qps 50

Prints one line per sample and a verdict table; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.records.schema import read_records  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def requests_total(root: str) -> float:
    text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^refserver:requests_total\{[^}]*\} (\S+)$", text, re.M))


def start_server(arch: str, model: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "reference_server", "--host", "127.0.0.1", "--port", "0",
                             "--arch", arch, "--model", model, "--backend", "numpy"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    root = None
    deadline = time.monotonic() + 120
    while root is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the reference server exited before it listened")
        if line.startswith("LATBENCH_SERVER_URL="):
            root = line.split("=", 1)[1].strip()
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(root + "/health", timeout=2).status == 200:
                return proc, root
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the reference server was not ready in time")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between RSS/fd samples")
    ap.add_argument("--arch", default="optimized")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out", default=None, help="parent of the RunDir (default: a temp folder)")
    a = ap.parse_args()

    out = Path(a.out or tempfile.mkdtemp(prefix="latbench-soak-"))
    server, root = start_server(a.arch, a.model)
    try:
        scenario = out / "soak.yaml"
        scenario.write_text(json.dumps({
            "name": "soak",
            "target": {"url": root + "/v1", "model": a.model, "stream": True},
            "workload": {"prompts": {"input_tokens": 16, "output_tokens": 8, "distinct": 200}},
            "load": {"arrival": "poisson", "phases": [{"name": "steady", "duration": a.duration, "qps": a.qps}]},
        }))
        before = requests_total(root)
        t0 = time.monotonic()
        lb = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--out", str(out / "runs"),
                               "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        samples = []  # (t, latbench rss, server rss, latbench fds, server fds)
        print(f"{'t_s':>6} {'latbench_MB':>12} {'server_MB':>10} {'latbench_fd':>12} {'server_fd':>10}")
        while lb.poll() is None:
            try:
                s = (time.monotonic() - t0, rss_mb(lb.pid), rss_mb(server.pid), fds(lb.pid), fds(server.pid))
            except OSError:  # latbench exited between poll() and the read
                break
            samples.append(s)
            print(f"{s[0]:6.0f} {s[1]:12.1f} {s[2]:10.1f} {s[3]:12d} {s[4]:10d}", flush=True)
            time.sleep(a.sample)
        lb_out = lb.communicate()[0]
        served = requests_total(root) - before
    finally:
        server.terminate()
        server.wait(30)

    (rd,) = list((out / "runs").iterdir())
    records = read_records(rd / "target" / "requests.parquet").num_rows
    # steady state: from the end of the warm-up (a tenth of the run) to the end
    during = [s for s in samples if s[0] <= a.duration]
    warm = [s for s in during if s[0] >= a.duration / 10] or during
    head, tail = warm[: max(1, len(warm) // 10)], warm[-max(1, len(warm) // 10):]

    def growth(i: int) -> float:
        h = sorted(x[i] for x in head)[len(head) // 2]
        t = sorted(x[i] for x in tail)[len(tail) // 2]
        return t / h - 1.0

    checks = [
        ("latbench RSS growth", f"{growth(1) * 100:+.1f}%  ({head[0][1]:.0f} -> {tail[-1][1]:.0f} MB)",
         growth(1) < 0.10),
        ("server RSS growth", f"{growth(2) * 100:+.1f}%  ({head[0][2]:.0f} -> {tail[-1][2]:.0f} MB)",
         growth(2) < 0.10),
        ("latbench fds", f"{head[0][3]} -> {tail[-1][3]} (max {max(s[3] for s in during)})",
         tail[-1][3] - head[0][3] <= 8),
        ("server fds", f"{head[0][4]} -> {tail[-1][4]} (max {max(s[4] for s in during)})",
         tail[-1][4] - head[0][4] <= 8),
        ("records = server requests_total", f"{records} = {served:.0f}", records == served and records > 0),
    ]
    print(f"\nsoak: {a.duration:.0f} s at {a.qps:g} QPS against {a.arch}/{a.model} (numpy); RunDir {rd}")
    for name, value, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {name:34s} {value}")
    tail_lines = [ln for ln in lb_out.splitlines() if ln.startswith(("verdict", "  -"))]
    print("  latbench: " + "; ".join(tail_lines))
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
