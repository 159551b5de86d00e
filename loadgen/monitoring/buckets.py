"""Histogram buckets for the metrics ``latbench watch`` serves, and quantiles read back from them.

latbench's own percentiles are exact (nearest-rank over every sample). A Prometheus histogram keeps only
counts per bucket, and ``histogram_quantile`` interpolates linearly inside the bucket the quantile falls in,
so its p99 is an estimate. One test made from buckets is exact all the same: with a bucket bound *on* an
objective's threshold ``T``, ``histogram_quantile(q) > T`` holds exactly when fewer than ``q`` of the
requests took at most ``T``, which is when the exact nearest-rank percentile is above ``T`` (a request of
exactly ``T`` aside). So every threshold of the scenario's objectives becomes a bucket bound
(:func:`bucket_bounds`), and :func:`bucket_quantile` is Prometheus' algorithm, for checking it.

Bounds are seconds.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from loadgen import metric_registry
from loadgen.scenario.slo import SLO

#: Bounds every histogram has (seconds): 0.5 ms to 2 minutes, about three a decade, denser where
#: latencies of inference APIs live (10 ms - 1 s); the article's alert threshold (500 ms) is one.
BASE_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25,
               0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)

#: Distribution metrics served as histograms, those the registry marks ``watch`` (send lag is a gauge: the probe's
#: own health, not a latency). A snapshot at import, for the alert rules; the exposition reads the registry.
HISTOGRAM_METRICS = metric_registry.watch_histograms()


def thresholds(slos: Iterable[SLO], metric: str) -> list[float]:
    """The thresholds (seconds) of the objectives on ``metric`` that a histogram can test: percentiles, max, min."""
    return sorted({s.threshold for s in slos if s.metric == metric and s.stat and s.stat != "mean"})


def bucket_bounds(slos: Iterable[SLO], metric: str) -> tuple[float, ...]:
    """Finite upper bounds (ascending, seconds) of ``metric``'s histogram: :data:`BASE_BOUNDS` and every
    threshold of an objective on it, with a bound above the highest threshold (so a quantile past it is read
    as above it, never as the threshold itself: Prometheus reports the highest finite bound for a quantile
    that falls in the ``+Inf`` bucket)."""
    ts = [t for t in thresholds(slos, metric) if t > 0]
    bounds = set(BASE_BOUNDS) | set(ts)
    if ts and max(ts) >= max(BASE_BOUNDS):
        bounds.add(2 * max(ts))
    return tuple(sorted(bounds))


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile``: ``buckets`` are (upper bound, cumulative count), ``+Inf`` last.

    Linear interpolation inside the bucket where rank ``q * count`` falls (from 0 in the first bucket); the
    highest finite bound when it falls in the ``+Inf`` bucket; NaN without observations."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    b = sorted(buckets)
    if len(b) < 2 or not math.isinf(b[-1][0]):
        return math.nan
    n = b[-1][1]
    if n == 0:
        return math.nan
    rank = q * n
    i = next(k for k, (_, c) in enumerate(b) if c >= rank)
    if i == len(b) - 1:
        return b[-2][0]
    if i == 0 and b[0][0] <= 0:
        return b[0][0]
    start, end, count = 0.0, b[i][0], b[i][1]
    if i > 0:
        start = b[i - 1][0]
        count -= b[i - 1][1]
        rank -= b[i - 1][1]
    return start + (end - start) * (rank / count)


def bucket_of(value: float, bounds: Sequence[float]) -> tuple[float, float]:
    """The bucket ``(lower, upper]`` holding ``value`` (lower 0 for the first; upper inf past the last bound)."""
    lo = 0.0
    for b in bounds:
        if value <= b:
            return lo, b
        lo = b
    return lo, math.inf
