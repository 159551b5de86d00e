"""KServe v2 over HTTP/JSON against gRPC/protobuf on one reference server, interleaved (a script, not a test).

One reference server (tiny model, optimized: its result cache makes answers cost no compute once warm) serves
KServe v2 over HTTP and over gRPC. Four variants -- json-infer (POST /v2/models/tiny/infer), grpc-infer
(ModelInfer), json-stream (Triton generate_stream, SSE), grpc-stream (ModelStreamInfer) -- are measured in
``--rounds`` rounds of ``--duration`` seconds each, the order rotated every round, so a noisy machine hits all
four alike. Printed: the median over rounds of each variant's latency p50/p99, TTFT p50 and ITL p50 (streams)
and response bytes per request, then the gRPC/JSON ratios. Records and numbers come from ``latbench run``'s
own ``requests.parquet`` and ``summarize``.

    python benchmarks/json_vs_protobuf.py [--rounds 5] [--duration 3] [--qps 20] [--tokens 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.analysis.metrics import records_frame  # noqa: E402
from loadgen.records.schema import read_records  # noqa: E402
from loadgen.run.runner import run_scenario  # noqa: E402
from loadgen.run.targets import start_reference  # noqa: E402
from loadgen.scenario.loader import load_scenario  # noqa: E402
from loadgen.scenario.model import ReferenceTarget  # noqa: E402

VARIANTS = {  # name -> (api, stream, over gRPC)
    "json-infer": ("kserve-v2", False, False),
    "grpc-infer": ("kserve-v2", False, True),
    "json-stream": ("triton-generate", True, False),
    "grpc-stream": ("kserve-v2", True, True),
}


def run_variant(tmp: Path, name: str, url: str, duration: float, qps: float, tokens: int, record: bool,
                phase: str | None = None) -> dict:
    api, stream, _ = VARIANTS[name]
    phase = phase or f"{{name: m, duration: {duration}s, qps: {qps}, record: {str(record).lower()}}}"
    text = f"""
    name: {name}
    target: {{url: "{url}", api: {api}, stream: {str(stream).lower()}, model: tiny}}
    workload: {{prompts: {{input_tokens: 32, output_tokens: {tokens}, distinct: 16}}, ignore_eos: true}}
    load:
      arrival: poisson
      phases:
        - {phase}
    """
    path = tmp / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    res = run_scenario(load_scenario(path), out=str(tmp / "runs"))
    tdir = res.rundir.path / res.targets[0].dir
    s = json.loads((tdir / "summary.json").read_text())["overall"]
    df = records_frame(read_records(tdir / "requests.parquet"))
    ok = df[df["ok"]]

    def p(metric, stat):
        d = s["metrics"][metric]
        return d["percentiles"][stat]["value"] if d.get("n") else None

    return {"ok": s["ok"], "count": s["count"], "errors": s["errors"], "lat_p50": p("latency", "p50"),
            "lat_p99": p("latency", "p99"), "ttft_p50": p("ttft", "p50"), "itl_p50": p("itl", "p50"),
            "bytes": float(ok["bytes_in"].mean()) if len(ok) else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--qps", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args(argv)
    server = start_reference(ReferenceTarget(arch="optimized", model="tiny", options={"grpc_port": 0}))
    try:
        host = server.root.split("://", 1)[1].rsplit(":", 1)[0]
        urls = {n: (f"grpc://{host}:{server.config['grpc_port']}" if v[2] else server.root)
                for n, v in VARIANTS.items()}
        results: dict[str, list[dict]] = {n: [] for n in VARIANTS}
        with tempfile.TemporaryDirectory() as tmp:
            # warm-up: each of the 16 prompts once, together (an uncached answer is seconds of compute), so the
            # result cache holds every answer before anything is measured; then each variant briefly
            run_variant(Path(tmp), "json-infer", urls["json-infer"], 0, 0, a.tokens, record=False,
                        phase="{name: w, duration: 60s, concurrency: 16, max_requests: 16, record: false}")
            for n in VARIANTS:
                run_variant(Path(tmp), n, urls[n], 1.0, a.qps, a.tokens, record=False)
            names = list(VARIANTS)
            for r in range(a.rounds):
                for n in names[r % 4:] + names[: r % 4]:
                    results[n].append(run_variant(Path(tmp), n, urls[n], a.duration, a.qps, a.tokens, record=True))
    finally:
        server.stop()

    def med(n, key):
        vals = [x[key] for x in results[n] if x[key] is not None]
        return statistics.median(vals) if vals else None

    def ms(v):
        return "-" if v is None else f"{v * 1e3:8.2f}"

    print(f"{a.rounds} rounds x {a.duration:g} s at {a.qps:g} req/s, {a.tokens}-token answers (cached), "
          "medians over rounds")
    print(f"{'variant':12} {'ok/sent':>9} {'lat p50':>8} {'lat p99':>8} {'ttft p50':>8} {'itl p50':>8} {'bytes':>8}")
    for n in VARIANTS:
        oks = sum(x["ok"] for x in results[n])
        cnt = sum(x["count"] for x in results[n])
        b = med(n, "bytes")
        errors: dict = {}
        for x in results[n]:
            for k, v in x["errors"].items():
                errors[k] = errors.get(k, 0) + v
        print(f"{n:12} {oks:>4}/{cnt:<4} {ms(med(n, 'lat_p50'))} {ms(med(n, 'lat_p99'))} {ms(med(n, 'ttft_p50'))} "
              f"{ms(med(n, 'itl_p50'))} {'-' if b is None else f'{b:8.0f}'}" + (f"  errors {errors}" if errors else ""))
    for kind in ("infer", "stream"):
        j, g = f"json-{kind}", f"grpc-{kind}"
        for key in ("lat_p50", "lat_p99", "ttft_p50", "bytes"):
            jv, gv = med(j, key), med(g, key)
            if jv and gv:
                print(f"grpc/json {kind:6} {key:9} {gv / jv:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
