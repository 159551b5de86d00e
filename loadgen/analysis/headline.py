"""The numbers a report's headline quotes, each computed here once: pure functions over records, phase
plans and phase statistics (seconds inside). Reports only format them.

- :func:`burst_effects`: for each spike (an open-loop phase above the phase after it), the tail during
  the spike against the phase before it, requests in flight at their peak, how long the excess took to
  drain, and the recovery time of :func:`loadgen.metrics.recovery`.
- :func:`headroom`: a phase at the expected rate against the phase above it (120%): p99 of each, their
  ratio, the objectives in each, and with a capacity search of the same target the distance from its knee.
- :func:`architectures`: targets side by side in the article's form (mean and p99 of each, the p99 ratio
  against the first), with the server knobs that differ between them.

A ratio of two percentiles gets an interval from the ends of their 95% intervals (lower over upper, upper
over lower): it holds whenever both intervals do, so with at least 90% confidence. Without both intervals
(too few samples) it has none, and says so.

One idea at several stages, a report's headline, so one file name: :mod:`reports.headline` (the sentences).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.analysis.stats import quantile_ci_ranks
from loadgen.records.results import (
    Burst,
    BurstTail,
    CapacityRef,
    Headroom,
    HeadroomCapacity,
    HeadroomLevel,
    HeadroomObjective,
    InFlight,
    MetricStats,
    Percentile,
    Recovery,
    Scope,
    SloResult,
    Summary,
)
from loadgen.schedule.arrivals import PhasePlan
from loadgen.units import json_num

#: Server settings compared between architectures, in display order.
KNOBS = ("model", "backend", "preload", "warmup", "max_batch_size", "max_queue_delay_s", "cache_size", "prefix_cache",
         "prefix_cache_blocks", "precision", "step_threads", "threads", "max_step_tokens")


def _num(v) -> float | None:
    """A summary number as a float (None, NaN -> None; 'inf' -> inf)."""
    if v is None:
        return None
    if isinstance(v, str):
        return math.inf if v == "inf" else None
    v = float(v)
    return None if math.isnan(v) else v


def samples_for_interval(p: float, limit: int = 100_000) -> int | None:
    """The fewest samples whose percentile ``p`` (0-100) has a 95% order-statistic interval (368 for p99)."""
    lo_n, hi_n = 1, limit
    while lo_n < hi_n:  # the interval exists from some n on: bisect for it
        mid = (lo_n + hi_n) // 2
        lo, hi = quantile_ci_ranks(mid, p / 100.0)
        if lo >= 1 and hi <= mid:
            hi_n = mid
        else:
            lo_n = mid + 1
    return lo_n if lo_n < limit else None


def pct_entry(scope: Scope | None, metric: str = "latency", stat: str = "p99") -> Percentile:
    """One percentile of a phase's (or overall) statistics: its value, its interval (None with too few samples),
    whether it had too few samples for one, and the metric's sample count."""
    desc = (scope.metric(metric) if scope is not None else None) or MetricStats()
    e = (desc.percentiles or {}).get(stat) or Percentile()
    few = e.too_few_samples if "too_few_samples" in e.model_fields_set else True
    return Percentile(value=e.value, ci=e.ci if not e.too_few_samples else None, too_few_samples=bool(few),
                      n=desc.n if "n" in desc.model_fields_set else 0)


def ratio(num: Percentile, den: Percentile) -> Percentile:
    """``num / den`` of two :func:`pct_entry` values, with the interval from the ends of their intervals."""
    a, b = _num(num.value), _num(den.value)
    value = a / b if a is not None and b and math.isfinite(a) and math.isfinite(b) else None
    ci = None
    if num.ci and den.ci:
        (alo, ahi), (blo, bhi) = ([_num(x) for x in num.ci], [_num(x) for x in den.ci])
        if None not in (alo, ahi, blo, bhi) and blo > 0 and bhi > 0:
            ci = [alo / bhi, ahi / blo if math.isfinite(ahi) else math.inf]
    return Percentile(value=json_num(value) if value is not None else None,
                      ci=[json_num(x) for x in ci] if ci else None)


def _mean_rate(p: PhasePlan) -> float:
    return 0.5 * (p.rate_start + p.rate_end)


