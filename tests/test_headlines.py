"""Each report's headline answers its scenario's question first, and its numbers are the summary's.

Real short runs: a burst and a 120% step against a server of known capacity, two targets of known
latency side by side, one steady target; every number of each headline (HTML and Markdown) is checked
against summary.json (or, for the architectures sentence, against loadgen.headline.architectures, where
its ratio is computed). Plus the pure functions on tables of known answers.
"""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadgen.headline import architectures, burst_effects, headroom, in_flight_events, ratio, samples_for_interval
from loadgen.loader import load_scenario
from loadgen.runner import run_scenario
from loadgen.schedule import PhasePlan
from reports import fmt, load_rundir, write_outputs
from reports.headline import choose, headline, text
from reports.model import get
from tests.conftest import ServerProcess
from tests.helpers import write_scenario


class Headline(HTMLParser):
    """The #headline section of a report: its numbered parts (data-src) and its text."""

    def __init__(self):
        super().__init__()
        self.depth, self.cells, self.text, self.imgs, self._open = 0, [], [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") == "headline":
            self.depth = 1
        elif self.depth and tag == "section":
            self.depth += 1
        if not self.depth:
            return
        if tag == "img":
            self.imgs.append(a.get("alt"))
        if "data-src" in a:
            self._open = {"target": a["data-target"], "src": a["data-src"], "fmt": a["data-fmt"], "text": ""}
            self.cells.append(self._open)

    def handle_endtag(self, tag):
        if self.depth and tag == "section":
            self.depth -= 1
        if tag in ("b", "span"):
            self._open = None

    def handle_data(self, data):
        if self.depth:
            self.text.append(data)
            if self._open is not None:
                self._open["text"] += data


def read_headline(path: Path) -> Headline:
    h = Headline()
    h.feed(path.read_text(encoding="utf-8"))
    return h


def formatted(value, kind: str) -> str:
    if kind.startswith("ci"):
        return fmt.ci(value, kind[3:] or "ms")
    return fmt.fmt(value, kind)


def check_cells(cells: list[dict], sources: dict) -> int:
    """Every headline number equals its source's value, formatted; returns how many were checked."""
    for c in cells:
        assert c["target"] in sources, c
        v = get(sources[c["target"]], c["src"])
        assert v is not None or c["text"] == fmt.DASH, c
        assert c["text"] == formatted(v, c["fmt"]), (c, v)
    return len(cells)


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


def test_burst_effects_on_a_known_timeline():
    """Ten requests in flight at once during a spike, back to one 0.4 s after it."""
    plans = [PhasePlan(0, "base", 0.0, 1.0, 5.0, 5.0), PhasePlan(1, "spike", 1.0, 2.0, 50.0, 50.0),
             PhasePlan(2, "after", 2.0, 4.0, 5.0, 5.0)]
    rows = [(0.1, 0.2), (0.5, 0.6)]  # base: one at a time
    rows += [(1.5 + i * 0.01, 2.1 + i * 0.03) for i in range(10)]  # overlapping: 10 in flight at 1.59
    rows += [(2.5, 2.6)]
    df = pd.DataFrame(rows, columns=["sent", "done"])
    t, n = in_flight_events(df)
    assert n.max() == 10 and n[-1] == 0
    phases = {p.name: {"metrics": {}} for p in plans}
    (b,) = burst_effects(df, plans, phases, [])
    assert b["in_flight"] == {"baseline_peak": 1, "peak": 10, "drain_s": pytest.approx(2.1 + 8 * 0.03 - 2.0)}
    assert b["recovery"] is None and b["tail"]["ratio"] == {"value": None, "ci": None}


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
    assert "The headroom holds: at_120: latency.p99 < 500ms measured" in words and "needs at least 368" in words and "80%" in words
    md = (step_run / "summary.md").read_text()
    assert f"**{fmt.ms(hr['high']['p99']['value'])}** ms, **{fmt.times(hr['ratio']['value'])}**" in md


def test_headroom_picks_the_expected_rate_and_the_step_above_it_never_a_spike():
    p = lambda i, name, a, b, rate: PhasePlan(i, name, a, b, rate, rate)  # noqa: E731
    step = [p(0, "warm", 0, 1, 5), p(1, "at_100", 1, 2, 10), p(2, "at_120", 2, 3, 12)]
    step[0] = PhasePlan(0, "warm", 0, 1, 5, 5, recorded=False)
    hr = headroom(step, {}, [], 10.0)
    assert (hr["base"]["phase"], hr["high"]["phase"]) == ("at_100", "at_120")
    spike = [p(0, "baseline", 0, 1, 10), p(1, "burst", 1, 2, 50), p(2, "recovery", 2, 3, 10)]
    assert headroom(spike, {}, [], 10.0) is None  # a spike is a burst, not a headroom step
    assert headroom([p(0, "only", 0, 1, 10)], {}, [], 10.0) is None


def test_ratio_interval_comes_from_the_ends_of_both_intervals():
    a = {"value": 0.3, "ci": [0.25, 0.4]}
    b = {"value": 0.1, "ci": [0.08, 0.125]}
    r = ratio(a, b)
    assert r["value"] == pytest.approx(3.0) and r["ci"] == pytest.approx([0.25 / 0.125, 0.4 / 0.08])
    assert ratio(a, {"value": 0.1, "ci": None})["ci"] is None
    assert samples_for_interval(99.0) == 368 and samples_for_interval(50.0) == 6


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
    a = architectures([(td.name, td.summary, td.meta.get("server") or {}) for td in run_.targets])
    row = a["rows"][1]
    assert row["label"] == "slow" and row["p99_vs_first"]["lower"] is False
    assert row["p99_vs_first"]["value"] > 1.5  # 90 ms against 30 ms (less on a loaded machine)
    h = read_headline(two_targets / "report.html")
    # two means, two p99s, the ratio, and its interval when both p99s have one (24 requests each: not here)
    assert check_cells(h.cells, {"@architectures": a}) == 5 + (row["p99_vs_first"]["ci"] is not None)
    assert all(get(a, f"rows/{i}/p99/value") == get(td.summary, "overall/metrics/latency/percentiles/p99/value")
               and get(a, f"rows/{i}/mean") == get(td.summary, "overall/metrics/latency/mean")
               for i, td in enumerate(run_.targets))
    words = "".join(h.text)
    assert words.count("fast: mean") == 1 and "slow: mean" in words and "higher than fast" in words
    # the side-by-side table says the same factor
    html = (two_targets / "report.html").read_text()
    assert f"{fmt.times(row['p99_vs_first']['value'])} higher p99" in html


def test_architectures_names_the_knobs_that_differ():
    s = {"overall": {"metrics": {"latency": {"n": 10, "mean": 0.1, "percentiles": {"p99": {"value": 0.2}}}}}}
    naive = {"arch": "naive", "preload": False, "warmup": False, "max_batch_size": 1, "cache_size": 0, "model": "tiny"}
    opt = {"arch": "optimized", "preload": True, "warmup": True, "max_batch_size": 32, "cache_size": 1024, "model": "tiny"}
    a = architectures([("naive", s, naive), ("optimized", s, opt)])
    assert a["knobs"] == {"preload": [False, True], "warmup": [False, True], "max_batch_size": [1, 32],
                          "cache_size": [0, 1024]}
    assert architectures([("naive", s, naive)]) is None


# -- steady -------------------------------------------------------------------------------------------

def test_a_single_steady_target_gets_its_p50_and_p99_with_intervals(two_targets, tmp_path):
    # one target of the two-target run on its own, as `latbench run` would report it
    run_ = load_rundir(two_targets)
    run_.targets = run_.targets[:1]
    h = headline(run_)
    assert h["kind"] == "steady"
    s = run_.targets[0].summary
    line = text(h["sentences"][0])
    assert fmt.ms(get(s, "overall/metrics/latency/percentiles/p50/value")) in line
    assert fmt.rate(get(s, "overall/achieved_qps")) + " req/s achieved" in line
    assert not math.isnan(np.float64(get(s, "overall/count")))
