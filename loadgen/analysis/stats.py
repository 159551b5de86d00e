"""Exact percentiles with distribution-free confidence intervals (order statistics).

Nearest-rank: the p-th percentile of n sorted samples is x[ceil(p/100 * n)] (1-based), so every
reported value was observed. The 95% interval for the true quantile q is [x(l), x(u)], the order
statistics whose ranks bracket the Binomial(n, q) count of samples below the quantile: exact binomial
sums for n <= 20,000, the normal approximation above. When u would exceed n (or l fall below 1) the
sample is too small for the interval: ``too_few_samples`` is set (p99.9 of 500 samples means nothing).
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.units import json_num

CONFIDENCE = 0.95
_EXACT_MAX_N = 20_000


def rank(n: int, p: float) -> int:
    """The 1-based nearest rank of percentile ``p`` (0-100) among ``n`` samples."""
    return min(n, max(1, math.ceil(round(p * n / 100.0, 9))))  # round: 99.9 * 1000 / 100 is 999.0000000000001


def nearest_rank(sorted_x: np.ndarray, p: float) -> float:
    """Percentile ``p`` of sorted samples: an observed value (NaN when there are none)."""
    n = len(sorted_x)
    return float(sorted_x[rank(n, p) - 1]) if n else math.nan


def nearest_rank_unsorted(x: np.ndarray, p: float) -> float:
    """:func:`nearest_rank` of unsorted samples, by partial sort."""
    n = len(x)
    if n == 0:
        return math.nan
    k = rank(n, p) - 1
    return float(np.partition(x, k)[k])


def _binom_cdf(n: int, q: float) -> np.ndarray:
    """F(k) = P(Bin(n, q) <= k) for k = 0..n, computed in log space."""
    k = np.arange(n + 1)
    logfact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))  # log k!
    logpmf = logfact[n] - logfact[k] - logfact[n - k] + k * math.log(q) + (n - k) * math.log1p(-q)
    pmf = np.exp(logpmf - logpmf.max())
    pmf /= pmf.sum()
    return np.cumsum(pmf)


def quantile_ci_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """1-based ranks (l, u) with P(x(l) <= xi_q <= x(u)) >= confidence; may fall outside 1..n."""
    alpha = (1.0 - confidence) / 2.0
    if n <= _EXACT_MAX_N:
        cdf = _binom_cdf(n, q)  # cdf[k] = P(X <= k)
        # P(x(l) <= xi) = P(X >= l) = 1 - F(l-1) >= 1 - alpha  <=> F(l-1) <= alpha
        below = np.nonzero(cdf <= alpha)[0]
        lo = int(below[-1]) + 1 if below.size else 0
        # P(x(u) >= xi) = P(X <= u-1) = F(u-1) >= 1 - alpha
        above = np.nonzero(cdf >= 1.0 - alpha)[0]
        hi = int(above[0]) + 1 if above.size else n + 1
        return lo, hi
    z = 1.959963984540054 if confidence == 0.95 else _z(confidence)
    sd = math.sqrt(n * q * (1 - q))
    return math.floor(n * q - z * sd), math.ceil(n * q + z * sd) + 1


# Student's t, two-sided 95%, by degrees of freedom (1..10); the normal value beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def sectioned_ci(x_in_order: np.ndarray, p: float, sections: int = 5) -> tuple[float, float] | None:
    """95% interval of percentile ``p`` that holds when the samples are not independent (sectioning).

    The order-statistic interval of :func:`percentile` assumes independent samples. Requests sent
    through one queue are not: a burst slows every request behind it, so a run's latencies come in
    correlated stretches and its p99 varies from run to run far more than that interval says. Here
    the samples, in send order, are cut into ``sections`` consecutive stretches of equal count; the
    spread of the percentile between stretches estimates the variance of the whole run's
    percentile (Asmussen & Glynn, *Stochastic Simulation*, IV.5: sectioning, with the whole-run
    estimate as the centre): ``value +- t(sections-1) * sd / sqrt(sections)``. Infinite samples
    (failures counted as infinitely slow) make the upper end infinite when a section's percentile is.
    ``None`` when a stretch would hold fewer than 10 samples.
    """
    x = np.asarray(x_in_order, dtype=np.float64)
    x = x[~np.isnan(x)]
    if sections < 2 or x.size < 10 * sections:
        return None
    parts = [nearest_rank_unsorted(part, p) for part in np.array_split(x, sections)]
    value = nearest_rank_unsorted(x, p)
    if math.isinf(value) or any(math.isinf(v) for v in parts):
        return (value if math.isinf(value) else min(parts), math.inf)
    t = _T95[sections - 2] if sections - 1 <= len(_T95) else 1.959963984540054
    half = t * float(np.std(parts, ddof=1)) / math.sqrt(sections)
    return (max(value - half, float(x.min())), value + half)


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def percentile(sorted_x: np.ndarray, p: float) -> dict:
    """{'value', 'ci': [lo, hi] or None, 'too_few_samples'} for percentile ``p`` (0-100)."""
    n = len(sorted_x)
    value = nearest_rank(sorted_x, p)
    if n == 0:
        return {"value": None, "ci": None, "too_few_samples": True}
    lo, hi = quantile_ci_ranks(n, p / 100.0)
    too_few = lo < 1 or hi > n
    ci = [float(sorted_x[max(lo, 1) - 1]), float(sorted_x[min(hi, n) - 1])]
    return {"value": json_num(value), "ci": [json_num(ci[0]), json_num(ci[1])], "too_few_samples": bool(too_few)}


PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def pkey(p: float) -> str:
    """50.0 -> 'p50', 99.9 -> 'p99.9'."""
    return f"p{p:g}"


def describe(values: np.ndarray, percentiles=PERCENTILES) -> dict:
    """Count, mean, min, max and percentiles (with intervals) of a 1-D sample in seconds."""
    x = np.asarray(values, dtype=np.float64)
    x = np.sort(x[~np.isnan(x)])
    n = int(x.size)
    out = {"n": n, "mean": None, "min": None, "max": None, "percentiles": {}}
    if n:
        finite = x[np.isfinite(x)]
        out["mean"] = json_num(float(finite.mean())) if finite.size == n else "inf"
        out["min"], out["max"] = json_num(float(x[0])), json_num(float(x[-1]))
    for p in percentiles:
        out["percentiles"][pkey(p)] = percentile(x, p)
    return out


def stat_value(desc: dict, stat: str) -> float | None:
    """Read a statistic ('mean', 'max', 'p99', 'p99.9', any pNN) from a :func:`describe` result."""
    if stat in ("mean", "min", "max"):
        v = desc.get(stat)
    else:
        entry = desc["percentiles"].get(stat)
        v = entry["value"] if entry else None
    if v == "inf":
        return math.inf
    return v
