"""Arrival schedules are pure: tables of plans in, send times out; no event loop, no sleeping."""

import numpy as np
import pytest

from loadgen.schedule.arrivals import PhasePlan, arrivals


def times(plan, seed=0, burstiness=1.0):
    chunks = list(arrivals(plan, seed, burstiness))
    return np.concatenate(chunks) if chunks else np.empty(0)


@pytest.mark.parametrize(
    "arrival,rate,duration",
    [("constant", 100, 10), ("poisson", 1000, 10), ("poisson", 50, 200), ("gamma", 200, 50)],
)
def test_rate_is_honoured(arrival, rate, duration):
    t = times(PhasePlan(0, "p", 0.0, duration, rate, rate, arrival=arrival))
    assert len(t) == pytest.approx(rate * duration, rel=0.03)
    assert np.all(np.diff(t) >= 0)
    assert t[0] >= 0 and t[-1] < duration


def test_poisson_rate_within_3_percent_over_10000_arrivals():
    for seed in range(5):
        t = times(PhasePlan(0, "p", 0.0, 100.0, 100.0, 100.0, arrival="poisson"), seed)
        assert len(t) == pytest.approx(10_000, rel=0.03)
        gaps = np.diff(t)
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 4.0])
def test_gamma_burstiness_gives_its_coefficient_of_variation(burstiness):
    t = times(PhasePlan(0, "p", 0.0, 200.0, 100.0, 100.0, arrival="gamma"), 3, burstiness)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.06)


def test_constant_is_exactly_periodic_from_the_phase_start():
    t = times(PhasePlan(1, "p", 5.0, 6.0, 10.0, 10.0, arrival="constant"))
    assert np.allclose(t, 5.0 + np.arange(10) / 10)


def test_same_seed_same_schedule_other_seed_other_schedule():
    plan = PhasePlan(0, "p", 0.0, 10.0, 100.0, 100.0, arrival="poisson")
    assert np.array_equal(times(plan, 7), times(plan, 7))
    assert not np.array_equal(times(plan, 7)[:50], times(plan, 8)[:50])


def test_linear_ramp_rate_follows_the_ramp():
    plan = PhasePlan(0, "ramp", 0.0, 100.0, 10.0, 200.0, arrival="constant")
    t = times(plan)
    assert len(t) == pytest.approx(0.5 * (10 + 200) * 100, rel=0.001)
    for lo in (0, 50, 90):  # arrivals in a 10 s window ~ integral of the rate there
        n = np.sum((t >= lo) & (t < lo + 10))
        expected = 10 * (plan.rate_at(lo) + plan.rate_at(lo + 10 - 1e-9)) / 2
        assert n == pytest.approx(expected, rel=0.02)


def test_phases_are_placed_at_their_start_and_max_requests_caps():
    t = times(PhasePlan(2, "p", 30.0, 40.0, 50.0, 50.0, arrival="poisson", max_requests=25))
    assert len(t) == 25 and t[0] >= 30.0


def test_closed_loop_and_zero_rate_phases_have_no_schedule():
    assert len(times(PhasePlan(0, "c", 0.0, 10.0, concurrency=4))) == 0
    assert len(times(PhasePlan(0, "z", 0.0, 10.0, 0.0, 0.0))) == 0


def test_large_schedules_come_in_chunks():
    chunks = list(arrivals(PhasePlan(0, "p", 0.0, 10.0, 20_000.0, 20_000.0, arrival="poisson"), 0, 1.0, chunk=50_000))
    assert len(chunks) >= 4 and all(len(c) <= 50_000 for c in chunks)
