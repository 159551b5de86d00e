"""How long ``reports.write_outputs`` takes on big runs (the issue asks < 20 s for 1,000,000 requests).

    python benchmarks/report_speed.py [--rows 1000000 100000] [--keep DIR]

Builds synthetic RunDirs the way a run writes them (loadgen.records.schema.RecordWriter for the records,
loadgen.analysis.metrics.summarize for summary.json), then times write_outputs and prints a table.
:func:`synthetic_rundir` is also what the report tests use for RunDirs with known numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.analysis.metrics import build_summary  # noqa: E402
from loadgen.analysis.repeated import RepeatRun, build_repeats  # noqa: E402
from loadgen.records.results import Summary  # noqa: E402
from loadgen.records.rundir import REPEATS, REQUESTS, SUMMARY, RunDir, RunMeta, write_json  # noqa: E402
from loadgen.records.schema import SCHEMA, RecordWriter, read_records  # noqa: E402
from loadgen.scenario.model import Load  # noqa: E402
from loadgen.scenario.slo import parse_slo  # noqa: E402
from loadgen.schedule.arrivals import plan_phases  # noqa: E402

BATCH = 200_000


def _batch(rng, scheduled, phase, recorded, base, tokens, error_rate) -> pa.RecordBatch:
    n = scheduled.size
    lat = base * rng.lognormal(0.0, 0.25, n)
    lag = rng.exponential(0.0003, n)
    err = np.where(rng.random(n) < error_rate, rng.choice(np.array(["timeout", "http_5xx"], dtype=object), n), "")
    ok = err == ""
    sent = scheduled + lag
    new_conn = rng.random(n) < 0.01
    connect_start = np.where(new_conn, sent, np.nan)
    connected = np.where(new_conn, sent + 0.0005, np.nan)
    first_byte = np.where(ok, sent + 0.2 * lat, np.nan)
    first_token = np.where(ok, sent + 0.3 * lat, np.nan)
    done = scheduled + lat
    gen = np.where(ok, done - first_token, 0.0)
    counts = np.where(ok, tokens, 0).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    frac = np.linspace(0.0, 1.0, tokens, dtype=np.float64)
    values = (gen[ok][:, None] * frac[None, :]).astype(np.float32).ravel()
    cols = {
        "seq": np.arange(n, dtype=np.int64), "phase": phase.astype(np.int16), "recorded": recorded,
        "scheduled": scheduled, "sent": sent, "connect_start": connect_start, "connected": connected,
        "tls": np.full(n, np.nan), "first_byte": first_byte, "first_token": first_token, "done": done,
        "status": np.where(err == "http_5xx", 500, np.where(ok, 200, 0)).astype(np.int16), "error": err,
        "prompt_tokens": np.full(n, 100, np.int32), "prompt_tokens_source": np.full(n, "usage"),
        "input_tokens": np.full(n, 100, np.int32), "added_tokens": np.full(n, -1, np.int32),
        "output_tokens": counts, "output_tokens_source": np.full(n, "usage"),
        "bytes_in": counts.astype(np.int64) * 100, "worker": np.zeros(n, np.int16),
        "first_answer": first_token, "reasoning_tokens": np.zeros(n, np.int32),
        "chunk_tokens_source": np.where(counts > 0, "chunks", ""),
        "session": np.full(n, -1, np.int64), "turn": np.full(n, -1, np.int16), "user": np.full(n, -1, np.int32),
        "images": np.zeros(n, np.int16), "image_pixels": np.zeros(n, np.int64), "image_bytes": np.zeros(n, np.int64),
        "tools": np.zeros(n, np.int16), "tool_calls": np.zeros(n, np.int16), "tool_call_tokens": np.zeros(n, np.int32),
        "first_tool_call": np.full(n, np.nan), "json_valid": np.full(n, -1, np.int8),
        "audio": np.zeros(n, np.int16), "audio_seconds": np.zeros(n),
        "schema_valid": np.full(n, -1, np.int8), "image_tokens_est": np.zeros(n, np.int32),
        "media_cache_hits": np.full(n, -1, np.int16),
    }
    lists = {"token_times": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.float32())),
             "chunk_tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.ones(len(values), np.int16)))}
    arrays = [lists[f.name] if f.name in lists else pa.array(cols[f.name], type=f.type) for f in SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def synthetic_rundir(path, rows: int = 10_000, *, name: str = "synthetic", targets=(("target", 0.05),),
                     phases=(("warm", 2.0, False), ("main", 8.0, True)), tokens: int = 8, error_rate: float = 0.01,
                     slos=("latency.p99 < 300ms", "error_rate < 1%"), complete: bool = True,
                     partial: tuple[str, ...] = (), seed: int = 0) -> Path:
    """A RunDir with ``rows`` requests per target; a target's latency is ``base`` seconds (lognormal around it).

    Phases are (name, seconds, recorded), with rates chosen so that the rows fill them evenly. Targets named
    in ``partial`` are left as a killed run leaves them: the records' partial stream, no summary.json.
    """
    rng = np.random.default_rng(seed)
    total_s = sum(p[1] for p in phases)
    qps = rows / total_s
    scenario = {"name": name, "targets": [{"name": t, "url": "${SYNTH_URL}"} for t, _ in targets],
                "load": {"phases": [{"name": p, "duration": f"{d}s", "qps": qps, "record": r} for p, d, r in phases]},
                "slo": list(slos)}
    load = Load.model_validate(scenario["load"], context={"expected_qps": None})
    plans = plan_phases(load)
    slo_objs = [parse_slo(s) for s in slos]
    rd = RunDir.create(path, name, exact=True)
    rd.write_scenario(scenario)
    rd.write_metric_definitions()
    meta = RunMeta(rd, {"latbench_version": "synthetic", "engine": "native", "host": "bench",
                        "started": "2026-12-02T10:00:00+0000", "scenario": name, "targets": [], "complete": complete})
    writers = []
    for tname, base in targets:
        tdir = rd.new_target_dir(tname)
        entry = meta.add_target(tname, tdir.name)
        w = RecordWriter(tdir / REQUESTS)
        scheduled = np.sort(rng.uniform(0.0, total_s, rows))
        phase = np.searchsorted(np.cumsum([p[1] for p in phases]), scheduled, side="right").clip(0, len(phases) - 1)
        recorded = np.asarray([p[2] for p in phases])[phase]
        for lo in range(0, rows, BATCH):
            sl = slice(lo, lo + BATCH)
            w.write(_batch(rng, scheduled[sl], phase[sl], recorded[sl], base, tokens, error_rate))
        entry.update(url="http://127.0.0.1:1/v1", duration_s=total_s, requests=rows)
        if tname in partial:
            writers.append(w)  # never closed: the parquet file has no footer, the .partial stream holds the rows
            continue
        w.close()
        s = build_summary(read_records(tdir / REQUESTS), plans, slo_objs, total_s, target=tname, scenario=name)
        write_json(tdir / SUMMARY, s)
    _OPEN.extend(writers)  # kept alive (and unclosed) for the life of the process
    return rd.path


_OPEN: list = []


def synthetic_repeated_rundir(path, groups: dict[str, list[float]], rows: int = 2_000, *, judge: str = "median",
                              slos=("latency.p99 < 300ms", "error_rate < 1%"), seed: int = 0, **kw) -> Path:
    """A RunDir of a repeated run: ``groups`` maps each target to the base latency (s) of each of its runs;
    the runs are interleaved (a-rep1 b-rep1 a-rep2 ...) and repeats.json is computed from their summaries,
    as ``latbench run --repeat N`` leaves it."""
    n = max(len(v) for v in groups.values())
    order = [(g, k) for k in range(1, n + 1) for g, bases in groups.items() if k <= len(bases)]
    targets = tuple((f"{g}-rep{k}", groups[g][k - 1]) for g, k in order)
    root = synthetic_rundir(path, rows, targets=targets, slos=slos, seed=seed, **kw)
    meta = RunMeta.open(RunDir(root))
    for entry, (g, k) in zip(meta.targets, order):
        entry.update(group=g, repetition=k)
    meta.update(repeat={"runs": n, "pause": 0.0, "judge": judge})
    runs = [RepeatRun(g, k, f"{g}-rep{k}", Summary.model_validate_json((root / f"{g}-rep{k}" / SUMMARY).read_text()))
            for g, k in order]
    write_json(root / REPEATS, build_repeats(runs, [parse_slo(x) for x in slos], judge, [r.dir for r in runs]))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--keep", help="build the RunDirs here instead of a temporary folder")
    args = ap.parse_args()
    from reports import write_outputs

    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="latbench-report-speed-"))
    print(f"{'requests':>10} | {'build (s)':>9} | {'write_outputs (s)':>17} | {'report.html (kB)':>16} | {'< 20 s':>6}")
    print(f"{'-' * 10}-|-{'-' * 9}-|-{'-' * 17}-|-{'-' * 16}-|-{'-' * 6}")
    for n in args.rows:
        t = time.perf_counter()
        path = synthetic_rundir(base / f"rows-{n}", n, name=f"speed-{n}")
        built = time.perf_counter() - t
        t = time.perf_counter()
        outs = write_outputs(path)
        took = time.perf_counter() - t
        kb = os.path.getsize(outs[0]) / 1024
        print(f"{n:>10,} | {built:>9.1f} | {took:>17.2f} | {kb:>16.0f} | {'yes' if took < 20 else 'NO':>6}", flush=True)


if __name__ == "__main__":
    main()
