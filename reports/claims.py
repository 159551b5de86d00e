"""A comparison of two numbers, said as a claim a reader can trust: a ratio comes with its interval, or with the
reason it has none in the same sentence, and a ratio whose interval holds 1 says "no clear difference".

The interval of a ratio of two percentiles is :func:`loadgen.analysis.headline.ratio`'s: from the ends of the two
95% intervals, so it holds with at least 90% confidence (docs/explanation/statistics.md). A mean or a rate carries no
interval here, and a percentile of too few samples none either; the claim then says which.
"""

from __future__ import annotations

import math

from loadgen.analysis.headline import ratio
from loadgen.records.results import Percentile
from reports import fmt

NEAR = 0.05  # without an interval, a ratio within 5% of 1 is said as "within 5%", not as higher or lower


def includes_one(ci) -> bool:
    """Whether a ratio's interval ``[lo, hi]`` holds 1 (no clear difference)."""
    lo, hi = (fmt.as_float(x) for x in ci)
    return lo is not None and hi is not None and lo <= 1 <= hi


def interval_of(ci, too_few: bool | None) -> list | None:
    """A percentile's interval as a ratio may use it: none when it has too few samples for one."""
    return None if too_few or not ci else list(ci)


def ratio_claim(base: tuple, other: tuple, what: str = "", lower_is_better: bool = True, why_none: str = "") -> str:
    """``other`` against ``base`` (each ``(value, interval or None)``), as a claim: '2.1x lower p99 (interval
    [1.5x, 2.9x])', 'no clear difference in p99 (ratio 1.1x, interval [0.8x, 1.5x])', '1.4x lower mean (no
    interval: a mean has none)'; '' when either value is missing or not positive (nothing to claim).

    ``lower_is_better``: the words are lower/higher (times), else less/more (rates). ``why_none``: why there is no
    interval, said when there is none."""
    r = ratio(Percentile(value=other[0], ci=other[1]), Percentile(value=base[0], ci=base[1]))
    v = fmt.as_float(r.value)
    if v is None or v <= 0 or math.isinf(v) or (fmt.as_float(base[0]) or 0) <= 0:
        return ""
    what = f" {what}" if what else ""
    ci = r.ci
    if ci and includes_one(ci):
        return f"no clear difference{' in' + what if what else ''} (ratio {fmt.times(v)}, interval {fmt.ci(ci, 'x')})"
    up = v >= 1
    word = ("higher" if up else "lower") if lower_is_better else ("more" if up else "less")
    factor = v if up else 1 / v
    if ci:
        lo, hi = (fmt.as_float(x) for x in ci)
        bounds = [lo, hi] if up else [1 / hi if hi else math.inf, 1 / lo if lo else math.inf]
        return f"{fmt.times(factor)} {word}{what} (interval {fmt.ci(bounds, 'x')})"
    why = why_none or "no interval"
    if abs(factor - 1) < NEAR:
        return f"within {NEAR:.0%}{' in' + what if what else ''} ({why})"
    return f"{fmt.times(factor)} {word}{what} ({why})"