def in_flight_events(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(event times, requests in flight just after each), exact: +1 at each send, -1 at each completion."""
    sent = df["sent"].to_numpy(dtype=float)
    done = df["done"].to_numpy(dtype=float)
    ok = ~np.isnan(sent)
    t = np.concatenate([sent[ok], done[ok & ~np.isnan(done)]])
    step = np.concatenate([np.ones(int(ok.sum())), -np.ones(int((ok & ~np.isnan(done)).sum()))])
    order = np.lexsort((step, t))  # at equal times completions first: a peak needs the requests to overlap
    return t[order], np.cumsum(step[order])


def in_flight_peaks(df: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Per bin ``[edges[i], edges[i+1])``: the most requests in flight at any moment of it, exact from send and
    completion times (:func:`in_flight_events`); the chart of requests in flight draws these, so its peaks are the
    peaks a headline quotes (:func:`_peak` over a phase is the largest of its bins')."""
    nb = len(edges) - 1
    t, n = in_flight_events(df)
    if not t.size:
        return np.zeros(nb, dtype=np.int64)
    before = np.searchsorted(t, edges[:-1], "right") - 1  # the level each bin starts at
    peaks = np.where(before >= 0, n[np.maximum(before, 0)], 0).astype(np.int64)
    inside = (t >= edges[0]) & (t < edges[-1])
    bins = np.searchsorted(edges, t[inside], "right") - 1
    np.maximum.at(peaks, bins, n[inside].astype(np.int64))
    return peaks


def _peak(t: np.ndarray, n: np.ndarray, start: float, end: float) -> int:
    before = np.searchsorted(t, start, "right") - 1
    inside = n[(t >= start) & (t < end)]
    level = [int(n[before])] if before >= 0 else [0]
    return int(max(level + inside.astype(int).tolist()))


def burst_effects(df: pd.DataFrame, plans: list[PhasePlan], phases: dict[str, Scope],
                  recovery: list[Recovery]) -> list[Burst]:
    """One entry per spike: an open-loop recorded phase whose mean rate is above the next phase's.

    ``tail``: latency p99 in the phase before the spike (baseline) and during it, and their ratio.
    ``in_flight``: the baseline's peak and the peak from the spike's start to the next phase's end, exact
    from send and completion times. ``drain_s``: from the spike's end until requests in flight are back at
    the baseline's peak (None: not within the next phase). ``recovery``: the entry of
    :func:`loadgen.metrics.recovery` for this spike, or None without a latency.p99 objective to recover to.
    """
    out, events = [], None
    for i, (cur, nxt) in enumerate(zip(plans, plans[1:])):
        if cur.closed or nxt.closed or not cur.recorded or _mean_rate(cur) <= _mean_rate(nxt):
            continue
        t, n = events = events or in_flight_events(df)  # a sort of every send and completion: only for a spike
        prev = plans[i - 1] if i > 0 else None
        base = prev if prev is not None and prev.recorded and not prev.closed else None
        spike_p99 = pct_entry(phases.get(cur.name))
        entry = Burst(spike=cur.name, spike_qps=_mean_rate(cur), start=cur.start, end=cur.end,
                      after=nxt.name, after_end=nxt.end, baseline=base.name if base else None,
                      baseline_qps=_mean_rate(base) if base else None,
                      tail=BurstTail(stat="p99", spike=spike_p99, baseline=None, ratio=None,
                                     interval_needs=samples_for_interval(99.0)))
        peak = _peak(t, n, cur.start, nxt.end) if t.size else 0
        base_peak = _peak(t, n, base.start, base.end) if base is not None and t.size else None
        drain = None
        if base_peak is not None and t.size:
            after = (t >= cur.end) & (t < nxt.end)
            at_end = int(n[np.searchsorted(t, cur.end, "right") - 1]) if np.searchsorted(t, cur.end, "right") else 0
            if at_end <= base_peak:
                drain = 0.0
            else:
                back = np.nonzero(after & (n <= base_peak))[0]
                drain = float(t[back[0]] - cur.end) if back.size else None
        if base is not None:
            base_p99 = pct_entry(phases.get(base.name))
            entry.tail.baseline, entry.tail.ratio = base_p99, ratio(spike_p99, base_p99)
        entry.in_flight = InFlight(baseline_peak=base_peak, peak=peak, drain_s=drain)
        entry.recovery = next((r for r in recovery if r.spike == cur.name), None)
        out.append(entry)
    return out


def headroom(plans: list[PhasePlan], phases: dict[str, Scope], slo_results: list[SloResult],
             expected_qps: float | None, capacity: CapacityRef | None = None) -> Headroom | None:
    """The phase at the expected rate against the highest recorded open-loop phase above it that is not a
    spike (no lower phase follows it): p99 of each, their ratio, and each objective's value in both. None
    without ``expected_qps`` or without such a pair of phases.

    ``capacity``: capacity.json's fields of a search of the same target (``knee_qps``,
    ``max_sustainable_qps``, ``first_failing_qps``); then the high phase's rate as a share of each.
    None when the scenario has no such pair of phases.
    """
    steady = [p for p in plans if p.recorded and not p.closed and p.rate_start == p.rate_end]
    if len(steady) < 2:
        return None
    if not expected_qps:  # without an expected rate there is no 100% (a sweep is a curve, not a headroom)
        return None
    base = next((p for p in steady if abs(p.rate_start - expected_qps) <= 0.01 * expected_qps), None)
    if base is None:
        return None
    following = {p.index - 1: p for p in plans}  # the phase after each

    def spike(p: PhasePlan) -> bool:
        nxt = following.get(p.index)
        return nxt is not None and not nxt.closed and _mean_rate(nxt) < p.rate_start

    high = [p for p in steady if p.rate_start > base.rate_start * 1.01 and not spike(p)]
    if not high:
        return None
    top = max(high, key=lambda p: p.rate_start)
    b, h = pct_entry(phases.get(base.name)), pct_entry(phases.get(top.name))
    objectives = []
    for i, r in enumerate(slo_results):
        phase = r.scope.split("/")[-1] if r.scope else None
        if r.applies and phase in (base.name, top.name):
            objectives.append(HeadroomObjective(slo=i, expr=r.expr, phase=phase, passed=r.passed))

    def at(p: PhasePlan, p99: Percentile) -> HeadroomLevel:
        share = p.rate_start / expected_qps if expected_qps else None
        return HeadroomLevel(phase=p.name, qps=p.rate_start, share=share, p99=p99)

    out = Headroom(base=at(base, b), high=at(top, h), ratio=ratio(h, b), interval_needs=samples_for_interval(99.0),
                   objectives=objectives,
                   holds=all(o.passed for o in objectives if o.phase == top.name) if objectives else None,
                   holds_at_base=all(o.passed for o in objectives if o.phase == base.name) if objectives else None)
    if capacity:
        knee, held, fails = capacity.knee_qps, capacity.max_sustainable_qps, capacity.first_failing_qps
        out.capacity = HeadroomCapacity(rundir=capacity.rundir, knee_qps=knee, max_sustainable_qps=held,
                                        first_failing_qps=fails,
                                        share_of_knee=top.rate_start / knee if knee else None,
                                        share_of_sustainable=top.rate_start / held if held else None)
    return out


def architectures(entries: list[tuple[str, Summary | None, dict]]) -> dict | None:
    """The article's comparison of ``(label, summary, server config)`` entries: mean and p99 latency of
    each over the overall scope; ``p99_vs_first``: how many times lower (``lower``) or higher each one's p99
    is than the first's, as a factor of at least 1 with its interval; the knobs that differ; and
    ``interval_needs``: the fewest requests whose p99 has an interval (a ratio without one says so)."""
    entries = [(label, s, cfg or {}) for label, s, cfg in entries if s]
    if len(entries) < 2:
        return None
    rows = []
    base_p99 = pct_entry(entries[0][1].overall)
    for i, (label, s, _) in enumerate(entries):
        p99 = pct_entry(s.overall)
        lat = (s.overall.metric("latency") if s.overall else None) or MetricStats()
        vs = None
        if i:
            vs = ratio(base_p99, p99)
            lower = vs.value is None or vs.value >= 1
            vs = {**(vs if lower else ratio(p99, base_p99)).to_json(), "lower": lower}
        rows.append({"label": label, "mean": lat.mean, "p99": p99.to_json(),
                     "n": lat.n if "n" in lat.model_fields_set else 0, "p99_vs_first": vs})
    knobs = {}
    for k in KNOBS:
        values = [cfg.get(k) for _, _, cfg in entries]
        if any(k in cfg for _, _, cfg in entries) and len({repr(v) for v in values}) > 1:
            knobs[k] = values
    return {"rows": rows, "base": entries[0][0], "knobs": knobs, "interval_needs": samples_for_interval(99.0)}
