"""CI gates: SLOs, fail-fast, baseline regressions and exit codes, against servers of known latency."""

import json
import subprocess
import sys
import time

import pytest

from tests.helpers import run, write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def scenario(url, duration="3s", qps=40, slo="[]", stream="false"):
    return f"""
    name: gate
    target: {{url: "{url}", stream: {stream}}}
    load:
      arrival: poisson
      phases:
        - {{name: main, duration: {duration}, qps: {qps}}}
    slo: {slo}
    """


@pytest.mark.alone  # timing-sensitive (conftest.py)
def test_same_server_twice_is_not_a_regression_slower_server_is(tmp_path, known_server):
    fast, slow = known_server(delay=0.1), known_server(delay=0.15)
    r1, _, _ = run(tmp_path / "a", scenario(fast.url))
    r2, _, _ = run(tmp_path / "b", scenario(fast.url), baseline=str(r1.rundir.path), max_regression=0.10)
    assert r2.exit_code == 0, r2.reasons
    reg = json.loads((r2.rundir.path / "regression.json").read_text())
    assert reg["passed"] and not any(r["regressed"] for r in reg["targets"]["target"])
    r3, _, _ = run(tmp_path / "c", scenario(slow.url), baseline=str(r1.rundir.path), max_regression=0.10)
    assert r3.exit_code == 1
    assert any("latency.p50 regressed" in reason and "CI" in reason for reason in r3.reasons)
    # a 50% slowdown is within a 60% allowance: not a failure, though significant
    r4, _, _ = run(tmp_path / "d", scenario(slow.url), baseline=str(r1.rundir.path), max_regression=0.60)
    p50 = next(r for r in json.loads((r4.rundir.path / "regression.json").read_text())["targets"]["target"]
               if r["metric"] == "latency" and r["stat"] == "p50")
    assert p50["significant"] and not p50["regressed"] and p50["ratio"] == pytest.approx(1.5, rel=0.1)
    assert r4.exit_code == 0
    # the gate command gives the same verdicts from the RunDirs alone
    g = subprocess.run(LATBENCH + ["gate", str(r3.rundir.path), "--baseline", str(r1.rundir.path)],
                       capture_output=True, text=True)
    assert g.returncode == 1 and "regressed" in g.stdout
    g = subprocess.run(LATBENCH + ["gate", str(r2.rundir.path)], capture_output=True, text=True)
    assert g.returncode == 0 and "PASSED" in g.stdout


@pytest.mark.alone  # timing-sensitive (conftest.py)
def test_fail_fast_stops_once_the_slo_cannot_be_met(tmp_path, known_server):
    srv = known_server(delay=0.05)
    t = time.perf_counter()
    res, s, df = run(tmp_path, scenario(srv.url, duration="20s", qps=20, slo="['latency.p90 < 20ms']"), fail_fast=True)
    assert time.perf_counter() - t < 12
    assert res.exit_code == 1 and any("--fail-fast" in r for r in res.reasons)
    assert s["complete"] is False and len(df) < 200


def test_error_rate_gate_and_exit_codes(tmp_path, known_server):
    srv = known_server(status=500)
    res, s, _ = run(tmp_path, scenario(srv.url, duration="1s", slo="['error_rate < 1%']"))
    assert res.exit_code == 1
    res, _, _ = run(tmp_path / "down", scenario("http://127.0.0.1:9/v1", duration="1s"))
    assert res.exit_code == 3


@pytest.mark.alone  # timing-sensitive (conftest.py)
def test_recovery_time_after_a_spike(tmp_path, known_server):
    srv = known_server(delay=0.01, stall_at=2.5, stall_for=1.5)  # the spike phase meets a stall
    text = f"""
    name: spike
    target: {{url: "{srv.url}", stream: false}}
    load:
      arrival: constant
      phases:
        - {{name: burst, duration: 3s, qps: 60}}
        - {{name: after, duration: 6s, qps: 30}}
    slo: ["after: latency.p99 < 200ms"]
    """
    res, s, _ = run(tmp_path, text)
    (rec,) = s["recovery"]
    assert rec["spike"] == "burst" and rec["phase"] == "after" and rec["recovered"]
    assert 0.5 <= rec["seconds"] <= 2.5  # the stall ends 1 s into 'after'


def test_usage_errors_exit_2(tmp_path):
    path = write_scenario(tmp_path, scenario("http://127.0.0.1:9/v1"))
    r = subprocess.run(LATBENCH + ["run", str(path), "--baseline", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "not a RunDir" in r.stderr
    r = subprocess.run(LATBENCH + ["run", str(path), "--max-regression", "lots"], capture_output=True, text=True)
    assert r.returncode == 2 and "--max-regression" in r.stderr


@pytest.mark.parametrize("damage", ["truncated", "missing", "meta_list"])
def test_a_broken_baseline_is_refused_before_any_traffic(tmp_path, damage):
    """Issue 13, item 5: a baseline whose requests.parquet was truncated was accepted, the whole load was sent,
    then a pyarrow traceback and exit 1. It is checked first: exit 2, a message naming the file, no request."""
    from tests.servers import KnownServer

    srv = KnownServer(delay=0.01).start()
    try:
        base, _, _ = run(tmp_path / "base", scenario(srv.url, duration="500ms", qps=20))
        rd = base.rundir.path
        records = rd / "target" / "requests.parquet"
        if damage == "truncated":
            records.write_bytes(records.read_bytes()[:200])
        elif damage == "missing":
            records.unlink()
        else:
            (rd / "meta.json").write_text("[1, 2]")
        sent = srv.requests
        path = write_scenario(tmp_path, scenario(srv.url, duration="3s", qps=20))
        out = tmp_path / "runs"
        r = subprocess.run(LATBENCH + ["run", str(path), "--baseline", str(rd), "--out", str(out)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "--baseline" in r.stderr
        assert ("requests.parquet" in r.stderr) if damage != "meta_list" else ("meta.json" in r.stderr)
        assert srv.requests == sent and not out.exists()  # nothing was sent, no RunDir was made
        g = subprocess.run(LATBENCH + ["gate", str(base.rundir.path), "--baseline", str(rd)], capture_output=True,
                           text=True, timeout=60)
        assert g.returncode == 2 and "Traceback" not in g.stderr, g.stderr
    finally:
        srv.stop()
