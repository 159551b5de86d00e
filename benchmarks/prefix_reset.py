"""Does ``--reset prefix_cache`` make every repeat start cold against a real vLLM? Measured by vLLM's own counters.

``scenarios/prefix.yaml`` (4 shared system prompts of 1024 tokens, a 32-token question each, 2 req/s for 10 s)
runs with ``--repeat 3`` against one vLLM (its CPU build, the tiny dummy-weight Llama of ``real_engines.py``, with
``--enable-prefix-caching`` and ``VLLM_SERVER_DEV_MODE=1``), twice: without a reset, then with ``--reset
prefix_cache``. vLLM's ``prefix_cache_queries`` and ``prefix_cache_hits`` counters (prompt tokens looked up, and
found cached) are read from its /metrics every 50 ms during the runs; each repeat's window is taken from its
meta.json entry (``t0_monotonic``, ``duration_s``: the one monotonic clock of the host). The first 4 requests of
a repeat (one per system prompt, sent before the 5th at 2.0 s) find the prefixes cached only when an earlier
repeat left them there: without a reset, repeats 2 and 3 start warm; with it, every repeat starts cold.

    python benchmarks/prefix_reset.py [--repeat 3] [--out DIR] [--url http://127.0.0.1:PORT]

``--url``: a vLLM already running (with prefix caching and dev mode); otherwise the script starts one on core 0
(latbench runs on core 1) and always stops it. On 2 cores: about 1-3 minutes for vLLM to start, then about
90 s of runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import peer_setup  # noqa: E402
from benchmarks.real_engines import CLIENT_CORE, OFFLINE, Engine, write_model  # noqa: E402

SCENARIO = ROOT / "scenarios" / "prefix.yaml"
FIRST = 4  # the first requests of a repeat: one per system prompt of prefix.yaml
QPS = 2.0  # prefix.yaml's rate: request k is sent k / QPS seconds into the repeat
QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
MODES = (("without reset", []), ("with --reset prefix_cache", ["--reset", "prefix_cache"]))


class Counters:
    """vLLM's prefix-cache counters sampled every ``every`` seconds in a thread: (time.monotonic(), queries, hits)."""

    def __init__(self, root: str, every: float = 0.05):
        self.root, self.every, self.samples = root, every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> tuple[float, float]:
        text = urllib.request.urlopen(self.root + "/metrics", timeout=5).read().decode()
        totals = {QUERIES: 0.0, HITS: 0.0}
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in totals:
                totals[name] += float(line.rsplit(" ", 1)[1])
        return totals[QUERIES], totals[HITS]

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            self.samples.append((t, *self.read()))
            self._stop.wait(max(0.0, self.every - (time.monotonic() - t)))

    def __enter__(self) -> "Counters":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def delta(self, start: float, end: float) -> tuple[float, float]:
        """(queries, hits) counted between the last samples at or before ``start`` and ``end``."""
        def at(t):
            return max((s for s in self.samples if s[0] <= t), key=lambda s: s[0])
        a, b = at(start), at(end)
        return b[1] - a[1], b[2] - a[2]


def run_mode(root: str, repeat: int, out: Path, extra: list[str]) -> list[dict]:
    """One ``latbench run scenarios/prefix.yaml --repeat N`` against ``root``; a row per repeat."""
    from loadgen.analysis.metrics import records_frame
    from loadgen.records.results import Meta, Summary
    from loadgen.records.schema import read_records

    argv = ["taskset", "-c", CLIENT_CORE, sys.executable, "-m", "loadgen.cli", "run", str(SCENARIO), "--target",
            root + "/v1", "--repeat", str(repeat), "--out", str(out), "--quiet", "--no-report", *extra]
    print("+", " ".join(argv[3:]), flush=True)
    with Counters(root) as counters, open(out.with_suffix(".log"), "w") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        time.sleep(0.2)  # one more sample after the last repeat
    if rc not in (0, 1, 3):  # 1: an objective missed, 3: the run judged itself invalid (a busy host): kept
        raise RuntimeError(f"latbench exited with {rc}; see {out.with_suffix('.log')}")
    rundir = next(p for p in out.iterdir() if p.is_dir())
    meta = Meta.model_validate_json((rundir / "meta.json").read_text())
    rows = []
    for entry in meta.targets:
        t0 = entry.t0_monotonic
        q1, h1 = counters.delta(t0, t0 + FIRST / QPS)
        qa, ha = counters.delta(t0, t0 + entry.duration_s)
        summary = Summary.model_validate_json((rundir / entry.dir / "summary.json").read_text())
        f = records_frame(read_records(rundir / entry.dir / "requests.parquet")).sort_values("scheduled")
        ttft = ((f["first_token"] - f["scheduled"]) * 1e3).tolist()
        rows.append({"repeat": entry.repetition, "first_hit": h1 / q1 if q1 else float("nan"), "first_q": q1,
                     "all_hit": ha / qa if qa else float("nan"), "requests": len(f),
                     "ttft_first": statistics.mean(ttft[:FIRST]), "ttft_rest": statistics.median(ttft[FIRST:]),
                     "reset": summary.reset.text if summary.reset else "-", "rc": rc, "rundir": str(rundir)})
    return rows


def start_vllm(work: Path, port: int) -> Engine:
    peer_setup.setup_vllm()
    model = work / "model"
    write_model(model)
    os.environ.update({"VLLM_SERVER_DEV_MODE": "1", **OFFLINE})  # Engine passes the environment on
    return Engine(model, port, work / "vllm.log", ["--enable-prefix-caching", "--max-model-len", "2048"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, help="work folder (default: a new temporary one)")
    ap.add_argument("--url", help="a running vLLM's root URL (prefix caching and dev mode on): not started here")
    ap.add_argument("--port", type=int, default=18766)
    a = ap.parse_args(argv)
    work = a.out or Path(tempfile.mkdtemp(prefix="latbench-prefix-reset-"))
    work.mkdir(parents=True, exist_ok=True)
    eng = None if a.url else start_vllm(work, a.port)
    root = a.url or eng.root
    try:
        if eng is not None:
            print(f"vLLM ready after {eng.ready_s:.0f} s at {root}", flush=True)
        results = {mode: run_mode(root, a.repeat, work / f"runs-{i}", extra) for i, (mode, extra) in enumerate(MODES)}
    finally:
        if eng is not None:
            eng.stop()
    print(f"\nscenarios/prefix.yaml --repeat {a.repeat} against vLLM (CPU build, tiny dummy Llama, prefix caching on);"
          f"\nhit rate = vLLM's prefix_cache_hits / prefix_cache_queries (tokens); first {FIRST} = the requests sent "
          f"before the {FIRST + 1}th, at {FIRST / QPS:g} s\n")
    head = f"{'mode':<27} {'repeat':>6} {'hit rate, first 4':>17} {'hit rate, repeat':>16} " \
           f"{'TTFT first 4 mean':>17} {'TTFT rest p50':>13}  reset"
    print(head)
    for mode, rows in results.items():
        for r in rows:
            print(f"{mode:<27} {r['repeat']:>6} {r['first_hit']:>17.3f} {r['all_hit']:>16.3f} "
                  f"{r['ttft_first']:>14.1f} ms {r['ttft_rest']:>10.1f} ms  {r['reset']}")
    print(f"\nRunDirs: {', '.join(rows[0]['rundir'] for rows in results.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
