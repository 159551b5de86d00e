"""Raw scraped samples (``time, metric, labels, value``: server_metrics.csv, gpu_metrics.csv) read the way a
:class:`~loadgen.telemetry.adapters.Way` says: per-phase figures and a per-scrape series.

Times are seconds since the run's t0 (the records' clock). Counters are cumulative as the server reports them; a
value lower than the one before is a **reset** (the engine restarted): the increase across it counts from zero, as
PromQL's ``rate`` does, and :func:`resets` lists where it happened. A phase ``[a, b)`` is read over the part of it
that was scraped: counters interpolated linearly at its ends; gauges from the scrapes inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadgen.telemetry.adapters import Way

QUANTILES = (0.5, 0.99)


def label_value(labels: str, key: str) -> str | None:
    """One label's value from canonical ``k="v",...`` text (no escaped quotes in the values it is used for)."""
    for part in str(labels or "").split('",'):
        k, _, v = part.partition('="')
        if k.strip(",") == key:
            return v.rstrip('"')
    return None


def _of(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[df["metric"] == name]


def gauge_series(df: pd.DataFrame, names: tuple[str, ...], agg: str = "sum", scale: float = 1.0) -> pd.Series:
    """Value at each scrape time: summed (or averaged) over label sets, summed over ``names``, times ``scale``."""
    parts = []
    for n in names:
        sel = _of(df, n).groupby("time")["value"]
        parts.append(sel.mean() if agg == "mean" else sel.sum())
    if not parts:
        return pd.Series(dtype=float)
    out = parts[0]
    for p in parts[1:]:
        out = out.add(p, fill_value=None)
    return (out.dropna() * scale).sort_index()


def cumulative(df: pd.DataFrame, name: str, extra: str | None = None) -> pd.Series:
    """A counter summed over its label sets (grouped by ``extra`` when given: a histogram's ``le``), each label set
    corrected for resets first, so the sum only grows; indexed by scrape time."""
    sel = _of(df, name)
    if sel.empty:
        return pd.Series(dtype=float)
    out = None
    for _, g in sel.groupby("labels"):
        s = g.groupby("time")["value"].sum().sort_index()
        s = _unreset(s)
        out = s if out is None else out.add(s, fill_value=0.0)
    return out.sort_index()


def _unreset(s: pd.Series) -> pd.Series:
    v = s.to_numpy(dtype=float)
    if v.size < 2:
        return s
    d = np.diff(v)
    d = np.where(d < 0, v[1:], d)  # after a reset the counter counts from 0
    return pd.Series(np.concatenate([[v[0]], v[0] + np.cumsum(d)]), index=s.index)


def resets(df: pd.DataFrame, names: tuple[str, ...]) -> list[tuple[str, float]]:
    """(name, time) of every counter of ``names`` that went down between two scrapes (an engine restart)."""
    out = []
    for name in names:
        sel = _of(df, name)
        for _, g in sel.groupby("labels"):
            s = g.sort_values("time")
            v, t = s["value"].to_numpy(dtype=float), s["time"].to_numpy(dtype=float)
            out += [(name, float(t[i + 1])) for i in np.flatnonzero(np.diff(v) < 0)]
    return sorted(set(out), key=lambda x: x[1])


def delta(s: pd.Series, a: float, b: float) -> tuple[float, float] | None:
    """(increase, seconds) of a cumulative series over the scraped part of ``[a, b)``; None without two scrapes
    around it."""
    if len(s) < 2:
        return None
    t, v = s.index.to_numpy(dtype=float), s.to_numpy(dtype=float)
    lo, hi = max(a, t[0]), min(b, t[-1])
    if hi <= lo:
        return None
    return float(np.interp(hi, t, v) - np.interp(lo, t, v)), hi - lo


def bucket_quantile(q: float, les: np.ndarray, cum: np.ndarray) -> float | None:
    """PromQL's ``histogram_quantile``: the ``q`` quantile of cumulative bucket counts ``cum`` at upper bounds
    ``les`` (sorted, the last +Inf), linear within the bucket it falls in; the highest finite bound when it falls in
    +Inf; None without observations."""
    total = cum[-1] if cum.size else 0
    if total <= 0:
        return None
    rank = q * total
    i = int(np.searchsorted(cum, rank, side="left"))
    i = min(i, len(les) - 1)
    if math.isinf(les[i]):
        finite = les[np.isfinite(les)]
        return float(finite[-1]) if finite.size else None
    lo = les[i - 1] if i > 0 else 0.0
    c_lo = cum[i - 1] if i > 0 else 0.0
    width = cum[i] - c_lo
    return float(lo + (les[i] - lo) * ((rank - c_lo) / width if width > 0 else 1.0))


@dataclass
class Figures:
    """One quantity over one phase: ``mean``, ``max`` (gauges), ``p50`` / ``p99`` (histograms), ``count`` (a
    histogram's observations), ``samples`` (gauge scrapes), ``total`` (a counter's increase)."""

    mean: float | None = None
    max: float | None = None
    p50: float | None = None
    p99: float | None = None
    count: float | None = None
    samples: int | None = None
    total: float | None = None


def _hist_figures(df: pd.DataFrame, base: str, scale: float, a: float, b: float) -> Figures | None:
    ds, dc = delta(cumulative(df, base + "_sum"), a, b), delta(cumulative(df, base + "_count"), a, b)
    if ds is None or dc is None:
        return None
    f = Figures(count=dc[0], mean=ds[0] / dc[0] * scale if dc[0] > 0 else None)
    buckets = _of(df, base + "_bucket")
    if not buckets.empty and dc[0] > 0:
        le = buckets["labels"].map(lambda x: label_value(x, "le"))
        bounds = {}
        for bound, g in buckets.groupby(le):
            d = delta(cumulative(g.assign(labels=g["labels"]), base + "_bucket"), a, b)
            if d is not None and bound is not None:
                bounds[float(bound)] = d[0]
        if bounds:
            les = np.array(sorted(bounds))
            cum = np.maximum.accumulate(np.array([bounds[x] for x in les]))
            f.p50, f.p99 = (None if (v := bucket_quantile(q, les, cum)) is None else v * scale for q in QUANTILES)
    return f


def phase_figures(df: pd.DataFrame, way: Way, a: float, b: float) -> Figures | None:
    """A quantity's figures over ``[a, b)`` read ``way``; None when the phase was not scraped enough to say."""
    if way.kind in ("gauge", "gshare"):
        s = _gauge_like(df, way)
        v = s[(s.index >= a) & (s.index < b)].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        return Figures(mean=float(v.mean()), max=float(v.max()), samples=int(v.size)) if v.size else None
    if way.kind == "histogram":
        return _hist_figures(df, way.names[0], way.scale, a, b)
    if way.kind == "counter":
        d = delta(cumulative(df, way.names[0]), a, b)
        return None if d is None else Figures(mean=d[0] / d[1] * way.scale, total=d[0] * way.scale)
    num, den = delta(cumulative(df, way.names[0]), a, b), delta(cumulative(df, way.names[1]), a, b)
    if num is None or den is None:
        return None
    whole = den[0] + (num[0] if way.kind == "ratio" else 0.0)
    return Figures(mean=num[0] / whole * way.scale + way.offset if whole > 0 else None, total=whole)


def _gauge_like(df: pd.DataFrame, way: Way) -> pd.Series:
    if way.kind == "gshare":
        num, den = gauge_series(df, way.names), gauge_series(df, way.den)
        return (num / den.where(den > 0)).dropna()
    return gauge_series(df, way.names, way.agg, way.scale)


def interval_series(df: pd.DataFrame, way: Way) -> pd.Series:
    """The quantity at each scrape: a gauge's value; for the others, over each interval between two scrapes
    (indexed by its end): a histogram's mean, a counter's rate, a share or ratio. NaN where nothing happened."""
    if way.kind in ("gauge", "gshare"):
        return _gauge_like(df, way)
    if way.kind == "histogram":
        ds, dc = cumulative(df, way.names[0] + "_sum").diff(), cumulative(df, way.names[0] + "_count").diff()
        return (ds / dc.where(dc > 0) * way.scale).iloc[1:]
    if way.kind == "counter":
        s = cumulative(df, way.names[0])
        dt = pd.Series(s.index, index=s.index).diff()
        return (s.diff() / dt * way.scale).iloc[1:]
    dn, dd = cumulative(df, way.names[0]).diff(), cumulative(df, way.names[1]).diff()
    whole = dd + (dn if way.kind == "ratio" else 0.0)
    return (dn / whole.where(whole > 0) * way.scale + way.offset).iloc[1:]
