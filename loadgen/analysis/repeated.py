"""Repeated runs: between-run statistics (repeats.json) and objectives judged over the runs together.

A scenario run N times (``repeat: {runs: N}``, ``--repeat N``) leaves N folders per target in one RunDir,
``<target>-rep1`` .. ``<target>-repN``, each with its own records and summary. One run's intervals describe
that run (its requests); what fails builds is the spread *between* runs: the machine, the server's start,
its caches, the neighbours. Here every statistic of every target is given per run and across the runs:

- ``values``: the statistic of each run (the run's overall scope), in repetition order;
- ``median``: their median (for an even N the mean of the middle two);
- ``centre`` and ``ci``: a 95% Student-t interval over the runs, with N - 1 degrees of freedom. Times and
  rates are taken on a log scale (run-to-run noise is multiplicative: a slower machine scales every
  latency), so the interval is that of the geometric mean of the runs, ``centre``, and is never negative;
  ``error_rate`` (often exactly 0) and ``goodput`` on their own scale. One run gives no interval.

Objectives over repeated runs are judged on a between-run figure, as each objective says (``@median`` or
``@upper`` after it) or else ``repeat.judge``: *median*, the median run must meet it; *upper*, the
pessimistic end of the between-run interval must (the upper bound for ``<``, the lower for ``>``). A run
without a value (no successful request) fails the objective for its target.

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen.analysis.tdist import t_ppf
from loadgen.analysis.verdict import TargetOutcome
from loadgen.records.results import (
    Capacity,
    MetaTarget,
    Repeats,
    RepeatSlo,
    RepeatTarget,
    RunStat,
    Scope,
    SearchSpread,
    SloResult,
    Summary,
)
from loadgen.records.results import RepeatRun as RepeatRun_
from loadgen.scenario.slo import IN, SLO
from loadgen.units import fmt_ms

CONFIDENCE = 0.95
#: The statistics repeats.json gives per run and across runs: 'metric.stat' of the overall scope, or a scalar.
STAT_KEYS = tuple(f"{m}.{s}" for m in ("latency", "ttft", "itl", "tpot") for s in ("p50", "p90", "p99", "mean")) + (
    "error_rate", "achieved_qps")
#: Scalars that are fractions, often exactly 0: their interval is on their own scale, not a log one.
LINEAR = frozenset({"error_rate", "goodput"})
METHOD = ("95% Student-t interval over the runs (n - 1 degrees of freedom), of the per-run log values for times "
          "and rates (centre: their geometric mean), of the values themselves for error_rate and goodput; "
          "median: the median run's value")


@dataclass(frozen=True)
class RepeatRun:
    """One run of a repeated scenario: its target (group), repetition number, folder, and summary if it ran."""

    group: str
    repetition: int
    dir: str
    summary: Summary | None


def _num(v) -> float | None:
    """A summary.json number as a float ('inf' strings as infinity); None when absent or NaN."""
    if v is None:
        return None
    if v == "inf":
        return math.inf
    x = float(v)
    return None if math.isnan(x) else x


def run_value(summary: Summary, key: str) -> float | None:
    """Statistic ``key`` ('latency.p99', 'error_rate', ...) of one run's overall scope; None when not measured."""
    ov = summary.overall or Scope()
    metric, _, stat = key.partition(".")
    if not stat:
        return _num(ov.value(metric))
    desc = ov.metric(metric)
    return _num(desc.stat(stat)) if desc and desc.n else None


def scale_for(metric: str, values: list[float | None]) -> str:
    """'log' for times and rates whose values are all positive and finite, else 'linear'."""
    vals = [v for v in values if v is not None]
    if metric in LINEAR or not vals or any(v <= 0 or math.isinf(v) for v in vals):
        return "linear"
    return "log"


