"""The headline numbers' pure functions (loadgen.analysis.headline) on tables of known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen.analysis.headline import (
    architectures,
    burst_effects,
    headroom,
    in_flight_events,
    in_flight_peaks,
    ratio,
    samples_for_interval,
)
from loadgen.records.results import Percentile, Scope, Summary
from loadgen.schedule.arrivals import PhasePlan


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
    phases = {p.name: Scope(metrics={}) for p in plans}
    (b,) = burst_effects(df, plans, phases, [])
    assert b.in_flight.to_json() == {"baseline_peak": 1, "peak": 10, "drain_s": pytest.approx(2.1 + 8 * 0.03 - 2.0)}
    assert b.recovery is None and b.tail.ratio.to_json() == {"value": None, "ci": None}


@pytest.mark.parametrize("rows, peaks", [
    ([], [0, 0, 0]),
    ([(0.1, 0.2), (0.5, 0.6)], [1, 0, 0]),  # one at a time, done within the first second
    ([(0.5, 2.5)], [1, 1, 1]),  # one request across three seconds: in flight in each
    ([(0.2, 0.9), (0.3, 0.4), (0.35, 0.8), (1.0, 1.1)], [3, 1, 0]),  # three at 0.35 s, never at a second's end
    ([(0.5, 1.0), (1.0, 1.5)], [1, 1, 0]),  # one ends as the next starts: completions first, never two
])
def test_in_flight_peaks_are_each_seconds_most(rows, peaks):
    """What the chart of requests in flight draws: each second's peak, from exact send and completion times (a
    count at each second's end would miss a burst inside it, and then the chart would not show the headline's
    peak)."""
    df = pd.DataFrame(rows, columns=["sent", "done"], dtype=float)
    assert in_flight_peaks(df, np.arange(4.0)).tolist() == peaks


def test_headroom_picks_the_expected_rate_and_the_step_above_it_never_a_spike():
    p = lambda i, name, a, b, rate: PhasePlan(i, name, a, b, rate, rate)  # noqa: E731
    step = [p(0, "warm", 0, 1, 5), p(1, "at_100", 1, 2, 10), p(2, "at_120", 2, 3, 12)]
    step[0] = PhasePlan(0, "warm", 0, 1, 5, 5, recorded=False)
    hr = headroom(step, {}, [], 10.0)
    assert (hr.base.phase, hr.high.phase) == ("at_100", "at_120")
    spike = [p(0, "baseline", 0, 1, 10), p(1, "burst", 1, 2, 50), p(2, "recovery", 2, 3, 10)]
    assert headroom(spike, {}, [], 10.0) is None  # a spike is a burst, not a headroom step
    assert headroom([p(0, "only", 0, 1, 10)], {}, [], 10.0) is None
    sweep = [p(0, "qps-5", 0, 1, 5), p(1, "qps-10", 1, 2, 10), p(2, "qps-20", 2, 3, 20)]
    assert headroom(sweep, {}, [], None) is None  # no expected rate: a curve, not a headroom


def test_ratio_interval_comes_from_the_ends_of_both_intervals():
    a = Percentile(value=0.3, ci=[0.25, 0.4])
    b = Percentile(value=0.1, ci=[0.08, 0.125])
    r = ratio(a, b)
    assert r.value == pytest.approx(3.0) and r.ci == pytest.approx([0.25 / 0.125, 0.4 / 0.08])
    assert ratio(a, Percentile(value=0.1, ci=None)).ci is None
    assert samples_for_interval(99.0) == 368 and samples_for_interval(50.0) == 6


def test_architectures_names_the_knobs_that_differ():
    s = Summary.model_validate(
        {"overall": {"metrics": {"latency": {"n": 10, "mean": 0.1, "percentiles": {"p99": {"value": 0.2}}}}}})
    naive = {"arch": "naive", "preload": False, "warmup": False, "max_batch_size": 1, "cache_size": 0,
             "model": "tiny"}
    opt = {"arch": "optimized", "preload": True, "warmup": True, "max_batch_size": 32, "cache_size": 1024,
           "model": "tiny"}
    a = architectures([("naive", s, naive), ("optimized", s, opt)])
    assert a["knobs"] == {"preload": [False, True], "warmup": [False, True], "max_batch_size": [1, 32],
                          "cache_size": [0, 1024]}
    assert architectures([("naive", s, naive)]) is None


def test_a_recovery_phase_nobody_was_sent_in_is_not_a_recovery():
    """A run stopped during its spike (its server died) has empty windows after it: no recovery time, and it says
    the phase was not measured; one fast request after the spike makes the phase recovered from its start."""
    from loadgen.analysis.metrics import recovery
    from loadgen.scenario.slo import parse_slo

    plans = [PhasePlan(0, "base", 0.0, 2.0, 5.0, 5.0), PhasePlan(1, "spike", 2.0, 4.0, 50.0, 50.0),
             PhasePlan(2, "after", 4.0, 8.0, 5.0, 5.0)]
    slos = [parse_slo("latency.p99 < 500ms")]
    cols = ["scheduled", "latency", "ok", "aborted"]
    df = pd.DataFrame([(0.5, 0.1, True, False), (2.5, 0.9, True, False)], columns=cols)
    (rec,) = recovery(df, plans, slos)
    assert rec.measured is False and rec.recovered is False and rec.seconds is None
    df = pd.concat([df, pd.DataFrame([(6.2, 0.1, True, False)], columns=cols)], ignore_index=True)
    (rec,) = recovery(df, plans, slos)
    assert rec.measured and rec.recovered and rec.seconds == 0.0  # empty windows before it: good
