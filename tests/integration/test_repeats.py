"""Repeated runs against real servers: folders, interleaving, repeats.json against each run's own summary,
the verdict judged over the runs, `gate` and `--baseline` on repeated RunDirs, fresh managed servers per
repetition, and `capacity --repeat`."""

import json
import subprocess
import sys

import pytest

from loadgen.analysis.repeated import STAT_KEYS, run_value
from loadgen.records.results import Summary
from tests.helpers import run, write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def scenario(fast_url: str, slow_url: str, runs: int = 3, slo: str = '["latency.p50 < 100ms", "error_rate < 1%"]'):
    return f"""
    name: repeated
    targets:
      - {{name: fast, url: "{fast_url}", stream: false}}
      - {{name: slow, url: "{slow_url}", stream: false}}
    load:
      arrival: poisson
      send_lag_threshold: 1s
      phases:
        - {{name: main, duration: 1s, qps: 30}}
    slo: {slo}
    repeat: {{runs: {runs}, pause: 0.1s}}
    """


def test_a_repeated_run_interleaves_keeps_every_run_and_is_judged_over_the_runs(tmp_path, known_server):
    fast, slow = known_server(delay=0.02), known_server(delay=0.2)
    res, _, _ = run(tmp_path, scenario(fast.url, slow.url))
    root = res.rundir.path
    meta = json.loads((root / "meta.json").read_text())
    order = [e["dir"] for e in meta["targets"]]
    assert order == ["fast-rep1", "slow-rep1", "fast-rep2", "slow-rep2", "fast-rep3", "slow-rep3"]
    assert [(e["group"], e["repetition"]) for e in meta["targets"]] == [(d.split("-")[0], int(d[-1])) for d in order]
    starts = [e["wall_start"] for e in meta["targets"]]
    assert starts == sorted(starts) and all(b - a >= 1.0 for a, b in zip(starts, starts[1:]))  # one after another
    assert meta["repeat"] == {"runs": 3, "pause": 0.1, "judge": "median"} and meta["complete"]
    for d in order:
        assert (root / d / "requests.parquet").is_file() and (root / d / "summary.json").is_file()
    rep = json.loads((root / "repeats.json").read_text())
    assert rep["order"] == order and rep["runs"] == 3 and "Student-t" in rep["method"]
    for group in ("fast", "slow"):
        sums = [Summary.model_validate_json((root / f"{group}-rep{k}" / "summary.json").read_text()) for k in (1, 2, 3)]
        for key in STAT_KEYS:
            values = [run_value(s, key) for s in sums]
            if all(v is None for v in values):
                assert key not in rep["targets"][group]["stats"]
                continue
            st = rep["targets"][group]["stats"][key]
            assert st["values"] == values and st["median"] == sorted(values)[1], key
        p50 = rep["targets"][group]["stats"]["latency.p50"]
        assert p50["ci"][0] <= p50["centre"] <= p50["ci"][1]
    # the servers sleep at least their delay (one-sided: a busy host only adds)
    assert 0.02 <= rep["targets"]["fast"]["stats"]["latency.p50"]["median"] < 0.1
    assert 0.2 <= rep["targets"]["slow"]["stats"]["latency.p50"]["median"]
    # the verdict: slow misses p50 < 100 ms over its runs; one reason, for the target, never per run
    assert res.exit_code == 1
    (reason,) = res.verdict.reasons
    assert reason.kind.value == "slo" and reason.target == "slow" and "the median of 3 runs" in reason.text
    assert json.loads((root / "meta.json").read_text())["verdict"]["reasons"][0]["target"] == "slow"
    # gate reads the same verdict back from the files alone
    g = subprocess.run(LATBENCH + ["gate", str(root)], capture_output=True, text=True)
    assert g.returncode == 1 and "slow: latency.p50 < 100ms" in g.stdout and "rep1" not in g.stdout
    # a baseline of the same servers, repeated: compared run against run, and nothing regressed beyond 2x
    again, _, _ = run(tmp_path / "again", scenario(fast.url, slow.url, slo="[]"), baseline=str(root),
                      max_regression=1.0)  # a loaded CI host can drift a whole session
    reg = json.loads((again.rundir.path / "regression.json").read_text())
    regressed = [(t, r["metric"], r["stat"], r.get("current_runs"), r.get("baseline_runs"), r.get("p_value"))
                 for t, rows in reg["targets"].items() for r in rows if r["regressed"]]
    assert reg["methods"] == {"fast": "between-run", "slow": "between-run"} and reg["passed"], regressed
    p50 = next(r for r in reg["targets"]["slow"] if r["metric"] == "latency" and r["stat"] == "p50")
    assert len(p50["current_runs"]) == 3 and len(p50["baseline_runs"]) == 3 and p50["test"] == "welch"
    assert again.exit_code == 0, again.reasons
    # and the report renders the between-run section from repeats.json
    subprocess.run(LATBENCH + ["report", str(root)], check=True, capture_output=True)
    html = (root / "report.html").read_text()
    assert 'id="between"' in html and 'id="fig-run-to-run"' in html and 'class="strip"' in html


