"""A lazy (naive) reference server's first request after a fresh start, with its weights file out of the
page cache (cold) and in it (warm), measured side by side: the starts alternate cold and warm, the order
flipping each round.

    python benchmarks/cold_vs_warm.py [--rounds 3] [--presets small,large]

Each start: drop the weights file from the page cache (cold) or read it whole (warm), start the server,
send one chat completion (8 tokens) and time it, then a second one (the steady reference), read the
server's own model load time from /metrics, stop. Prints medians and the cold/warm ratio; not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.run.coldstart import prepare_weights  # noqa: E402
from loadgen.run.pagecache import evict, resident_fraction  # noqa: E402
from loadgen.run.targets import start_reference  # noqa: E402
from loadgen.scenario.model import ReferenceTarget, Target  # noqa: E402


def ask(url: str, model: str) -> float:
    """Seconds for one non-streamed chat completion of 8 tokens."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello there, how are you"}],
                       "max_tokens": 8}).encode()
    req = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()
    return time.perf_counter() - t0


def model_load(root: str) -> float | None:
    with urllib.request.urlopen(root + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("refserver:model_load_seconds{"):
                return float(line.split()[-1])
    return None


def one_start(ref: ReferenceTarget, path: str, cold: bool) -> dict:
    if cold:
        cached = evict(path).resident_after
    else:
        Path(path).read_bytes()
        cached = resident_fraction(path)
    server = start_reference(ref)
    try:
        first = ask(server.url, ref.model)
        second = ask(server.url, ref.model)
        load = model_load(server.root)
    finally:
        server.stop()
    return {"cached": cached, "first": first, "second": second, "load": load, "ready": server.ready_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--presets", default="small,large")
    args = ap.parse_args()
    print(f"{'preset':8} {'state':5} {'cached':>7} {'first request ms':>17} {'second ms':>10} {'model load ms':>14} "
          f"{'first - second ms':>18}")
    for preset in args.presets.split(","):
        ref = ReferenceTarget(arch="naive", model=preset)
        weights = prepare_weights(Target(name=preset, reference=ref))
        rows = {True: [], False: []}
        for r in range(args.rounds):
            for cold in ((True, False) if r % 2 == 0 else (False, True)):
                rows[cold].append(one_start(ref, weights.path, cold))
        med = {c: {k: statistics.median(x[k] for x in rows[c]) for k in ("first", "second", "load")} for c in rows}
        for cold in (True, False):
            m = med[cold]
            cached = max(x["cached"] for x in rows[cold])
            print(f"{preset:8} {'cold' if cold else 'warm':5} {cached:7.0%} {m['first'] * 1e3:17.0f} "
                  f"{m['second'] * 1e3:10.0f} {m['load'] * 1e3:14.0f} {(m['first'] - m['second']) * 1e3:18.0f}")
        print(f"{preset:8} cold/warm first request {med[True]['first'] / med[False]['first']:.2f}x, model load "
              f"{med[True]['load'] / med[False]['load']:.2f}x (medians of {args.rounds} starts each, alternating)",
              flush=True)


if __name__ == "__main__":
    main()