def between(values: list[float | None], scale: str, confidence: float = CONFIDENCE) -> RunStat:
    """Across-run figures of per-run ``values`` (None: not measured in that run): see the module docstring.

    Returns the values, their count, median, ``centre`` and ``ci`` (None for fewer than two values, or when a
    value is infinite) and the ``scale`` they were taken on."""
    vals = [v for v in values if v is not None]
    n = len(vals)
    out = RunStat(values=list(values), n=n, median=float(np.median(vals)) if n else None, centre=None, ci=None,
                  scale=scale)
    if n < 2 or any(math.isinf(v) for v in vals):
        return out
    if min(vals) == max(vals):  # no spread: exactly that value (exp(log(v)) need not round-trip to v)
        out.centre, out.ci = float(vals[0]), [float(vals[0]), float(vals[0])]
        return out
    t = t_ppf(0.5 + confidence / 2.0, n - 1)
    if scale == "log":
        y = np.log(vals)
        m, half = float(y.mean()), t * float(y.std(ddof=1)) / math.sqrt(n)
        out.centre, out.ci = math.exp(m), [math.exp(m - half), math.exp(m + half)]
    else:
        y = np.asarray(vals, dtype=np.float64)
        m, half = float(y.mean()), t * float(y.std(ddof=1)) / math.sqrt(n)
        out.centre, out.ci = m, [max(m - half, 0.0), m + half]  # every statistic here is >= 0
    return out


def _basis(judge: str, op: str, n: int) -> str:
    if judge == "median":
        return f"the median of {n} runs"
    side = "upper" if op in ("<", "<=") else "lower"
    return f"the {side} bound of the between-run 95% interval over {n} runs"


def group_slo(slo: SLO, rows: list[SloResult | None], default_judge: str) -> RepeatSlo:
    """One objective judged over a target's runs. ``rows``: the objective's result in each run's summary
    (None for a run that did not run). The value judged is the median run's, or the pessimistic interval
    bound's (without an interval: the worst run's)."""
    present = [r for r in rows if r is not None]
    if not present or not any(r.applies for r in present):
        return RepeatSlo(expr=slo.expr, metric=slo.metric, stat=slo.stat, op=slo.op, threshold=slo.threshold,
                         scope=slo.scope, applies=False, passed=True, value=None, ci=None)
    values = [None if r is None else _num(r.value) for r in rows]
    judge = "median" if slo.op == IN else (slo.judge or default_judge)  # a range has no pessimistic side
    b = between(values, scale_for(slo.metric, values))
    lower_is_better = slo.op in ("<", "<=")
    missing = [i + 1 for i, v in enumerate(values) if v is None]
    if missing:
        value = None
        reason = f"no value in run{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
    elif judge == "median":
        value, reason = b.median, ""
    elif b.ci is not None:
        value, reason = (b.ci[1] if lower_is_better else b.ci[0]), ""
    else:
        value, reason = (max(values) if lower_is_better else min(values)), ""
    out = RepeatSlo(expr=slo.expr, metric=slo.metric, stat=slo.stat, op=slo.op, threshold=slo.threshold,
                    scope=slo.scope, applies=True, judge=judge, values=values, median=b.median, centre=b.centre,
                    ci=b.ci, scale=b.scale, value=value, passed=slo.check(value),
                    basis=_basis(judge, slo.op, len(values)))
    if reason:
        out.reason = reason
    return out


def repeats_summary(runs: list[RepeatRun], slos: list[SLO], judge: str, order: list[str] | None = None) -> dict:
    """:func:`build_repeats` as the JSON it writes (a plain dict)."""
    return build_repeats(runs, slos, judge, order).to_json()


def build_repeats(runs: list[RepeatRun], slos: list[SLO], judge: str, order: list[str] | None = None) -> Repeats:
    """repeats.json, as its model: per target (group), its runs, every statistic of :data:`STAT_KEYS` across
    them, and the objectives judged over them. ``order``: the folders in the order they ran (interleaved)."""
    groups: dict[str, list[RepeatRun]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    targets = {}
    for group, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.repetition)
        ran = [r.summary for r in rs if r.summary is not None]
        stats = {}
        for key in STAT_KEYS:
            values = [None if r.summary is None else run_value(r.summary, key) for r in rs]
            if any(v is not None for v in values):
                stats[key] = between(values, scale_for(key.partition(".")[0], values))
        results = [group_slo(s, [None if r.summary is None else r.summary.slo[i] for r in rs], judge)
                   for i, s in enumerate(slos)] if ran else []
        targets[group] = RepeatTarget(
            runs=[RepeatRun_(repetition=r.repetition, dir=r.dir, ran=r.summary is not None,
                             complete=bool(r.summary and r.summary.complete is not False)) for r in rs],
            stats=stats,
            slo=results,
            passed=all(x.passed for x in results if x.applies),
        )
    return Repeats(runs=max((len(rs) for rs in groups.values()), default=0), judge=judge, confidence=CONFIDENCE,
                   method=METHOD, order=list(order or [r.dir for r in runs]), targets=targets)


