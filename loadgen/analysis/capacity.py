"""Capacity planning, the judgement: whether one step held, where the knee is, what the answer says.

The search itself (which rates to try, one step after another) is :mod:`loadgen.run.capacity`.


Search: steady open-loop steps, doubling from ``qps_min`` until a step fails (or ``qps_max`` passes),
then geometric bisection between the last passing and the first failing rate until they are within
``tolerance`` of each other. Each step is a short warm-up (not recorded) and a measured stretch; a step
stops early once one of its objectives has failed beyond doubt. A step passes when every SLO passes, the
generator kept up, and the target completed at least 90% of the offered rate within the step (a server
that queues without bound fails even before its latency does). A step whose latency and requests in
flight are still climbing at its end is not a steady state and fails too.

An objective on a percentile counts as met only when the upper bound of its 95% interval meets it, and
as failed only when the lower bound misses it: the interval is the wider of the order-statistic one and a
sectioned one (:func:`loadgen.analysis.stats.sectioned_ci`), because requests through one queue are not
independent and one run's p99 near saturation varies far more than an interval for independent samples
says. A step whose interval straddles the threshold (and that failed nothing else) is inconclusive: it
is run again, twice as long, and that run decides. Near the answer one unlucky short step would
otherwise decide the bracket: taken as failed it pulls the answer below what the target holds, taken
as passed above. Objectives scoped to a phase apply to every step. Longer steps (``--step-duration``)
give narrower intervals and so a tighter, still honest, answer.

The answer is a bracket: the target holds ``max_sustainable_qps`` (the last passing rate) and fails at
``first_failing_qps``; the truth lies between. Headroom compares the held rate with ``expected_qps``.

One idea at several stages, capacity planning, so one file name: :mod:`loadgen.run.capacity` (the search),
:mod:`reports.capacity` (the report), :mod:`loadgen.cli.capacity` (the command).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from loadgen.analysis.metrics import metric_samples
from loadgen.analysis.stats import sectioned_ci
from loadgen.analysis.verdict import UNREACHABLE_CLASSES, generator_limited_text, host_contended_text
from loadgen.records.results import Capacity, CapacityStep, Generator, Scope, SloResult, Summary
from loadgen.records.rundir import CAPACITY
from loadgen.scenario.model import GoodputObjectives, Load, Phase
from loadgen.scenario.slo import SLO, percentile_of, show_value
from loadgen.units import json_num

KEEP_UP = 0.9  # a step must complete at least this share of its offered rate
SECTIONS = 5  # stretches of a step whose spread gives the sectioned interval of a percentile
LONGER = 2  # an inconclusive step is run again this many times as long
# A step stops early once an objective has three times the breaches it allows (p97 over a p99 threshold):
# failed beyond doubt. --fail-fast's tighter rule would also stop steps whose interval still straddles.
STEP_FAIL_FAST = 3.0


@dataclass
class Step:
    qps: float
    passed: bool
    achieved_qps: float
    latency_p50: float | None
    latency_p99: float | None
    ttft_p99: float | None
    error_rate: float | None
    stopped_early: bool
    reasons: list[str] = field(default_factory=list)
    dir: str = ""
    inconclusive: bool = False  # the objectives' intervals straddled their thresholds: run again, longer
    unreachable: bool = False  # every request failed to connect: the step says nothing of the target's capacity
    contended: str | None = None  # the judged process waited too long for a CPU: a failure that may be the host's
    generator_limited: str | None = None  # the load generator fell behind: a failure that may be latbench's own

    def result(self) -> CapacityStep:
        """The step as capacity.json's ``steps`` lists it."""
        return CapacityStep(qps=self.qps, passed=self.passed, achieved_qps=self.achieved_qps,
                            latency_p50=self.latency_p50, latency_p99=self.latency_p99, ttft_p99=self.ttft_p99,
                            error_rate=self.error_rate, stopped_early=self.stopped_early, reasons=self.reasons,
                            dir=self.dir, inconclusive=self.inconclusive, unreachable=self.unreachable,
                            contended=self.contended, generator_limited=self.generator_limited)


