"""Goodput as the literature defines it (DistServe; vLLM's ``--goodput``): the requests that met explicit
per-request objectives, counted per phase and target.

A request is *good* when it succeeded and each bound of the scenario's ``goodput:`` block that applies to it
holds (``latency``, ``ttft``, ``ttfat``, ``tpot``, ``service_time`` at most the bound, in seconds). A metric a
request does not have (NaN: a bound on ttft for a request that was not streamed, tpot of a one-token answer)
does not disqualify it. Entries may be scoped like SLO lines; for each metric the most specific entry that
applies gives the bound (``target/phase`` over ``phase`` or ``target`` over unscoped; the tighter of two
equally specific ones). Nothing here borrows thresholds from percentile or mean objectives: without a
``goodput:`` block there is no goodput.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.scenario.model import GoodputObjectives
from loadgen.schedule.arrivals import PhasePlan


def bounds_for(objectives: list[GoodputObjectives], target: str, phase: str) -> dict[str, float]:
    """The per-request bounds (metric -> seconds) of requests of ``phase`` sent to ``target``."""
    best: dict[str, tuple[int, float]] = {}
    for g in objectives:
        tgt, name = g.scope_parts()
        if tgt is not None:
            applies, rank = tgt == target and name == phase, 2
        elif name is None:
            applies, rank = True, 0
        else:
            applies, rank = name in (target, phase), 1
        if not applies:
            continue
        for metric, bound in g.bounds().items():
            cur = best.get(metric)
            if cur is None or rank > cur[0] or (rank == cur[0] and bound < cur[1]):
                best[metric] = (rank, bound)
    return {m: b for m, (_, b) in best.items()}


def good_within(df: pd.DataFrame, bounds: dict[str, float] | None) -> np.ndarray:
    """Per request, as :func:`good_column`, for requests that all share ``bounds`` (None or empty: not judged)."""
    good = np.full(len(df), np.nan)
    if not bounds:
        return good
    g = df["ok"].to_numpy().copy()
    for metric, bound in bounds.items():
        g &= ~(df[metric].to_numpy() > bound)  # NaN compares False: no such metric, no verdict on it
    return np.where(df["aborted"].to_numpy(), np.nan, g.astype(np.float64))


def good_column(df: pd.DataFrame, plans: list[PhasePlan], objectives: list[GoodputObjectives] | None,
                target: str) -> np.ndarray:
    """Per request: 1.0 good, 0.0 not good, NaN when no objective applies to it (or the request was aborted by
    the client on purpose: neither good nor bad). ``df`` is :func:`~loadgen.analysis.metrics.records_frame`."""
    good = np.full(len(df), np.nan)
    if not objectives:
        return good
    phase = df["phase"].to_numpy()
    for p in plans:
        sel = phase == p.index
        if sel.any():
            good[sel] = good_within(df[sel], bounds_for(objectives, target, p.name))
    return good
