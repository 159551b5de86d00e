"""The target's own telemetry from real short runs: against the bundled reference server (its figures agree with
what it did: every request of the recorded phase a result-cache hit, its request count the records'), against a
real aiohttp server serving a rebuilt SGLang or TGI /metrics whose values change over time (per-phase figures, the
burst headline naming the quantity that moved most), and against a /metrics that is not Prometheus text or stops
answering mid-run (noted; the run keeps its client figures)."""

from __future__ import annotations

import pandas as pd
import pytest

from loadgen.engine.scrape import parse_samples
from loadgen.records.series_file import HEADER
from reports import load_rundir, write_outputs
from reports.markdown import render_markdown
from tests.engine_metrics import DATA, EngineMetricsServer
from tests.helpers import run


def hist_mean(engine: str, base: str) -> float:
    s = parse_samples((DATA / f"{engine}_metrics.txt").read_text())
    return sum(v for n, _, v in s if n == base + "_sum") / sum(v for n, _, v in s if n == base + "_count")


def test_reference_server_telemetry_agrees_with_what_it_did(tmp_path):
    res, summary, df = run(tmp_path, """
    name: cache
    target:
      reference: {arch: optimized, model: tiny}
      stream: true
    workload: {prompts: {input_tokens: 8, output_tokens: 4, distinct: 1}}
    load:
      arrival: constant
      host_wait_limit: 1
      phases:
        - {name: warmup, duration: 1.5s, qps: 4, record: false}
        - {name: main, duration: 2s, qps: 10}
    slo:
      - server.result_cache_hit_rate.mean > 90%
      - gpu.utilization.mean in 70%..80%
    """)
    t = summary["telemetry"]
    assert t["engine"] == "refserver" and t["engine_chosen"] == "auto" and t["scrapes"] >= 4
    main = t["phases"]["main"]["quantities"]
    # one distinct prompt, cached in the warmup: every request of main was answered from the result cache
    hit = main["server.result_cache_hit_rate"]
    assert hit["mean"] == pytest.approx(1.0, abs=0.02) and hit["source"].startswith("refserver:cache_hits_total")
    # the server's requests over main are the records': a counter is interpolated between the scrapes around each
    # end of the phase, so its count lies between the records done inside the scrapes within the phase and those
    # done inside the scrapes around it
    tdir = res.rundir.path / res.targets[0].dir
    scrapes = sorted(set(pd.read_csv(tdir / "server_metrics.csv")["time"]))
    a, b = t["phases"]["main"]["start"], t["phases"]["main"]["end"]
    inner = (min(x for x in scrapes if x >= a), max(x for x in scrapes if x <= b))
    outer = (max(x for x in scrapes if x <= a), min(x for x in scrapes if x >= b))
    done = df.loc[df["ok"], "done"]
    certain, possible = done.between(*inner).sum(), done.between(*outer).sum()
    assert certain > 0 and certain - 0.5 <= main["server.e2e"]["count"] <= possible + 0.5
    assert main["server.queue_waiting"]["source"] == "refserver:num_requests_waiting"
    checks = {c["name"]: c for c in t["checklist"]}
    assert checks["result_cache_hit_rate"]["status"] == "met" and checks["gpu_utilization"]["status"] == \
        "not_measurable"
    assert checks["batch_timeout"]["figure"] == t["batch_timeout_s"] == 0.002  # the optimized preset's own
    slo = {s["expr"]: s for s in summary["slo"]}
    assert slo["server.result_cache_hit_rate.mean > 90%"]["passed"]
    gpu = slo["gpu.utilization.mean in 70%..80%"]
    assert not gpu["passed"] and gpu["value"] is None and "gave no gpu.utilization" in gpu["reason"]
    assert res.exit_code == 1 and any("not measurable here" in r for r in res.reasons)
    lines = (tdir / "telemetry.csv").read_text().splitlines()
    assert tuple(lines[0].split(",")) == HEADER == tuple((tdir / "host.csv").read_text().splitlines()[0].split(","))
    assert any(",refserver:num_requests_waiting,server.queue_waiting," in x for x in lines)
    write_outputs(res.rundir.path)
    html, md = (res.rundir.path / "report.html").read_text(), (res.rundir.path / "summary.md").read_text()
    assert "Server side, per phase" in html and "The article's checklist" in html
    assert "result cache hit rate: met" in md and "GPU utilization: not measurable here" in md


@pytest.mark.parametrize("engine, queue", [("sglang", "sglang:num_queue_reqs"), ("tgi", "tgi_queue_size")])
def test_an_engine_whose_metrics_change_over_time(tmp_path, engine, queue):
    srv = EngineMetricsServer(engine, ramp={queue: 5.0}, delay=0.005, ttft=0.01, gap=0.002, tokens=4).start()
    try:
        res, summary, _ = run(tmp_path, f"""
        name: {engine}
        target:
          url: {srv.url}
          stream: true
          metrics_url: {srv.metrics_url}
        workload: {{prompts: {{input_tokens: 8, output_tokens: 4}}}}
        load:
          arrival: constant
          host_wait_limit: 1
          phases:
            - {{name: baseline, duration: 1.5s, qps: 4}}
            - {{name: burst, duration: 1.5s, qps: 12}}
            - {{name: recovery, duration: 0.5s, qps: 4}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    t = summary["telemetry"]
    assert t["engine"] == engine
    base, burst = t["phases"]["baseline"]["quantities"], t["phases"]["burst"]["quantities"]
    assert burst["server.queue_waiting"]["max"] > base["server.queue_waiting"]["max"]  # 5 more each scrape
    assert burst["server.queue_waiting"]["source"] == queue
    e2e = {"sglang": "sglang:e2e_request_latency_seconds", "tgi": "tgi_request_duration"}[engine]
    assert burst["server.e2e"]["mean"] == pytest.approx(hist_mean(engine, e2e))  # every interval adds the text's
    move = t["moves"][0]
    assert (move["phase"], move["baseline"], move["quantity"], move["source"]) == \
        ("burst", "baseline", "server.queue_waiting", queue)
    md = render_markdown(load_rundir(res.rundir.path))  # the headline's words, without drawing the report's figures
    assert f"what moved most from baseline to burst: requests waiting (peak) rose from **{move['before']:.3g}**" in md
    assert f"({queue})" in md


@pytest.mark.parametrize("bad, seconds, says", [({"garbage": True}, 1, "not Prometheus text"),
                                                ({"die_after": 1}, 3, "stopped answering: its last scrape was 0.")])
def test_a_bad_metrics_endpoint_is_noted_and_the_client_figures_stay(tmp_path, bad, seconds, says):
    srv = EngineMetricsServer("sglang", delay=0.005, ttft=0.01, gap=0.002, tokens=4, **bad).start()
    try:
        res, summary, _ = run(tmp_path, f"""
        name: bad
        target:
          url: {srv.url}
          stream: true
          metrics_url: {srv.metrics_url}
        workload: {{prompts: {{input_tokens: 8, output_tokens: 4}}}}
        load:
          arrival: constant
          host_wait_limit: 1
          phases: [{{name: main, duration: {seconds}s, qps: 5}}]
        slo: [latency.p99 < 5s]
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons  # the client's figures and objectives stand
    assert summary["overall"]["count"] >= 5 * seconds - 1 and summary["slo"][0]["passed"]
    t = summary["telemetry"]
    assert any(says in n for n in t["notes"])
    if "garbage" in bad:
        assert t["measured"] is False and "phases" not in t
    else:  # the first scrape answered, then 500s: what was scraped stands, the rest is said
        assert t["scrapes"] == 1
