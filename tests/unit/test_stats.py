"""Percentiles are exact nearest-rank values with distribution-free intervals."""

import math

import numpy as np
import pytest

from loadgen.analysis.stats import describe, nearest_rank, percentile, quantile_ci_ranks, sectioned_ci


@pytest.mark.parametrize(
    "data,p,expected",
    [([1, 2, 3, 4, 5], 50, 3), ([1, 2, 3, 4], 50, 2), ([1, 2, 3, 4], 75, 3), ([5], 99, 5),
     (list(range(1, 101)), 99, 99), (list(range(1, 1001)), 99.9, 999), (list(range(1, 11)), 100, 10)],
)
def test_nearest_rank_returns_an_observed_value(data, p, expected):
    assert nearest_rank(np.array(data, dtype=float), p) == expected


@pytest.mark.parametrize("n,q,ranks", [(100, 0.5, (40, 61)), (1000, 0.99, (983, 997))])
def test_interval_ranks_match_exact_binomial_sums(n, q, ranks):
    lo, hi = quantile_ci_ranks(n, q)
    assert (lo, hi) == ranks  # checked against scipy.stats.binom


def test_interval_covers_the_true_quantile_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    true_p99 = -math.log(0.01)  # exponential(1)
    hits = 0
    for _ in range(400):
        x = np.sort(rng.exponential(1.0, 2000))
        lo, hi = percentile(x, 99)["ci"]
        hits += lo <= true_p99 <= hi
    assert 0.92 <= hits / 400 <= 0.99


def test_too_few_samples_is_flagged():
    x = np.sort(np.random.default_rng(0).exponential(1, 500))
    assert percentile(x, 99.9)["too_few_samples"]
    assert not percentile(x, 50)["too_few_samples"]


def test_describe_ignores_nan_and_carries_infinity():
    d = describe(np.array([0.1, np.nan, 0.2, np.inf]))
    assert d["n"] == 3 and d["max"] == "inf" and d["mean"] == "inf"
    assert d["percentiles"]["p50"]["value"] == 0.2


def _queue_sojourns(rng, n: int, rho: float = 0.8) -> np.ndarray:
    """Times in an M/M/1 queue (Lindley's recursion), in arrival order: neighbours are strongly dependent."""
    gaps, service = rng.exponential(1.0, n), rng.exponential(rho, n)
    wait, cur = np.empty(n), 0.0
    for i in range(n):
        cur = max(0.0, cur + service[i - 1] - gaps[i]) if i else 0.0
        wait[i] = cur
    return wait + service


def test_sectioned_interval_covers_a_queues_percentile_where_the_order_statistic_one_does_not():
    rng = np.random.default_rng(3)
    true_p90 = np.quantile(_queue_sojourns(rng, 400_000), 0.9)
    order_hits = sectioned_hits = 0
    for _ in range(150):
        x = _queue_sojourns(rng, 3000)
        lo, hi = percentile(np.sort(x), 90)["ci"]
        order_hits += lo <= true_p90 <= hi
        lo, hi = sectioned_ci(x, 90, 5)
        sectioned_hits += lo <= true_p90 <= hi
    assert order_hits / 150 < 0.4  # assumes independence: far too narrow for a queue
    assert sectioned_hits / 150 >= 0.8


def test_sectioned_interval_on_independent_samples_is_about_95_percent():
    rng = np.random.default_rng(4)
    true_p90 = -math.log(0.1)
    hits = sum(lo <= true_p90 <= hi for lo, hi in (sectioned_ci(rng.exponential(1.0, 1000), 90, 5) for _ in range(300)))
    assert 0.88 <= hits / 300 <= 0.99


def test_sectioned_interval_edges():
    x = np.arange(1, 201, dtype=float)
    assert sectioned_ci(x[:49], 50, 5) is None  # fewer than 10 samples a section
    lo, hi = sectioned_ci(x, 50, 5)
    assert lo <= 100 <= hi and lo >= 1  # never below the smallest observation
    with_failures = np.concatenate([x, np.full(10, np.inf)])  # the last section holds every failure
    assert sectioned_ci(with_failures, 99, 5)[1] == math.inf
