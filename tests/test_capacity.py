"""Capacity search against a server whose capacity is known: one request at a time, 20 ms each (50 req/s)."""

import json
import subprocess
import sys

import pytest

from loadgen.capacity import knee, step_objectives, Step
from loadgen.slo import parse_slo
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


def test_capacity_brackets_the_known_capacity_and_steady_runs_agree(tmp_path, known_server):
    srv = known_server(delay=0.02, slots=1)  # M/D/1 at 50 req/s: p99 < 150 ms up to roughly 40 req/s
    path = write_scenario(tmp_path, scenario(srv.url))
    r = subprocess.run(LATBENCH + ["capacity", str(path), "--min", "10", "--max", "200", "--step-duration", "4s",
                                   "--warmup", "1s", "--tolerance", "15%", "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    (rd,) = list((tmp_path / "runs").iterdir())
    result = json.loads((rd / "capacity.json").read_text())
    lo, hi = result["bracket"]
    assert 20 <= lo < hi <= 60 and hi / lo <= 1.16
    assert result["headroom"] == pytest.approx(lo / 20 - 1)
    assert "capacity:" in r.stdout and (rd / "report.html").is_file()
    html = (rd / "report.html").read_text()
    assert "Latency–throughput curve" in html and f"{lo:.4g}" in html
    # the acceptance rule: a steady run at 90% of the found rate passes, at 130% it fails
    ok, s_ok, _ = run(tmp_path / "at90", scenario(srv.url, qps=round(0.9 * lo, 2)))
    bad, s_bad, _ = run(tmp_path / "at130", scenario(srv.url, qps=round(1.3 * lo, 2)))
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
