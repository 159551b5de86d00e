"""Does the capacity answer hold? ``latbench capacity``, then steady runs at 90% and 130% of its answer.

The rule a capacity answer must meet (issue 5): a steady run at 90% of the found rate passes the same
objectives, and one at 130% fails them. One pair of runs proves little on a noisy machine, so each rate is
run ``--reps`` times, alternating, each from a fresh server (latbench starts the reference server for
every run, as ``latbench run`` does) with an unrecorded warm-up; the table shows every run.

The scenario is ``scenarios/capacity_120.yaml`` (its workload: ~16-token prompts, 16-token answers,
Poisson arrivals) with the reference server's ``--backend`` and the objective ``--slo`` swapped in:

- ``numpy``: the tiny model really computed on this machine's CPU, sharing it with the generator.
- ``sim:l4-8b``: the reference server with a simulated accelerator (an 8B model on an L4: step times from
  the roofline of ``reference_server/models/sim.py``; the tokens come from the tiny model, which fits inside
  those times, so the steps take the modelled time). The shape of a GPU server: flat latency until the
  batch saturates, then a queue.

    python benchmarks/capacity_check.py [--backend sim:l4-8b] [--slo "latency.p99 < 2s"] [--reps 3]
        [--step-duration 20s] [--duration 30s] [--min 4] [--max 200]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def scenario_text(backend: str, slo: str, phases: list[dict] | None = None, seed: int = 0) -> str:
    sc = yaml.safe_load((ROOT / "scenarios" / "capacity_120.yaml").read_text())
    sc["target"]["reference"]["backend"] = backend
    sc["slo"] = [slo]
    sc["load"]["seed"] = seed  # each repetition draws its own arrivals
    if phases is not None:
        sc["load"]["phases"] = phases
    return yaml.safe_dump(sc, sort_keys=False)


def find(args, work: Path) -> float:
    path = work / "capacity.yaml"
    path.write_text(scenario_text(args.backend, args.slo))
    out = work / "capacity"
    cmd = LATBENCH + ["capacity", str(path), "--min", str(args.min), "--max", str(args.max),
                      "--step-duration", args.step_duration, "--warmup", "4s", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(proc.stdout.rstrip())
    (rd,) = list(out.iterdir())
    result = json.loads((rd / "capacity.json").read_text())
    if result["max_sustainable_qps"] is None:
        sys.exit(f"no rate held: {proc.stderr[-2000:]}")
    return float(result["max_sustainable_qps"])


def steady(args, work: Path, name: str, qps: float, seed: int) -> tuple[int, float | None, float]:
    """(exit code, p99 latency in seconds, achieved req/s) of one steady run at ``qps``."""
    phases = [{"name": "warmup", "duration": "6s", "qps": round(qps, 3), "record": False},
              {"name": "steady", "duration": args.duration, "qps": round(qps, 3)}]
    path = work / f"{name}.yaml"
    path.write_text(scenario_text(args.backend, args.slo, phases, seed))
    out = work / name
    proc = subprocess.run(LATBENCH + ["run", str(path), "--out", str(out), "--quiet"], cwd=ROOT,
                          capture_output=True, text=True)
    (rd,) = list(out.iterdir())
    (summary,) = list(rd.glob("*/summary.json"))
    phase = json.loads(summary.read_text())["phases"]["steady"]
    p99 = phase["metrics"]["latency"]["percentiles"]["p99"]["value"]
    return proc.returncode, (None if p99 is None else float(p99)), phase["achieved_qps"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="sim:l4-8b")
    ap.add_argument("--slo", default="latency.p99 < 2s")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--step-duration", default="20s")
    ap.add_argument("--duration", default="30s", help="measured length of each steady run")
    ap.add_argument("--min", type=float, default=4.0)
    ap.add_argument("--max", type=float, default=200.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="latbench-capcheck-") as tmp:
        work = Path(tmp)
        cap = find(args, work)
        print(f"\nbackend {args.backend}, objective {args.slo!r}: capacity holds {cap:.4g} req/s\n")
        print(f"{'share':>6} {'req/s':>7} {'run':>4} {'achieved':>9} {'p99 ms':>8}  verdict")
        tally = {0.9: 0, 1.3: 0}
        for rep in range(args.reps):
            for share in (0.9, 1.3):
                code, p99, achieved = steady(args, work, f"at{int(share * 100)}-{rep}", share * cap, rep + 1)
                verdict = {0: "PASSED", 1: "FAILED"}.get(code, f"exit {code}")
                tally[share] += (code == 0) if share == 0.9 else (code == 1)
                shown = f"{p99 * 1e3:8.0f}" if p99 is not None else f"{'-':>8}"
                print(f"{share:6.0%} {share * cap:7.2f} {rep + 1:4d} {achieved:9.1f} {shown}  {verdict}", flush=True)
        print(f"\nat 90%: {tally[0.9]}/{args.reps} passed; at 130%: {tally[1.3]}/{args.reps} failed")


if __name__ == "__main__":
    main()
