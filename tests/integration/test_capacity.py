"""Capacity search against a server whose capacity is known: one request at a time, 20 ms each (50 req/s)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from loadgen.analysis.capacity import Step, headline, judge, knee, step_objectives
from loadgen.engine.base import EngineResult
from loadgen.records.results import Summary
from loadgen.records.rundir import REQUESTS, RunDir
from loadgen.records.schema import RecordWriter
from loadgen.run.capacity import find_capacity
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import plan_phases
from tests.helpers import run, write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def scenario(url, qps=10):
    return f"""
    name: cap
    target: {{url: "{url}", stream: false}}
    load:
      arrival: poisson
      expected_qps: 20
      phases:
        - {{name: steady, duration: 4s, qps: {qps}}}
    slo: ["steady: latency.p99 < 150ms"]  # scoped to the phase: each capacity step stands in for it
    """


def managed(qps=10):
    """The scenario against a known server that latbench starts (a `command:` target), one request at a time,
    20 ms each: M/D/1 at 50 req/s, p99 < 150 ms up to roughly 40 req/s. Started by latbench, its CPU waits are
    sampled: on a busy host the search or run is invalid (exit 3) rather than a capacity found too low."""
    command = (f'{{command: {{run: ["{sys.executable}", "-m", "tests.servers", "--delay", "0.02", "--slots", "1", '
               '"--port", "{port}"], url: "http://127.0.0.1:{port}/v1", ready_url: "http://127.0.0.1:{port}/v1/models"}')
    return scenario("x", qps).replace('{url: "x", stream: false}', command + ", stream: false}")


@pytest.mark.alone  # timing-sensitive (conftest.py); the tests below it are not: a refusal and the rules
def test_capacity_brackets_the_known_capacity_and_steady_runs_agree(tmp_path):
    path = write_scenario(tmp_path, managed())
    r = subprocess.run(LATBENCH + ["capacity", str(path), "--min", "20", "--max", "200", "--step-duration", "3s",
                                   "--warmup", "0.5s", "--tolerance", "15%", "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    (rd,) = list((tmp_path / "runs").iterdir())
    result = json.loads((rd / "capacity.json").read_text())
    lo, hi = result["bracket"]
    assert 20 <= lo < hi <= 60 and hi / lo <= 1.16
    assert result["headroom"] == pytest.approx(lo / 20 - 1)
    assert "capacity:" in r.stdout and (rd / "report.html").is_file()
    # every step with enough requests carries the sectioned interval of its p99 objective, around its p99
    sectioned = [json.loads(p.read_text())["slo"][0] for p in rd.glob("qps-*/summary.json")]
    sectioned = [(r["value"], r["ci_sectioned"]) for r in sectioned if r["ci_sectioned"] is not None]
    assert sectioned and all(lo <= v <= (float(hi)) for v, (lo, hi) in sectioned)
    html = (rd / "report.html").read_text()
    assert "Latency–throughput curve" in html and f"{lo:.4g}" in html
    # the acceptance rule: a steady run at 90% of the found rate passes, at 130% it fails
    ok, s_ok, _ = run(tmp_path / "at90", managed(qps=round(0.9 * lo, 2)))
    bad, s_bad, _ = run(tmp_path / "at130", managed(qps=round(1.3 * lo, 2)))
    assert ok.exit_code == 0, ok.reasons
    assert bad.exit_code == 1, bad.reasons


def test_capacity_refuses_an_unbounded_rate_at_a_remote_target(tmp_path):
    path = write_scenario(tmp_path, scenario("http://203.0.113.7/v1"))
    r = subprocess.run(LATBENCH + ["capacity", str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and "--max" in r.stderr


@pytest.mark.parametrize(
    "points,expected",
    [([(10, 0.05), (20, 0.05), (40, 0.06), (60, 0.2), (70, 1.5)], 40),
     ([(10, 0.05), (20, 0.052), (40, 0.05)], None)],
)
def test_knee_is_where_p99_starts_to_climb(points, expected):
    steps = [Step(q, True, q, p / 2, p, None, 0.0, False) for q, p in points]
    assert knee(steps) == expected


def test_objectives_scoped_to_phases_apply_to_every_step():
    slos = [parse_slo(t) for t in ("at_100: latency.p99 < 500ms", "at_120: latency.p99 < 500ms", "error_rate < 0.1%",
                                   "at_120: ttft.p90 < 1s")]
    assert [(s.expr, s.scope) for s in step_objectives(slos)] == [
        ("latency.p99 < 500ms", None), ("error_rate < 0.1%", None), ("ttft.p90 < 1s", None)]


def _summary(value, ci, ci_sectioned, achieved=10.0) -> Summary:
    t = list(range(10))
    return Summary.model_validate({
        "slo": [{"expr": "latency.p99 < 500ms", "metric": "latency", "stat": "p99", "op": "<", "threshold": 0.5,
                 "scope": None, "applies": True, "value": value, "ci": ci, "ci_sectioned": ci_sectioned,
                 "passed": value < 0.5}],
        "generator_limited": False, "notes": [],
        "phases": {"step": {"sent_qps": 10.0, "achieved_qps": achieved, "start": 0.0, "end": 10.0}},
        "timeseries": {"t": t, "latency_p50": [0.1] * 10, "in_flight": [2] * 10},
    })


@pytest.mark.parametrize("value,ci,sectioned,passed,unsure", [
    (0.40, [0.38, 0.42], [0.35, 0.45], True, False),   # met, whole interval below: holds
    (0.45, [0.43, 0.47], [0.38, 0.53], False, True),   # met, but the sectioned interval reaches over: unsure
    (0.55, [0.53, 0.57], [0.46, 0.64], False, True),   # missed, but the interval reaches under: unsure
    (0.70, [0.68, 0.72], [0.60, 0.80], False, False),  # missed beyond doubt
    (0.45, [0.43, 0.47], None, True, False),           # too few samples to section: the order-statistic one
])
def test_a_step_is_unsure_only_while_an_interval_straddles_the_objective(value, ci, sectioned, passed, unsure):
    ok, reasons, doubt = judge(_summary(value, ci, sectioned), 10.0)
    assert (ok, doubt) == (passed, unsure)
    assert bool(reasons) == (not passed)


def test_a_step_that_failed_something_else_is_not_unsure():
    ok, reasons, doubt = judge(_summary(0.45, [0.43, 0.47], [0.38, 0.53], achieved=5.0), 10.0)
    assert not ok and not doubt and any("completed 5.0 req/s" in r for r in reasons)


def _lagging_steps(lag_from_qps: float):
    """A capacity step's ``run_step`` that sends nothing: it writes a step's records as a generator would, answers
    50 ms each (lognormal), sent on time below ``lag_from_qps`` and 50 ms late from it (the send lag a saturated
    generator shows: as large as the latency itself)."""
    from benchmarks.report_speed import _batch

    rng = np.random.default_rng(1)

    def run_step(step_loaded, tdir):
        step = plan_phases(step_loaded.scenario.load)[-1]
        n = int(step.duration * step.rate_start)
        sched = np.linspace(step.start, step.end, n, endpoint=False)
        batch = _batch(rng, sched, np.full(n, step.index), np.ones(n, bool), 0.05, 4, 0.0)
        lag = 0.05 if step.rate_start >= lag_from_qps else 0.0002
        batch = batch.set_column(batch.schema.get_field_index("sent"), "sent", pa.array(sched + lag))
        w = RecordWriter(tdir / REQUESTS)
        w.write(batch)
        w.close()
        return EngineResult(t0=0.0, wall_start=0.0, duration=step.end, requests=n, interrupted=False,
                            cpu_seconds=0.1 * step.end)

    return run_step


def test_a_first_step_the_generator_could_not_drive_makes_the_search_invalid(tmp_path):
    """The first step's send lag is as large as its latency: nothing held, and nothing says the target failed. The
    search is invalid (capacity.json's generator_limited), not "even 20 req/s breaks the SLOs"."""
    loaded = load_scenario(write_scenario(tmp_path, scenario("http://127.0.0.1:9/v1")))
    rd = RunDir.create(str(tmp_path / "runs"), "cap", exact=True)
    cap = find_capacity(loaded, _lagging_steps(0), rd, [parse_slo("latency.p99 < 150ms")], 20, 80, 2.0, 0.0)
    assert cap.complete is False and cap.max_sustainable_qps is None and not cap.limited_by_generator
    assert cap.generator_limited.startswith("step qps-20: generator-limited (send lag p99 ")
    assert cap.invalid_reason == cap.generator_limited
    (step,) = cap.steps
    assert not step.passed and step.reasons == [step.generator_limited]


def test_a_later_step_the_generator_could_not_drive_bounds_the_capacity_from_below():
    """Steps at 20 and 40 req/s hold; at 80 the generator falls behind: the target holds at least 40 req/s, and
    the search is an answer (complete), not invalid."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        loaded = load_scenario(write_scenario(Path(d), scenario("http://127.0.0.1:9/v1")))
        rd = RunDir.create(str(Path(d) / "runs"), "cap", exact=True)
        cap = find_capacity(loaded, _lagging_steps(60), rd, [parse_slo("latency.p99 < 150ms")], 20, 80, 2.0, 0.0,
                            tolerance=1.0)
    assert cap.complete is True and cap.generator_limited is None and cap.invalid_reason is None
    assert cap.max_sustainable_qps == 40 and cap.first_failing_qps == 80 and cap.limited_by_generator
    assert "the load generator, not the target, fell behind" in headline(cap)