def test_cli_repeat_flags_and_a_slower_build_fails_the_between_run_gate(tmp_path, known_server):
    fast, slower = known_server(delay=0.02), known_server(delay=0.08)  # 4x: clear of a busy host's stalls
    base = write_scenario(tmp_path / "b", scenario(fast.url, fast.url, runs=1, slo="[]"))
    cur = write_scenario(tmp_path / "c", scenario(slower.url, slower.url, runs=1, slo="[]"))
    # --no-report: the verdicts and the RunDirs are judged here, not report.html (test_a_repeated_run_interleaves...)
    r = subprocess.run(LATBENCH + ["run", str(base), "--quiet", "--no-report", "--repeat", "3", "--pause", "0s",
                                   "--out", str(tmp_path / "runs-b")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    (brd,) = list((tmp_path / "runs-b").iterdir())
    assert json.loads((brd / "meta.json").read_text())["repeat"]["runs"] == 3
    r = subprocess.run(LATBENCH + ["run", str(cur), "--quiet", "--no-report", "--repeat", "3", "--baseline", str(brd),
                                   "--max-regression", "20%", "--out", str(tmp_path / "runs-c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "fast: latency.p50 regressed" in r.stdout and "geometric means of 3 runs vs 3" in r.stdout
    r = subprocess.run(LATBENCH + ["run", str(cur), "--repeat", "2", "--fail-fast"], capture_output=True, text=True)
    assert r.returncode == 2 and "--fail-fast" in r.stderr
    r = subprocess.run(LATBENCH + ["run", str(cur), "--repeat", "2", "--pause", "soon"], capture_output=True, text=True)
    assert r.returncode == 2 and "--pause" in r.stderr


def test_each_repetition_starts_a_fresh_managed_server(tmp_path):
    text = """
    name: fresh
    target: {reference: {arch: optimized, model: tiny}, stream: false}
    workload: {prompts: {input_tokens: 4, output_tokens: 2, distinct: 100}}
    load:
      send_lag_threshold: 1s
      host_wait_limit: 1  # asserts fresh servers, not their latency: judged on neither the CPUs nor the clock
      phases:
        - {name: main, duration: 2s, concurrency: 1, max_requests: 3}
    repeat: {runs: 2}
    """
    res, _, _ = run(tmp_path, text)
    assert res.exit_code == 0, res.reasons
    meta = json.loads((res.rundir.path / "meta.json").read_text())
    entries = meta["targets"]
    assert [e["dir"] for e in entries] == ["target-rep1", "target-rep2"]
    urls = {e["url"] for e in entries}
    assert all(e["server"]["ready_s"] > 0 for e in entries) and len(urls) == 2  # two servers, two free ports


@pytest.mark.alone  # timing-sensitive (conftest.py)
def test_capacity_repeat_reports_each_bracket_and_their_spread(tmp_path, known_server):
    srv = known_server(delay=0.02, slots=1)  # 50 req/s at most
    path = write_scenario(tmp_path, f"""
    name: cap
    target: {{url: "{srv.url}", stream: false}}
    load:
      expected_qps: 10
      phases:
        - {{name: steady, duration: 2s, qps: 10}}
    slo: ["latency.p99 < 150ms"]
    """)
    r = subprocess.run(LATBENCH + ["capacity", str(path), "--min", "20", "--max", "80", "--step-duration", "1s",
                                   "--warmup", "0.5s", "--tolerance", "45%", "--repeat", "2",
                                   "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    (rd,) = list((tmp_path / "runs").iterdir())
    top = json.loads((rd / "capacity.json").read_text())
    assert top["repeats"] == 2 and [s["dir"] for s in top["searches"]] == ["search1", "search2"]
    held = [json.loads((rd / d / "capacity.json").read_text())["max_sustainable_qps"] for d in ("search1", "search2")]
    assert top["spread"]["held"]["values"] == held and all(h is not None and 10 <= h <= 60 for h in held)
    assert top["max_sustainable_qps"] == pytest.approx(sum(held) / 2)
    assert top["spread"]["held"]["ci"][0] <= top["max_sustainable_qps"] <= top["spread"]["held"]["ci"][1]
    assert r.returncode == 0, r.stdout + r.stderr
    assert "search 1 of 2" in r.stdout and "median of 2 searches" in r.stdout
    html = (rd / "report.html").read_text()
    assert "Spread between searches" in html and "search1/report.html" in html
    assert (rd / "search1" / "report.html").is_file() and (rd / "search2" / "report.html").is_file()


def test_ctrl_c_during_the_pause_between_runs_stops_before_the_next_and_keeps_the_runs_taken(tmp_path, known_server):
    import signal
    import time

    srv = known_server(delay=0.01)
    path = write_scenario(tmp_path, scenario(srv.url, srv.url, runs=3, slo="[]"))
    out = tmp_path / "runs"
    p = subprocess.Popen(LATBENCH + ["run", str(path), "--quiet", "--pause", "30s", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not list(out.glob("*/fast-rep1/summary.json")):  # the first run is done: the pause begins
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0]
        time.sleep(0.05)
    t = time.monotonic()
    p.send_signal(signal.SIGINT)  # inside the 30 s pause before slow-rep1
    text = p.communicate(timeout=30)[0]
    assert time.monotonic() - t < 10, "the pause was not cut short"
    assert p.returncode == 3, text
    (rd,) = list(out.iterdir())
    assert [d.name for d in rd.iterdir() if d.is_dir()] == ["fast-rep1"]
    meta = json.loads((rd / "meta.json").read_text())
    assert meta["complete"] is False and [e["dir"] for e in meta["targets"]] == ["fast-rep1"]
    assert json.loads((rd / "repeats.json").read_text())["order"] == ["fast-rep1"]
