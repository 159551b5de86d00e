"""Per-run dots: a repeated run's values of one statistic, drawn as a small strip beside the number.

The report model computes where each dot goes (pixels within :data:`WIDTH`), on a scale shared by the
strips it is compared with (one column of a table), so the template only places them. Times and rates
are placed on a log scale when every value is positive: run-to-run noise is multiplicative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reports import fmt

WIDTH, HEIGHT, PAD = 76, 12, 4
#: the prefix of a cell's ``src`` that points into repeats.json rather than a target's summary.json
REPEATS_SRC = "repeats.json#"


@dataclass
class Strip:
    dots: list[float]  # x (px) of each run's value, in repetition order
    band: tuple[float, float] | None = None  # (x, width) in px of the between-run 95% interval
    mid: float | None = None  # x (px) of the median
    title: str = ""  # the values, for a tooltip
    width: int = WIDTH
    height: int = HEIGHT


def _num(v) -> float | None:
    """A finite number from a JSON value (None, NaN, 'inf' and other strings: None)."""
    if v is None or isinstance(v, str):
        return None
    x = float(v)
    return None if math.isnan(x) or math.isinf(x) else x


def strips_for(columns: list[list], bands: list | None = None, kind: str = "ms") -> list[Strip | None]:
    """One strip per entry of ``columns`` (each a list of per-run values; None where not measured), on
    one scale; ``bands``: each entry's interval [lo, hi] or None. An entry with no value gets None."""
    bands = bands or [None] * len(columns)
    every = [x for vals, b in zip(columns, bands) for x in [*vals, *(b or [])] if _num(x) is not None]
    if not every:
        return [None] * len(columns)
    log = all(_num(x) > 0 for x in every)
    f = (lambda x: math.log(x)) if log else (lambda x: x)  # noqa: E731
    lo, hi = min(f(_num(x)) for x in every), max(f(_num(x)) for x in every)
    span = hi - lo

    def x_of(v: float) -> float:
        if span <= 0:
            return WIDTH / 2
        return round(PAD + (f(v) - lo) / span * (WIDTH - 2 * PAD), 1)

    out = []
    for vals, band in zip(columns, bands):
        nums = [_num(v) for v in vals if _num(v) is not None]
        if not nums:
            out.append(None)
            continue
        srt = sorted(nums)
        med = srt[len(srt) // 2] if len(srt) % 2 else 0.5 * (srt[len(srt) // 2 - 1] + srt[len(srt) // 2])
        b = None
        if band and None not in [_num(x) for x in band]:
            x0, x1 = x_of(_num(band[0])), x_of(_num(band[1]))
            b = (x0, round(max(x1 - x0, 1.0), 1))
        out.append(Strip([x_of(v) for v in nums], b, x_of(med) if len(nums) > 1 else None,
                         "runs: " + ", ".join(fmt.fmt(v, kind) for v in nums)))
    return out
