"""A burst against a real vLLM, and vLLM's own telemetry beside latbench's figures per phase (issue #32's acceptance).

Starts vLLM's CPU build (the tiny dummy-weight Llama of ``real_engines.py``, pinned to core 0, ``--max-num-seqs``
small enough that a burst queues) and runs ``latbench run`` (pinned to core 1, the report drawn) on a burst
scenario written here: warmup, baseline at ``--rate``, a burst at ``--burst`` times it, recovery, a few seconds
each, ``metrics_url`` set to vLLM's /metrics. Then prints, per phase, from the run's summary.json: latbench's TTFT
mean, vLLM's own (its ``vllm:time_to_first_token_seconds`` histogram over the phase, read through the vLLM
adapter), their ratio, and vLLM's running and waiting requests and KV-cache usage at their highest; and checks
that report.html has the server panels (drawn from telemetry.csv).

latbench's TTFT runs from the moment it sent the request to its first streamed token; vLLM's from the request's
arrival in its engine (after the HTTP server parsed it and its prompt was tokenized) to the first token made, so
latbench's is longer by the HTTP round trip, the API server's work and the streaming of the first chunk. The engine
counts a request in the scrape interval its first token fell in, latbench in the phase it was scheduled in: a
request sent at the end of the burst counts in the burst for latbench and in recovery for vLLM; and a phase's end
falls between two scrapes a second apart, where the engine's counters are interpolated. So the table gives
latbench's mean both ways: over the requests sent in the phase (its summary's), and counted as the engine's
histogram is (each request at its first token, its running count and sum sampled at vLLM's scrape times and read
through the same interpolation), which is the one to set against vLLM's.

    python benchmarks/telemetry_vllm.py [--rate 4] [--burst 5] [--seconds 5] [--out DIR] [--url http://HOST:PORT]

``--url``: a vLLM already running (not started nor stopped here). On 2 cores: 1-3 minutes for vLLM to start,
then about 30 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import peer_setup  # noqa: E402
from benchmarks.real_engines import CLIENT_CORE, MODEL_NAME, Engine, write_model  # noqa: E402

PHASES = ("baseline", "burst", "recovery")
QUANTITIES = ("server.ttft", "server.requests_running", "server.queue_waiting", "server.kv_cache_usage")


def scenario(root: str, model: Path, a) -> str:
    """The burst scenario against ``root``: exact prompt lengths with the model's tokenizer, ``ignore_eos``."""
    s = a.seconds
    return textwrap.dedent(f"""\
        name: vllm-burst
        description: a burst against vLLM's CPU build, its telemetry beside latbench's (benchmarks/telemetry_vllm.py)
        target:
          url: {root}/v1
          model: {MODEL_NAME}
          stream: true
          metrics_url: {root}/metrics
        workload:
          prompts: {{input_tokens: {a.isl}, output_tokens: {a.osl}, distinct: 100000}}
          tokenizer: {json.dumps(str(model))}
          ignore_eos: true
        load:
          arrival: poisson
          seed: 1
          phases:
            - {{name: warmup, duration: 2s, qps: {a.rate:g}, record: false}}
            - {{name: baseline, duration: {s:g}s, qps: {a.rate:g}}}
            - {{name: burst, duration: {s:g}s, qps: {a.rate * a.burst:g}}}
            - {{name: recovery, duration: {s:g}s, qps: {a.rate:g}}}
        """)


def run(root: str, model: Path, work: Path, a) -> Path:
    """``latbench run`` of the burst scenario (pinned to the client core); its RunDir."""
    path = work / "burst.yaml"
    path.write_text(scenario(root, model, a))
    argv = ["taskset", "-c", CLIENT_CORE, sys.executable, "-m", "loadgen.cli", "run", str(path), "--out",
            str(work / "runs"), "--quiet"]
    print("+", " ".join(argv[3:]), flush=True)
    with open(work / "latbench.log", "w") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc not in (0, 1, 3):  # 1: an objective missed; 3: latbench judged its run invalid (a busy host): kept
        raise RuntimeError(f"latbench exited with {rc}; see {work / 'latbench.log'}")
    return next(p for p in (work / "runs").iterdir() if p.is_dir())


def as_engine_counts(f, scrapes, a: float, b: float) -> float:
    """latbench's TTFT mean (ms) over ``[a, b)`` counted as the engine's histogram is: each request at the time of
    its first token, its running count and sum sampled at the engine's scrape times and read through the same
    interpolation (:func:`loadgen.telemetry.promseries.phase_figures`)."""
    import numpy as np
    import pandas as pd

    from loadgen.telemetry.adapters import hist
    from loadgen.telemetry.promseries import phase_figures

    first, ttft = f["first_token"].to_numpy(), f["ttft"].to_numpy()
    rows = [(t, name, "", v) for t in scrapes
            for name, v in (("latbench_ttft_seconds_count", float((first <= t).sum())),
                            ("latbench_ttft_seconds_sum", float(np.sum(ttft[first <= t]))))]
    fig = phase_figures(pd.DataFrame(rows, columns=["time", "metric", "labels", "value"]),
                        hist("latbench_ttft_seconds"), a, b)
    return fig.mean * 1e3 if fig is not None and fig.mean is not None else float("nan")


