"""--fail-fast's rule, table-driven: an objective is given up only once its breaches exceed what it allows."""

import math

import pytest

from loadgen.engine.failfast import FAIL_FAST_SLACK, FailFast
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import PhasePlan

# an unrecorded open phase of 100 arrivals expected (10 s at 10 req/s) and a recorded one of 200
PLANS = [PhasePlan(0, "warm", 0.0, 10.0, 10.0, 10.0, recorded=False),
         PhasePlan(1, "main", 10.0, 30.0, 10.0, 10.0)]
CLOSED = PhasePlan(2, "closed", 30.0, 40.0, concurrency=4)


def feed(ff: FailFast, n: int, *, phase=1, ok=True, latency=0.1, ttft=0.05, service=0.09) -> int:
    """Observe n identical requests; the index of the one after which fail-fast fired, or -1."""
    recorded = phase != 0
    for i in range(n):
        if ff.observe(phase, recorded, ok, latency, ttft, service):
            return i
    return -1


@pytest.mark.parametrize("slo, kw, n, fires_at", [
    # p99 of 200 allows 2 slow requests; slack 1.1 and 3 more: the 6th slow one (2.2 + 3 < 6) is certain
    ("latency.p99 < 300ms", {"latency": 0.5}, 20, 5),
    ("latency.p99 < 300ms", {"latency": 0.2}, 200, -1),  # fast: never
    ("latency.p50 < 300ms", {"latency": 0.5}, 200, 113),  # 100 allowed: fires past 100 * 1.1 + 3
    ("ttft.p99 < 100ms", {"ttft": 0.2}, 20, 5),
    ("service_time.p99 < 100ms", {"service": 0.2}, 20, 5),
    ("error_rate < 1%", {"ok": False}, 20, 5),  # 2 errors allowed
    ("latency.p99 < 300ms", {"ok": False, "latency": math.nan}, 50, -1),  # failures have no latency
    ("latency.mean < 300ms", {"latency": 0.5}, 200, -1),  # a mean is never certain from counts
    ("latency.p99 > 300ms", {"latency": 0.1}, 200, -1),  # only upper bounds are watched
    ("main: latency.p99 < 300ms", {"latency": 0.5}, 20, 5),  # scoped to the phase it is fed
])
def test_when_an_objective_is_given_up(slo, kw, n, fires_at):
    ff = FailFast([parse_slo(slo)], PLANS, "t")
    assert feed(ff, n, **kw) == fires_at
    assert (ff.breached == parse_slo(slo).expr) == (fires_at >= 0)


@pytest.mark.parametrize("slo, phase", [
    ("warm: latency.p99 < 300ms", 0),  # an unrecorded phase never counts
    ("closed: latency.p99 < 300ms", 2),  # closed loop: the total is unknown, nothing to be certain of
    ("latency.p99 < 300ms", 1),  # a run with a closed-loop phase: its total is unknown too
    ("other/main: latency.p99 < 300ms", 1),  # scoped to another target
])
def test_objectives_that_are_not_watched(slo, phase):
    ff = FailFast([parse_slo(slo)], PLANS + [CLOSED], "t")
    assert feed(ff, 100, phase=phase, latency=5.0) == -1 and ff.breached is None


def test_a_phase_scoped_objective_ignores_other_phases():
    ff = FailFast([parse_slo("main: latency.p99 < 300ms")], PLANS + [PhasePlan(2, "late", 30, 40, 10, 10)], "t")
    assert feed(ff, 50, phase=2, latency=5.0) == -1


def test_slack_is_what_the_rule_allows_beyond_the_budget():
    ff = FailFast([parse_slo("error_rate < 10%")], PLANS, "t", slack=2.0)  # 20 allowed, * 2 + 3 = 43
    assert feed(ff, 100, ok=False) == 43
    assert FAIL_FAST_SLACK == pytest.approx(1.1)
