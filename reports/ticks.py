"""Where an axis of a report's figure puts its ticks, and how their labels read (:mod:`reports.svg`).

A linear axis gets "nice" steps (1, 2, 2.5 or 5 times a power of ten), as many as fit: at most one per three font
sizes of its length across, per two along a y axis (matplotlib's rule), fewer while their labels would touch. A log
axis gets its decades, or 1, 2 and 5 of each decade where asked (:func:`reports.plots.ms_log_axis`) and where the
labels fit, else every other (third, ...) decade; unlabelled minor ticks between. One spanning too little for two
such ticks (30 to 80 ms) gets nice linear steps instead, as matplotlib's log locator does. Labels are plain numbers
(``0.5``, ``20``, ``1000``, ``0.001``), never ``10^3``; a linear axis' labels share one number of decimals.
"""

from __future__ import annotations

import math
from collections.abc import Callable

STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
#: The minor ticks of a log axis by default: 2..9 of each decade.
MINOR = (2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
MAX_BINS = 9

Fits = Callable[[list[float], list[str]], bool]


def clean(v: float) -> float:
    """``v`` rounded to 12 significant digits: 0.30000000000000004 is 0.3 (a tick's value, for its label)."""
    return float(f"{v:.12g}") if v else 0.0


def linear(lo: float, hi: float, bins: int) -> list[float]:
    """Ticks within [lo, hi] at a nice step, at most ``bins`` steps apart from end to end."""
    if not hi > lo:
        return [clean(lo)]
    raw = (hi - lo) / max(bins, 1)
    scale = 10.0 ** math.floor(math.log10(raw))
    step = next(s * scale for s in STEPS if s * scale >= raw * (1 - 1e-9))
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [clean(k * step) for k in range(first, last + 1)]


def linear_labels(values: list[float]) -> list[str]:
    """Labels with the fewest decimals that tell every tick's value exactly, the same for all (0.0, 0.5, 1.0)."""
    for d in range(0, 10):
        if all(abs(float(f"{v:.{d}f}") - v) <= 1e-9 * max(abs(v), 1e-300) for v in values):
            break
    return [f"{v:.{d}f}" for v in values]


def log_labels(values: list[float]) -> list[str]:
    return [f"{clean(v):g}" for v in values]


def pick_linear(lo: float, hi: float, bins: int, fits: Fits) -> tuple[list[float], list[str]]:
    """The most ticks of :func:`linear` (at most ``bins`` steps) whose labels ``fits`` accepts."""
    ticks = [lo]
    for n in range(max(1, min(bins, MAX_BINS)), 0, -1):
        ticks = linear(lo, hi, n)
        labels = linear_labels(ticks)
        if fits(ticks, labels) or len(ticks) <= 2:
            return ticks, labels
    return ticks, linear_labels(ticks)


def pick_log(lo: float, hi: float, bins: int, subs: tuple[float, ...], minor: tuple[float, ...],
             fits: Fits) -> tuple[list[float], list[str], list[float]]:
    """(major ticks, their labels, minor ticks) of a log axis over [lo, hi] (both > 0); see the module."""
    a, b = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1

    def ticks(stride: int, sub: tuple[float, ...]) -> list[float]:
        every = (clean(s * 10.0 ** d) for d in range(a, b + 1) if d % stride == 0 for s in sub)
        return [v for v in every if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]

    if len(ticks(1, (1.0,))) >= 2:
        tries = [(1, subs)] + ([(1, (1.0,))] if subs != (1.0,) else []) + [(s, (1.0,)) for s in (2, 3, 4, 5, 10, 20)]
    else:  # under two decades in view: 1, 2 and 5 of each, or every multiple, as many as fit
        tries = [(1, (1.0, 2.0, 5.0)), (1, (1.0, *MINOR))]
    for stride, sub in tries:
        major = ticks(stride, sub)
        if len(major) >= 2 and (fits(major, log_labels(major)) or stride == 20):
            small = ticks(1, (1.0, *minor)) if stride == 1 else ticks(1, (1.0,))
            return major, log_labels(major), [v for v in small if v not in set(major)]
    major, _ = pick_linear(lo, hi, bins, lambda t, labels: fits(t, log_labels(t)))
    major = [v for v in major if v > 0]
    return major, log_labels(major), [v for v in ticks(1, (1.0, *minor)) if v not in set(major)]
