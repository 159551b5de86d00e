"""Each report's headline answers its scenario's question first, and its numbers are the summary's.

Real short runs: a burst and a 120% step against a server of known capacity, two targets of known
latency side by side, one steady target; every number of each headline (HTML and Markdown) is checked
against summary.json (or, for the architectures sentence, against loadgen.headline.architectures, where
its ratio is computed). Plus the pure functions on tables of known answers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.analysis.headline import architectures
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from reports import fmt, load_rundir, write_outputs
from reports.headline import choose, headline, text
from reports.report_model import get
from tests.conftest import ServerProcess
from tests.helpers import check_cells, read_headline, write_scenario

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)


def run(tmp_path: Path, text_: str, **kw):
    loaded = load_scenario(write_scenario(tmp_path, text_))
    result = run_scenario(loaded, out=str(tmp_path / "runs"), **kw)
    write_outputs(result.rundir.path)
    return result.rundir.path


def summaries(path: Path) -> dict:
    return {td.name: td.summary for td in load_rundir(path).targets}


# -- burst ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def burst_run(tmp_path_factory):
    """Baseline 10/s, a spike to 80/s for 1 s, recovery 10/s against a server of capacity 40/s (2 slots of
    50 ms): about 40 requests queue in the spike and drain at 30/s."""
    srv = ServerProcess(delay=0.05, slots=2)
    try:
        yield run(tmp_path_factory.mktemp("burst"), f"""
        name: burst
        target: {{url: "{srv.url}", stream: false}}
        workload: {{prompts: {{input_tokens: 4, output_tokens: 2, distinct: 1000}}}}
        load:
          arrival: constant
          expected_qps: 10
          send_lag_threshold: 1s
          phases:
            - {{name: baseline, duration: 2s, qps: 100%}}
            - {{name: burst, duration: 1s, qps: 800%}}
            - {{name: recovery, duration: 4s, qps: 100%}}
        slo:
          - "recovery: latency.p99 < 150ms"
        """)
    finally:
        srv.stop()


def test_burst_headline_states_recovery_tail_peak_and_drain(burst_run):
    s = summaries(burst_run)["target"]
    (b,) = s["burst"]
    assert b["spike"] == "burst" and b["baseline"] == "baseline" and b["after"] == "recovery"
    fl = b["in_flight"]
    assert fl["baseline_peak"] <= 2 and 30 <= fl["peak"] <= 50  # ~40 queued at the spike's end
    assert 0.7 <= fl["drain_s"] <= 2.5  # 40 requests at a net 30/s
    rec = b["recovery"]
    assert rec["recovered"] and 0.5 <= rec["seconds"] <= 3.0 and rec["step_s"] == 0.5
    assert b["tail"]["ratio"]["value"] > 3
    assert b["tail"]["ratio"]["value"] == pytest.approx(b["tail"]["spike"]["value"] / b["tail"]["baseline"]["value"])
    h = read_headline(burst_run / "report.html")
    assert check_cells(h.cells, {"target": s}) >= 8
    words = "".join(h.text)
    assert "back under" in words and "Recovery rule" in words and "Over time" in h.imgs  # the marked time series
    srcs = {c["src"] for c in h.cells}
    assert {"burst/0/recovery/seconds", "burst/0/in_flight/peak", "burst/0/in_flight/drain_s",
            "burst/0/tail/ratio/value"} <= srcs
    html = (burst_run / "report.html").read_text()
    assert html.index('id="headline"') < html.index("<table")  # before any table
    md = (burst_run / "summary.md").read_text()
    assert f"**{fmt.fmt(rec['seconds'], 's')}** into recovery" in md
    assert f"peaked at **{fl['peak']}**" in md


# -- headroom (120%) ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def step_run(tmp_path_factory):
    srv = ServerProcess(delay=0.02)
    tmp = tmp_path_factory.mktemp("step")
    cap = tmp / "capacity_run"
    cap.mkdir()
    (cap / "capacity.json").write_text(json.dumps({"knee_qps": 30.0, "max_sustainable_qps": 28.0,
                                                   "first_failing_qps": 32.0, "slo": ["latency.p99 < 500ms"],
                                                   "target": {"name": "target"}}))
    try:
        yield run(tmp, f"""
        name: capacity_120
        target: {{url: "{srv.url}", stream: false}}
        workload: {{prompts: {{input_tokens: 4, output_tokens: 2, distinct: 1000}}}}
        load:
          arrival: poisson
          expected_qps: 20
          send_lag_threshold: 1s
          phases:
            - {{name: warmup, duration: 0.5s, qps: 50%, record: false}}
            - {{name: at_100, duration: 2s, qps: 100%}}
            - {{name: at_120, duration: 2s, qps: 120%}}
        slo:
          - "at_100: latency.p99 < 500ms"
          - "at_120: latency.p99 < 500ms"
          - error_rate < 1%
        """, capacity=str(cap))
    finally:
        srv.stop()


def test_headroom_headline_compares_120_with_100_and_places_it_on_the_capacity_curve(step_run):
    s = summaries(step_run)["target"]
    hr = s["headroom"]
    assert hr["base"]["phase"] == "at_100" and hr["high"]["phase"] == "at_120"
    assert hr["base"]["share"] == pytest.approx(1.0) and hr["high"]["share"] == pytest.approx(1.2)
    assert hr["holds"] is True and [o["expr"] for o in hr["objectives"]] == ["at_100: latency.p99 < 500ms",
                                                                            "at_120: latency.p99 < 500ms"]
    assert hr["high"]["p99"]["value"] == get(s, "phases/at_120/metrics/latency/percentiles/p99/value")
    assert hr["capacity"]["share_of_knee"] == pytest.approx(24.0 / 30.0)
    assert hr["high"]["p99"]["ci"] is None  # ~48 requests: too few for a p99 interval, and it says so
    assert choose(load_rundir(step_run)) == "headroom"
    h = read_headline(step_run / "report.html")
    assert check_cells(h.cells, {"target": s}) >= 8
    words = "".join(h.text)
    assert "The headroom holds: at_120: latency.p99 < 500ms measured" in words
    assert "needs at least 368" in words and "80%" in words
    md = (step_run / "summary.md").read_text()
    assert (f"**{fmt.ms(hr['high']['p99']['value'])}** ms against **{fmt.ms(hr['base']['p99']['value'])}** ms at "
            in md and f": **{fmt.times(hr['ratio']['value'])}**, with no interval: too few requests" in md)


# -- architectures ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_targets(tmp_path_factory):
    fast, slow = ServerProcess(delay=0.03), ServerProcess(delay=0.09)
    try:
        yield run(tmp_path_factory.mktemp("arch"), f"""
        name: architectures
        targets:
          - {{name: fast, url: "{fast.url}", stream: false}}
          - {{name: slow, url: "{slow.url}", stream: false}}
        workload: {{prompts: {{input_tokens: 4, output_tokens: 2, distinct: 1000}}}}
        load:
          send_lag_threshold: 1s
          phases:
            - {{name: main, duration: 1.5s, qps: 20}}
        """)
    finally:
        fast.stop()
        slow.stop()


def test_architectures_headline_is_the_articles_sentence(two_targets):
    run_ = load_rundir(two_targets)
    a = architectures([(td.name, td.result, td.meta.server.to_json()) for td in run_.targets])
    row = a["rows"][1]
    assert row["label"] == "slow" and row["p99_vs_first"]["lower"] is False
    assert row["p99_vs_first"]["value"] > 1.5  # 90 ms against 30 ms (less on a loaded machine)
    h = read_headline(two_targets / "report.html")
    # two means, two p99s (each from its summary), the ratio, and its interval when both p99s have one; without
    # one, why: how many requests each had and how many an interval needs (24 requests each: not here)
    sources = {"@architectures": a} | {td.name: td.summary for td in run_.targets}
    assert check_cells(h.cells, sources) == 5 + (1 if row["p99_vs_first"]["ci"] is not None else 3)
    assert all(get(a, f"rows/{i}/p99/value") == get(td.summary, "overall/metrics/latency/percentiles/p99/value")
               and get(a, f"rows/{i}/mean") == get(td.summary, "overall/metrics/latency/mean")
               for i, td in enumerate(run_.targets))
    words = "".join(h.text)
    assert words.count("fast: mean") == 1 and "slow: mean" in words and "higher than fast's (" in words
    if row["p99_vs_first"]["ci"] is None:
        n = [get(td.summary, "overall/metrics/latency/n") for td in run_.targets]
        assert f"(no interval: from {n[0]} and {n[1]} requests; a p99's 95% interval needs at least 368 each)" in words
    # the side-by-side table says the same factor, under slow's p99
    html = (two_targets / "report.html").read_text()
    assert f"{fmt.times(row['p99_vs_first']['value'])} higher (" in html


# -- steady -------------------------------------------------------------------------------------------

def test_a_single_steady_target_gets_its_p50_and_p99_with_intervals(two_targets, tmp_path):
    # one target of the two-target run on its own, as `latbench run` would report it
    run_ = load_rundir(two_targets)
    run_.targets = run_.targets[:1]
    h = headline(run_)
    assert h.kind == "steady"
    s = run_.targets[0].summary
    line = text(h.sentences[0])
    assert fmt.ms(get(s, "overall/metrics/latency/percentiles/p50/value")) in line
    assert fmt.rate(get(s, "overall/achieved_qps")) + " req/s achieved" in line
    assert not math.isnan(np.float64(get(s, "overall/count")))