def step_load(base: Load, qps: float, duration: float, warmup: float, index: int = 0) -> Load:
    """A steady load at ``qps``: a warm-up that is not recorded, then the measured step. Each step has its
    own seed, so it draws its own arrivals and prompts: a result cache warmed by one step must not answer
    the next one's requests."""
    phases = [Phase(name="warmup", duration=warmup, qps=qps, record=False)] if warmup > 0 else []
    phases.append(Phase(name="step", duration=duration, qps=qps))
    return base.model_copy(update={"phases": phases, "starts": 1, "seed": base.seed + 1000 * index})


def step_goodput(objectives: list[GoodputObjectives] | None) -> list[GoodputObjectives] | None:
    """The goodput objectives of a step: as :func:`step_objectives`, a scoped entry applies to each step (where
    two give the same metric, the tighter bound holds)."""
    if not objectives:
        return objectives
    return [g.model_copy(update={"scope": None}) for g in objectives]


def step_objectives(slos: list[SLO]) -> list[SLO]:
    """The objectives every step must meet. A step is one steady load that stands in for the scenario's
    phases, so an objective scoped to a phase (``at_120: latency.p99 < 500ms``) or to the target applies
    to each step; scoped copies of one objective become one. Left scoped, they would match no phase of a
    step and silently never be checked."""
    out: dict[str, SLO] = {}
    for s in slos:
        if s.scope:
            s = dataclasses.replace(s, scope=None, expr=s.expr.split(":", 1)[1].strip())
        out.setdefault(s.expr, s)
    return list(out.values())


def sectioned_intervals(df: pd.DataFrame, results: list[SloResult]) -> None:
    """Add ``ci_sectioned`` to each percentile objective's result (a step summary's ``slo``): the interval of
    :func:`~loadgen.analysis.stats.sectioned_ci`, from the step's requests in send order. Near saturation one
    step's requests are far from independent, and its order-statistic interval far too narrow."""
    step = df[df["recorded"]].sort_values("scheduled")  # the warm-up is not recorded: this is the step
    for r in results:
        if not r.applies or not r.stat or percentile_of(r.stat) is None:
            continue
        rows = step if r.metric == "send_lag" else step[step["ok"]]
        x = metric_samples(rows, r.metric)
        ci = sectioned_ci(x, percentile_of(r.stat), SECTIONS)
        r.ci_sectioned = None if ci is None else [json_num(ci[0]), json_num(ci[1])]


def _interval(r: SloResult) -> tuple[float, float] | None:
    """The wider of an objective's two 95% intervals: the order-statistic one (few samples) and the
    sectioned one (dependent samples); None for objectives without one."""
    ends = [tuple(float(v) for v in ci) for ci in (r.ci, r.ci_sectioned) if ci and None not in ci]
    if not ends or r.op not in ("<", "<="):
        return None
    return min(e[0] for e in ends), max(e[1] for e in ends)


def unreachable(summary: Summary) -> bool:
    """Every request of the summary failed to reach the target (connect, dns, tls): no rate is measured."""
    ov = summary.overall or Scope()
    return bool(ov.count) and ov.ok == 0 and set(ov.errors or {}) <= UNREACHABLE_CLASSES


def judge(summary: Summary, qps: float) -> tuple[bool, list[str], bool]:
    """Whether a step held: its SLOs (with confidence), the generator, and the completed rate; and whether
    the verdict is in doubt. An objective on a percentile holds only if its whole 95% interval does (a step
    that passes by the luck of a short sample would put the answer above what the target holds) and fails
    outright only if its whole interval does. When it straddles the threshold and nothing else failed,
    the step is inconclusive: more samples, not a verdict, are what it needs."""
    hard, doubt = [], []
    contended = summary.host.contended if summary.host else None
    if contended:
        hard.append(host_contended_text(contended))
    if unreachable(summary):
        hard.append(f"target unreachable ({', '.join(sorted(summary.overall.errors))} on every request)")
    for r in summary.slo or []:
        if not r.applies:
            continue
        iv = _interval(r)
        measured = show_value(r.value, r.stat, r.metric)
        if not r.passed:
            if iv is not None and r.value is not None and iv[0] < r.threshold:
                doubt.append(f"{r.expr}: measured {measured}, but its 95% interval reaches down to "
                             f"{show_value(iv[0], r.stat, r.metric)}")
            else:
                hard.append(f"{r.expr} (measured {measured})")
        elif iv is not None and not (iv[1] < r.threshold if r.op == "<" else iv[1] <= r.threshold):
            reaches = show_value(iv[1], r.stat, r.metric)
            doubt.append(f"{r.expr}: met ({measured}) but its 95% interval reaches {reaches}")
    if summary.generator_limited:
        hard.append(generator_limited_text(summary.generator or Generator()))
    step = summary.phases["step"]
    offered = step.sent_qps  # the arrivals this step actually drew, not the nominal rate: a short
    if step.achieved_qps < KEEP_UP * offered:  # Poisson step at 5 req/s may draw 4.1 req/s
        hard.append(f"completed {step.achieved_qps:.1f} req/s of {offered:.1f} offered")
    growing = queue_growth(summary)
    if growing:
        hard.append(growing)
    if summary.failed_fast:
        hard.append("stopped early: an objective could no longer be met")
    reasons = hard + doubt
    return not reasons, reasons, bool(doubt) and not hard


