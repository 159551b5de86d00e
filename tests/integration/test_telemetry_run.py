"""The target's own telemetry from real short runs: against the bundled reference server (its figures agree with
what it did: every request of the recorded phase a result-cache hit, its request count the records'), against a
real aiohttp server serving a rebuilt SGLang or TGI /metrics whose values change over time (per-phase figures, the
burst headline naming the quantity that moved most), and against a /metrics that is not Prometheus text or stops
answering mid-run (noted; the run keeps its client figures)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from loadgen.analysis.metrics import records_frame
from loadgen.engine.options import EngineOptions
from loadgen.engine.scrape import parse_samples
from loadgen.records.rotate import read_segments
from loadgen.records.schema import read_records
from loadgen.records.series_file import HEADER
from loadgen.run.capacity import run_capacity
from loadgen.run.runner import run_scenario
from loadgen.run.targets import free_port
from loadgen.run.watch import WatchSettings, watch_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.slo import parse_slo
from reports import load_rundir, write_outputs
from reports.markdown import render_markdown
from tests.engine_metrics import DATA, EngineMetricsServer, FakeNvml
from tests.helpers import run, write_scenario


def hist_mean(engine: str, base: str) -> float:
    s = parse_samples((DATA / f"{engine}_metrics.txt").read_text())
    return sum(v for n, _, v in s if n == base + "_sum") / sum(v for n, _, v in s if n == base + "_count")


def assert_server_counted_the_records(tdir: Path, t: dict, phase: str, df: pd.DataFrame) -> None:
    """The server's requests over ``phase`` are the records' (so the scrapes are on the records' clock): a counter
    is interpolated between the scrapes around each end of the phase, so its count lies between the records done
    inside the scrapes within the phase and those done inside the scrapes around it (or the first and last scrape,
    where none was taken before or after the phase: its scraped part is counted)."""
    scrapes = sorted(set(pd.read_csv(tdir / "server_metrics.csv")["time"]))
    a, b = t["phases"][phase]["start"], t["phases"][phase]["end"]
    inner = (min(x for x in scrapes if x >= a), max(x for x in scrapes if x <= b))
    outer = (max((x for x in scrapes if x <= a), default=scrapes[0]),
             min((x for x in scrapes if x >= b), default=scrapes[-1]))
    done = df.loc[df["ok"], "done"]
    certain, possible = done.between(*inner).sum(), done.between(*outer).sum()
    counted = t["phases"][phase]["quantities"]["server.e2e"]["count"]
    assert certain > 0 and certain - 0.5 <= counted <= possible + 0.5, (certain, counted, possible)


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
    tdir = res.rundir.path / res.targets[0].dir
    assert_server_counted_the_records(tdir, t, "main", df)
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
    assert "<td>batch timeout (ms)</td>" in html  # the figure's unit: its cell holds the number alone (2.00)
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
                                                ({"die_after": 1}, 3, "stopped answering: its last scrape was 0.0 s "),
                                                ({"reset_at": 2}, 3, "s (the engine restarted?)")])
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
    elif "die_after" in bad:  # the first scrape answered, then 500s: what was scraped stands, the rest is said
        assert t["scrapes"] == 1
    else:  # an engine restart between the scrapes at about 1 s and 2 s: its counters count on from zero
        assert t["measured"] and t["scrapes"] >= 3 and t["phases"]["main"]["quantities"]["server.e2e"]["count"] > 0


REFERENCE = """
name: every-path
target: {reference: {arch: optimized, model: tiny, backend: numpy}, stream: true}
workload: {prompts: {input_tokens: 8, output_tokens: 4}}
load:
  arrival: constant
  host_wait_limit: 1  # the figures asserted are counts and scrapes, not times: a busy host does not bend them
  send_lag_threshold: 10s
  phases:
    - {name: main, duration: 2.5s, qps: 8}
"""


def test_several_processes_each_capacity_step_and_a_watch_have_the_servers_telemetry(tmp_path, monkeypatch):
    """The telemetry is sampled around the engine, whatever it is: a run of two generator processes, each step of
    a capacity search and a watch all have the reference server's figures on their records' clock, and this host's
    GPUs (NVML, a stand-in library here) sampled in latbench's own process."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    loaded = load_scenario(write_scenario(tmp_path, REFERENCE))
    ran = run_scenario(loaded, out=str(tmp_path / "run"), opts=EngineOptions(processes=2))
    _, found = run_capacity(loaded, [parse_slo("latency.p99 < 5s")], 4, 8, 2.0, 0.0, out=str(tmp_path / "cap"))
    watched = watch_scenario(loaded, WatchSettings(qps=8, duration=2.5, port=free_port()), out=str(tmp_path / "w"))
    dirs = [ran.rundir.path / ran.targets[0].dir] + [Path(tmp_path / "cap").glob(f"*/{s.dir}").__next__()
                                                      for s in found.steps]
    dirs.append(watched.rundir.path / watched.targets[0].dir)
    assert len(dirs) == 4, dirs  # the run, two steps (4 and 8 req/s), the watch
    for tdir, phase in zip(dirs, ["main", "step", "step", "watch"]):
        summary = json.loads((tdir / "summary.json").read_text())
        t = summary["telemetry"]
        assert t["measured"] and t["engine"] == "refserver" and not t.get("notes"), (tdir, t)
        assert (tdir / "telemetry.csv").is_file() and t["gpu"] == "nvml" and t["gpu_samples"] >= 2
        gpu = t["phases"][phase]["quantities"]["gpu.utilization"]
        assert gpu["mean"] == pytest.approx(0.75) and gpu["source"] == "nvml:gpu_utilization_percent"
        df = records_frame(read_records(tdir / "requests.parquet")) if (tdir / "requests.parquet").exists() else \
            records_frame(read_segments(tdir))
        assert_server_counted_the_records(tdir, t, phase, df)
        if tdir == dirs[0]:
            assert set(df["worker"]) == {0, 1}  # two processes sent the run's load