def group_outcomes(repeats: Repeats) -> list[TargetOutcome]:
    """What the verdict judges of a repeated run besides its runs: each target's objectives over its runs."""
    return [TargetOutcome(group, slo=g.slo) for group, g in (repeats.targets or {}).items()]


def repeat_groups(meta_targets: list[MetaTarget]) -> dict[str, list[MetaTarget]]:
    """meta.json's target entries grouped by the target they repeat (entries with ``repetition``), in
    repetition order; an entry that is not a repetition is a group of its own, under its name."""
    groups: dict[str, list[MetaTarget]] = {}
    for e in meta_targets:
        key = e.group if e.repetition is not None else e.name
        groups.setdefault(key or e.name, []).append(e)
    for es in groups.values():
        es.sort(key=lambda e: e.repetition or 0)
    return groups


def bracket_spread(results: list[Capacity]) -> SearchSpread:
    """Across repeated capacity searches (each capacity.json's model): each search's bracket, and the
    median and between-search 95% interval (log scale) of the rate held and of the first failing rate.
    A search that held no rate, or found no failing one, is left out of that rate's figures."""
    held = [r.max_sustainable_qps for r in results]
    failing = [r.first_failing_qps for r in results]
    out = SearchSpread(searches=len(results), method=METHOD, held=between(held, scale_for("achieved_qps", held)),
                       failing=between(failing, scale_for("achieved_qps", failing)),
                       brackets=[r.bracket for r in results])
    med = out.held.median
    expected = next((r.expected_qps for r in results if r.expected_qps), None)
    low = out.held.ci[0] if out.held.ci else None
    out.headroom = (med / expected - 1.0) if (med is not None and expected) else None
    out.headroom_low = (low / expected - 1.0) if (low is not None and expected) else None
    return out


def spread_headline(top: Capacity) -> str:
    """The answer of a repeated capacity search, for people: the median bracket and how far searches differ."""
    sp = top.spread
    held, failing = sp.held, sp.failing
    each = "; ".join(f"{b[0]:.4g}..{b[1]:.4g}" if b and None not in b else
                     (f"{b[0]:.4g}..none" if b and b[0] is not None else "none passed") for b in sp.brackets)
    if held.median is None:
        return f"no rate passed in any of {sp.searches} searches"
    text = f"holds {held.median:.4g} req/s (median of {held.n} searches"
    if held.ci:
        text += f"; between-search 95% interval {held.ci[0]:.4g}..{held.ci[1]:.4g}"
    text += ")"
    if failing.median is not None:
        text += f", fails at {failing.median:.4g} req/s"
    text += f"; brackets: {each}"
    if sp.headroom is not None:
        text += f"; headroom {sp.headroom * 100:+.0f}%"
        if sp.headroom_low is not None:
            text += f" (at the interval's lower bound {sp.headroom_low * 100:+.0f}%)"
    return text


def describe_between(b: RunStat, unit: str = "ms") -> str:
    """'median 212 ms over 3 runs, 95% interval 190..240 ms' for people (seconds in, ms shown)."""
    show = fmt_ms if unit == "ms" else (lambda v: f"{v * 100:.2f}%" if unit == "pct" else f"{v:.4g}")
    if b.median is None:
        return "no value"
    text = f"median {show(b.median)} over {b.n} runs"
    if b.ci:
        text += f", 95% interval {show(b.ci[0])}..{show(b.ci[1])}"
    return text
