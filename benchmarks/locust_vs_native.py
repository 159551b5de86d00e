"""Native engine against the Locust engine, same scenario and target (a script, not a test).

Every run starts with a 2 s warm-up phase at the same rate (``record: false``: left out of the numbers).

1. One open-loop streaming scenario run by both engines against one target: achieved QPS, send lag
   (p50/p99 of ``sent - scheduled``), latency and TTFT p50/p99, and the ratio locust/native.
2. The highest open-loop rate ONE Locust worker holds on this machine: rising rates, each a short run;
   a rate is held when the achieved QPS is within 5% of it and the send lag p99 is under 5 ms. Every
   rate is tried (a shared machine is noisy: one rate can miss while a higher one holds).

Target: the known-latency server of ``tests/servers.py`` (streams: TTFT 20 ms, 10 tokens 5 ms apart),
so differences are the generators'; ``--reference`` uses the reference server (tiny, optimized).
Records and numbers come from the same ``requests.parquet`` / ``summarize`` as ``latbench run``.

    python benchmarks/locust_vs_native.py [--qps 100] [--duration 10] [--workers 2] [--max-rates 200,400,...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def start_target(reference: bool) -> tuple[subprocess.Popen, str, str]:
    """(process, base URL ending in /v1, model name)."""
    if reference:
        argv = [sys.executable, "-m", "reference_server", "--port", "0", "--model", "tiny", "--arch", "optimized"]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in proc.stdout:
            if line.startswith("LATBENCH_SERVER_URL="):
                url = line.split("=", 1)[1].strip()
                break
        import time
        import urllib.request

        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        return proc, url + "/v1", "tiny"
    argv = [sys.executable, "-m", "tests.servers", "--ttft", "0.02", "--gap", "0.005", "--tokens", "10",
            "--delay", "0.01"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split("=")[1])
    return proc, f"http://127.0.0.1:{port}/v1", "known"


def write_scenario(folder: Path, url: str, qps: float, duration: float, stream: bool, arrival: str) -> Path:
    p = folder / f"s_{qps:g}_{stream}.yaml"
    p.write_text(textwrap.dedent(f"""
        name: bench
        target: {{url: "{url}", stream: {str(stream).lower()}}}
        workload: {{prompts: {{input_tokens: 16, output_tokens: 10, distinct: 100}}}}
        load:
          arrival: {arrival}
          phases:
            - {{name: warmup, duration: 2s, qps: {qps}, record: false}}
            - {{name: main, duration: {duration}s, qps: {qps}}}
        """))
    return p


def native(path: Path, url: str, model: str, tdir: Path):
    from loadgen.engine.base import EngineSettings, run_async
    from loadgen.engine.native import NativeEngine
    from loadgen.protocols.registry import make_protocol
    from loadgen.records.schema import RecordWriter, read_records
    from loadgen.scenario.loader import load_scenario
    from loadgen.scenario.prompts import make_prompt_source
    from loadgen.schedule.arrivals import plan_phases
    from loadgen.transports.aiohttp_client import AiohttpTransport

    sc = load_scenario(path).scenario
    target = sc.target_list()[0]
    plans = plan_phases(sc.load)

    async def go():
        transport = AiohttpTransport()
        await transport.start()
        try:
            engine = NativeEngine(EngineSettings(plans, timeout=target.timeout, seed=sc.load.seed),
                                  make_protocol(target, sc.workload, model),
                                  make_prompt_source(sc.workload, sc.load.seed, path.parent),
                                  transport, RecordWriter(tdir / "requests.parquet"))
            return await engine.run()
        finally:
            await transport.close()

    res = run_async(go())
    return plans, res, read_records(tdir / "requests.parquet"), 1


def locust(path: Path, url: str, model: str, tdir: Path, workers: int):
    from loadgen.engine.locust import run_target_locust
    from loadgen.records.schema import read_records
    from loadgen.scenario.loader import load_scenario
    from loadgen.schedule.arrivals import plan_phases

    plans = plan_phases(load_scenario(path).scenario.load)
    res = run_target_locust(path, 0, url, model, tdir, workers=workers)
    return plans, res, read_records(tdir / "requests.parquet"), res.processes


def numbers(plans, res, table, processes) -> dict:
    from loadgen.analysis.metrics import summarize

    s = summarize(table, plans, [], res.duration, cpu_seconds=res.cpu_seconds, processes=processes)
    o = s["overall"]

    def p(metric, stat):
        v = o["metrics"][metric]["percentiles"][stat]["value"]
        return float("nan") if v is None else float(v)

    return {"count": o["count"], "ok": o["ok"], "qps": o["achieved_qps"],
            "lag50": p("send_lag", "p50"), "lag99": p("send_lag", "p99"),
            "lat50": p("latency", "p50"), "lat99": p("latency", "p99"),
            "ttft50": p("ttft", "p50"), "ttft99": p("ttft", "p99"),
            "cpu": s["generator"]["cpu_utilization"], "interrupted": res.interrupted}


def ms(v: float) -> str:
    return f"{v * 1e3:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=float, default=100)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reference", action="store_true", help="target the reference server instead")
    ap.add_argument("--max-rates", default="200,400,600,800,1000,1200", help="rates tried for one worker")
    ap.add_argument("--max-duration", type=float, default=5)
    a = ap.parse_args()
    proc, url, model = start_target(a.reference)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            path = write_scenario(tmp, url, a.qps, a.duration, True, "poisson")
            rows = {"native": numbers(*native(path, url, model, tmp / "n")),
                    f"locust x{a.workers}": numbers(*locust(path, url, model, tmp / "l", a.workers))}
            print(f"\n## {a.qps:g} QPS open loop (poisson), {a.duration:g} s, streaming, target {model}\n")
            print("| engine | requests | achieved QPS | send lag p50 / p99 ms | latency p50 / p99 ms "
                  "| TTFT p50 / p99 ms | gen. CPU/process |")
            print("|---|---|---|---|---|---|---|")
            for name, r in rows.items():
                print(f"| {name} | {r['count']} | {r['qps']:.1f} | {ms(r['lag50'])} / {ms(r['lag99'])} | "
                      f"{ms(r['lat50'])} / {ms(r['lat99'])} | {ms(r['ttft50'])} / {ms(r['ttft99'])} | {r['cpu']:.0%} |")
            n, l_ = rows["native"], rows[f"locust x{a.workers}"]
            print(f"| locust/native | | {l_['qps'] / n['qps']:.3f} | | {l_['lat50'] / n['lat50']:.3f} / "
                  f"{l_['lat99'] / n['lat99']:.3f} | {l_['ttft50'] / n['ttft50']:.3f} / "
                  f"{l_['ttft99'] / n['ttft99']:.3f} | |")

            print(f"\n## one Locust worker, constant arrivals, {a.max_duration:g} s per rate, non-streaming\n")
            print("| target QPS | achieved QPS | send lag p50 / p99 ms | latency p50 / p99 ms | worker CPU | held |")
            print("|---|---|---|---|---|---|")
            best = 0.0
            for rate in [float(x) for x in a.max_rates.split(",")]:
                path = write_scenario(tmp, url, rate, a.max_duration, False, "constant")
                r = numbers(*locust(path, url, model, tmp / f"m{rate:g}", 1))
                held = abs(r["qps"] / rate - 1) <= 0.05 and r["lag99"] < 0.005
                best = max(best, rate) if held else best
                print(f"| {rate:g} | {r['qps']:.1f} | {ms(r['lag50'])} / {ms(r['lag99'])} | {ms(r['lat50'])} / "
                      f"{ms(r['lat99'])} | {r['cpu']:.0%} | {'yes' if held else 'no'} |")
                if r["qps"] < 0.9 * rate:  # far behind: higher rates will not be held either
                    break
            print(f"\nhighest rate one Locust worker held: {best:g} QPS")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