def queue_growth(summary: Summary) -> str | None:
    """Near saturation a queue builds slowly: a short step can pass while its latency is still climbing.
    A step whose per-second median latency (and requests in flight) in its last third are well above
    their first third is not a steady state, and does not count as held."""
    ts, step = summary.timeseries, summary.phases["step"]
    t = np.asarray(ts.t, dtype=float)
    p50 = np.asarray([np.nan if v is None else v for v in ts.latency_p50], dtype=float)
    inflight = np.asarray(ts.in_flight, dtype=float)
    span = step.end - step.start
    first = (t >= step.start) & (t < step.start + span / 3)
    last = (t >= step.end - span / 3) & (t < step.end)
    if first.sum() < 2 or last.sum() < 2:
        return None
    a, b = np.nanmedian(p50[first]), np.nanmedian(p50[last])
    fa, fb = inflight[first].mean(), inflight[last].mean()
    if np.isfinite(a) and np.isfinite(b) and b > 1.5 * a and b - a > 0.02 and fb > 1.5 * max(fa, 1.0):
        return (f"queue still growing: median latency {a * 1e3:.0f} -> {b * 1e3:.0f} ms and in flight "
                f"{fa:.0f} -> {fb:.0f} from the first to the last third of the step")
    return None


def knee(steps: list[Step]) -> float | None:
    """The rate where p99 latency starts to climb: the point farthest below the chord (Kneedle)."""
    pts = sorted((s.qps, s.latency_p99) for s in steps if s.latency_p99 is not None)
    if len(pts) < 3:
        return None
    xs = [p[0] for p in pts]
    ys = [math.log(p[1]) for p in pts]  # latency grows multiplicatively past the knee
    x0, x1, y0, y1 = xs[0], xs[-1], min(ys), max(ys)
    if x1 == x0 or y1 - y0 < math.log(2.0):
        return None  # p99 did not even double over the range: no knee, only noise
    gaps = [(x - x0) / (x1 - x0) - (y - y0) / (y1 - y0) for x, y in zip(xs, ys)]
    best = max(range(len(pts)), key=lambda i: gaps[i])
    return xs[best] if gaps[best] > 0.05 else None


def headline(result: Capacity) -> str:
    """The answer of a capacity search (capacity.json's model), for people."""
    lo, hi = result.max_sustainable_qps, result.first_failing_qps
    if lo is None:
        return f"no rate passed: even {result.search.qps_min:g} req/s breaks the SLOs"
    if hi is None:
        return f"holds at least {lo:.4g} req/s (the --max); no failing rate found"
    if result.limited_by_generator:
        return (f"holds {lo:.4g} req/s; at {hi:.4g} req/s the load generator, not the target, fell behind: "
                "the target's capacity is at least what was measured (run more generator processes or hosts)")
    text = f"holds {lo:.4g} req/s, fails at {hi:.4g} req/s"
    if result.headroom is not None:
        text += f"; headroom {result.headroom * 100:+.0f}% against the expected {result.expected_qps:g} req/s"
    return text


__all__ = ["CAPACITY", "STEP_FAIL_FAST", "Step", "headline", "judge", "knee", "sectioned_intervals", "step_load",
           "step_objectives"]
