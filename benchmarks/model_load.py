"""What each CPU model preset of the reference server costs to load, cold (weights file dropped from the
page cache first) and warm (file cached), measured side by side: the rounds alternate cold and warm.

    python benchmarks/model_load.py [--rounds 3] [--presets tiny,small,medium,large]

Loads with the numpy backend, as a lazy (naive) server does on its first request: read the weights file,
build the model. Generation of the weights file (once, before the rounds) is timed apart. Prints a table;
not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # as the server sets them
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.run.pagecache import evict  # noqa: E402
from reference_server.config import ServerConfig  # noqa: E402
from reference_server.models.backends import load_model, resolve_backend  # noqa: E402
from reference_server.models.weights import ensure_weights_file, weights_path  # noqa: E402


def measure(preset: str, rounds: int) -> dict:
    config = ServerConfig.from_preset("naive", model=preset, backend="numpy")
    resolved = resolve_backend(config)
    path = weights_path(resolved.spec, config.weights_seed, resolved.cache_dir)
    t0 = time.perf_counter()
    existed = path.exists()
    ensure_weights_file(resolved.spec, config.weights_seed, resolved.cache_dir)
    generated = None if existed else time.perf_counter() - t0
    cold, warm, resident = [], [], []
    for _ in range(rounds):
        ev = evict(path)
        resident.append(ev.resident_after)
        t0 = time.perf_counter()
        model = load_model(resolved, config)
        cold.append(time.perf_counter() - t0)
        del model
        t0 = time.perf_counter()
        model = load_model(resolved, config)
        warm.append(time.perf_counter() - t0)
        del model
    return {"preset": preset, "params": resolved.spec.parameter_count(), "mb": path.stat().st_size / 1e6,
            "generated_s": generated, "cold": cold, "warm": warm, "resident": resident}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--presets", default="tiny,small,medium,large")
    args = ap.parse_args()
    print(f"{'preset':8} {'params':>8} {'file MB':>8} {'generate s':>10} {'cold load s (median, range)':>30} "
          f"{'warm load s':>22} {'cached after evict':>18}")
    for preset in args.presets.split(","):
        r = measure(preset, args.rounds)
        gen = f"{r['generated_s']:.2f}" if r["generated_s"] is not None else "existed"
        cold = f"{statistics.median(r['cold']):.3f} ({min(r['cold']):.3f}-{max(r['cold']):.3f})"
        warm = f"{statistics.median(r['warm']):.3f} ({min(r['warm']):.3f}-{max(r['warm']):.3f})"
        res = ", ".join("?" if v is None else f"{v:.0%}" for v in r["resident"])
        print(f"{preset:8} {r['params'] / 1e6:7.1f}M {r['mb']:8.0f} {gen:>10} {cold:>30} {warm:>22} {res:>18}",
              flush=True)


if __name__ == "__main__":
    main()
