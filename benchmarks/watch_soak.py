"""Watch soak: ``latbench watch`` against the reference server for a long time (10 minutes at 5 req/s by default).

Not a test (not in CI). Checks that a watch can run without end:

- memory: RSS of the latbench process, at its first minute, at 40% of the run and at the end (flat: under 5%
  from 40% to the end; the first minutes fill the window and the kept files);
- disk: the target's record files: at most ``keep`` closed files, plus the open one and its partial stream;
  sampled all along, the largest total of the last third of the run no more than 15% above that of the middle
  third (bounded, not growing), and the bound ``keep x largest closed file + largest open one`` printed;
- no request lost: ``latbench_requests_total`` scraped at the end equals the rows written (watch.json), and the
  rows still on disk plus those rotation deleted equal them too.

    python benchmarks/watch_soak.py                         # 600 s at 5 req/s, rotate every 60 s, keep 3
    python benchmarks/watch_soak.py --duration 120 --rotate-every 20

Prints one line per sample and a table; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.soak import rss_mb, start_server  # noqa: E402
from loadgen.records.rotate import disk_bytes, read_segments, segments  # noqa: E402


def scrape_total(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^latbench_requests_total\{[^}]*\} (\S+)$", text, re.M))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of watching (default 600)")
    ap.add_argument("--qps", type=float, default=5.0)
    ap.add_argument("--rotate-every", type=float, default=60.0, help="seconds per records file (default 60)")
    ap.add_argument("--keep", type=int, default=3)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--out", default=None, help="parent of the RunDir (default: a temp folder)")
    a = ap.parse_args()

    out = Path(a.out or tempfile.mkdtemp(prefix="latbench-watch-soak-"))
    server, root = start_server("optimized", "tiny")
    lines: list[str] = []
    try:
        scenario = out / "watch.yaml"
        scenario.write_text(json.dumps({
            "name": "watch-soak",
            "target": {"url": root + "/v1", "model": "tiny", "stream": True},
            "workload": {"prompts": {"input_tokens": 16, "output_tokens": 8, "distinct": 200}},
            "load": {"arrival": "poisson", "phases": [{"name": "steady", "duration": 60, "qps": a.qps}]},
            "slo": ["latency.p99 < 500ms", "ttft.p99 < 300ms", "error_rate < 1%"],
        }))
        lb = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "watch", str(scenario), "--qps", str(a.qps),
                               "--duration", f"{a.duration}s", "--rotate-every", f"{a.rotate_every}s",
                               "--keep", str(a.keep), "--metrics-port", "0", "--window", "60s",
                               "--status-every", "60s", "--out", str(out / "runs")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        url = None
        while url is None:
            line = lb.stdout.readline()
            if not line:
                raise SystemExit("latbench watch exited before serving metrics:\n" + "".join(lines))
            lines.append(line)
            if line.startswith("LATBENCH_METRICS_URL="):
                url = line.split("=", 1)[1].strip()
        threading.Thread(target=lambda: lines.extend(lb.stdout), daemon=True).start()
        (rd,) = list((out / "runs").iterdir())
        tdir = rd / "target"
        t0 = time.monotonic()
        samples = []  # (t, rss MB, record bytes, closed files, bytes of the open file and its partial stream)
        last_total = 0.0
        print(f"{'t_s':>6} {'latbench_MB':>12} {'records_kB':>11} {'closed_files':>13} {'requests':>9}")
        while lb.poll() is None:
            try:
                closed_files = segments(tdir)
                total = disk_bytes(tdir)
                s = (time.monotonic() - t0, rss_mb(lb.pid), total, len(closed_files),
                     total - sum(p.stat().st_size for p in closed_files if p.exists()))
                last_total = scrape_total(url)
            except OSError:  # the watch ended between poll() and the reads
                break
            samples.append(s)
            print(f"{s[0]:6.0f} {s[1]:12.1f} {s[2] / 1e3:11.1f} {s[3]:13d} {last_total:9.0f}", flush=True)
            time.sleep(a.sample)
        lb.wait()
    finally:
        server.terminate()
        server.wait(30)

    facts = json.loads((rd / "watch.json").read_text())["targets"][0]
    written, deleted = facts["rows_written"], facts["rows_deleted"]
    on_disk = read_segments(tdir).num_rows
    closed = segments(tdir)
    largest = max([p.stat().st_size for p in closed] + [1])
    largest_open = max(s[4] for s in samples)
    bound = a.keep * largest + largest_open
    counted = sum(facts["requests"].values())

    def at(frac: float):
        return next((s for s in samples if s[0] >= frac * a.duration), samples[-1])

    rss_1m, rss_mid, rss_end = at(60 / a.duration)[1], at(0.4)[1], samples[-1][1]
    n = len(samples)
    middle, last = samples[n // 3: 2 * n // 3] or samples, samples[2 * n // 3:] or samples
    max_mid, max_last = max(s[2] for s in middle), max(s[2] for s in last)
    checks = [
        ("latbench RSS (1 min, 40%, end)", f"{rss_1m:.1f}, {rss_mid:.1f}, {rss_end:.1f} MB (40% -> end "
         f"{(rss_end / rss_mid - 1) * 100:+.1f}%; first sample {samples[0][1]:.1f} MB)", rss_end < 1.05 * rss_mid),
        ("record files: last third vs middle", f"max {max_last / 1e3:.0f} kB vs {max_mid / 1e3:.0f} kB; bound "
         f"{bound / 1e3:.0f} kB = keep {a.keep} x largest closed {largest / 1e3:.0f} kB + largest open "
         f"{largest_open / 1e3:.0f} kB (parquet held + partial stream)", max_last <= 1.15 * max_mid),
        ("closed files at most keep", f"max {max(s[3] for s in samples)} (keep {a.keep}); "
         f"{facts['rotations']} rotations, {facts['segments_deleted']} files deleted",
         max(s[3] for s in samples) <= a.keep),
        ("requests counted = rows written", f"{counted} = {written} (last scrape {last_total:.0f})",
         counted == written and written > 0),
        ("rows on disk + deleted = written", f"{on_disk} + {deleted} = {written}", on_disk + deleted == written),
    ]
    print(f"\nwatch soak: {a.duration:.0f} s at {a.qps:g} req/s against optimized/tiny (numpy), rotate every "
          f"{a.rotate_every:g} s, keep {a.keep}; RunDir {rd}")
    for name, value, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {name:36s} {value}")
    print("  latbench: " + " | ".join(ln.strip() for ln in lines[-4:]))
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