def table(rundir: Path) -> list[dict]:
    """Per phase: latbench's TTFT mean (its requests sent in the phase, and counted as the engine counts) and
    vLLM's (ms), their ratios, vLLM's running, waiting and KV usage peaks."""
    import pandas as pd

    from loadgen.analysis.metrics import records_frame
    from loadgen.records.schema import read_records

    tdir = rundir / "target"
    s = json.loads((tdir / "summary.json").read_text())
    f = records_frame(read_records(tdir / "requests.parquet"))
    f = f[f["ok"]]
    raw = pd.read_csv(tdir / "server_metrics.csv")
    scrapes = sorted(set(raw.loc[raw["metric"] == "vllm:time_to_first_token_seconds_count", "time"]))
    tel = s["telemetry"]
    rows = []
    for name in PHASES:
        ph = tel["phases"][name]
        q = ph["quantities"]
        ours = s["phases"][name]["metrics"]["ttft"]["mean"] * 1e3
        alike = as_engine_counts(f, scrapes, ph["start"], ph["end"])
        engine = q["server.ttft"]["mean"] * 1e3 if "server.ttft" in q else float("nan")
        rows.append({"phase": name, "latbench_ttft_ms": ours, "vllm_ttft_ms": engine, "ratio": ours / engine,
                     "latbench_ttft_alike_ms": alike, "ratio_alike": alike / engine,
                     "requests": s["phases"][name]["count"], "running_max": q["server.requests_running"]["max"],
                     "waiting_max": q["server.queue_waiting"]["max"],
                     "kv_usage_max": q["server.kv_cache_usage"]["max"]})
    rows.append({"sources": {k: q[k]["source"] for k in QUANTITIES if k in q}, "notes": tel.get("notes", [])})
    return rows


def report_panels(rundir: Path) -> list[str]:
    """The server panels report.html draws from telemetry.csv: the source metric each one's title names."""
    html = (rundir / "report.html").read_text()
    telemetry = (rundir / "target" / "telemetry.csv").read_text()
    return [name for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
            if name in html and f",{name}," in telemetry]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=4.0, help="baseline and recovery, requests per second")
    ap.add_argument("--burst", type=float, default=5.0, help="the burst's rate over the baseline's")
    ap.add_argument("--seconds", type=float, default=5.0, help="each recorded phase's duration")
    ap.add_argument("--isl", type=int, default=128, help="prompt tokens")
    ap.add_argument("--osl", type=int, default=64, help="output tokens (ignore_eos)")
    ap.add_argument("--max-num-seqs", type=int, default=4, help="vLLM's batch at most: a burst beyond it queues")
    ap.add_argument("--port", type=int, default=18767)
    ap.add_argument("--out", type=Path, help="work folder (default: a new temporary one)")
    ap.add_argument("--url", help="a running vLLM's root URL (serving the model as tiny-llama): not started here")
    a = ap.parse_args(argv)
    work = a.out or Path(tempfile.mkdtemp(prefix="latbench-telemetry-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    peer_setup.setup_vllm()
    model = work / "model"
    write_model(model)
    eng = None
    if not a.url:
        eng = Engine(model, a.port, work / "vllm.log", ["--max-num-seqs", str(a.max_num_seqs)])
        print(f"vLLM ready after {eng.ready_s:.0f} s at {eng.root}", flush=True)
    try:
        if eng is not None:  # the prefill and decode paths of each batch size paged in before anything counts
            for width in (1, 2, 4, a.max_num_seqs):
                with ThreadPoolExecutor(width) as pool:
                    list(pool.map(lambda i: eng.chat("warm up " * (8 + i), a.osl), range(2 * width)))
        rundir = run(a.url or eng.root, model, work, a)
    finally:
        if eng is not None:
            eng.stop()
    rows = table(rundir)
    extra = rows.pop()
    print(f"\nburst against vLLM (CPU build, tiny dummy Llama, --max-num-seqs {a.max_num_seqs}): {a.rate:g} req/s, "
          f"{a.rate * a.burst:g} in the burst, {a.seconds:g} s a phase, {a.isl} prompt / {a.osl} output tokens\n")
    print(f"{'':<18} {'latbench TTFT mean':>18} {'vLLM TTFT':>10} {'':>6} {'latbench, as':>13}\n"
          f"{'phase':<9} {'requests':>8} {'(sent in phase)':>18} {'mean':>10} {'ratio':>6} {'vLLM counts':>13} "
          f"{'ratio':>6} {'running max':>11} {'waiting max':>11} {'KV usage max':>12}")
    for r in rows:
        print(f"{r['phase']:<9} {r['requests']:>8} {r['latbench_ttft_ms']:>15.1f} ms {r['vllm_ttft_ms']:>7.1f} ms "
              f"{r['ratio']:>6.3f} {r['latbench_ttft_alike_ms']:>10.1f} ms {r['ratio_alike']:>6.3f} "
              f"{r['running_max']:>11.0f} {r['waiting_max']:>11.0f} {r['kv_usage_max']:>12.1%}")
    print("\nsources: " + ", ".join(f"{k} <- {v}" for k, v in extra["sources"].items()))
    for note in extra["notes"]:
        print(f"note: {note}")
    panels = report_panels(rundir)
    print(f"report.html server panels drawn from telemetry.csv: {', '.join(panels) or 'NONE'}")
    print(f"RunDir: {rundir}")
    (work / "table.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rows": rows,
                                                 **extra, "panels": panels, "rundir": str(rundir)}, indent=1))
    return 0 if len(panels) == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
