"""The verdict of a run: computed once, from the targets' summaries, stored in meta.json, read by everyone.

A verdict is data: an outcome (passed | failed | invalid), its exit code, and a list of :class:`Reason`
values, each a kind, the target it concerns (or None) and a sentence for people. Reports, ``gate`` and
``compare`` read the stored value; no consumer parses the sentences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from loadgen import metric_registry
from loadgen.analysis.closedloop import held_text
from loadgen.analysis.failures import SERVICE_CLASSES, describe
from loadgen.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from loadgen.records.results import Contended, Generator, RepeatSlo, Scope, SloResult, Summary
from loadgen.records.workers import LostWorker
from loadgen.scenario.slo import show_value

UNREACHABLE_CLASSES = frozenset({"connect", "dns", "tls"})


class Kind(str, Enum):
    """Why a run did not pass. Those in ``_INVALID`` make a run invalid (exit 3); the rest make it fail (exit 1);
    a warning (``MOSTLY_FAILED``) changes no outcome."""

    INTERRUPTED = "interrupted"  # stopped by a signal, a dead worker, or a crash: the numbers are incomplete
    TARGET_ERROR = "target_error"  # a managed target did not start
    PREFLIGHT = "preflight"  # the pre-flight check found the target unusable: nothing was sent
    SERVER_EXITED = "server_exited"  # a managed server exited during the run: what followed measured a dead process
    UNREACHABLE = "unreachable"  # every request failed to connect
    SETUP = "setup"  # every request failed in a way that says the measurement was set up wrong (404, 401, ...)
    GENERATOR_LIMITED = "generator_limited"  # the numbers describe the load generator, not the server
    MISSING_TARGETS = "missing_targets"  # fewer targets ran than the scenario has
    HOST_CONTENDED = "host_contended"  # the server measured (or latbench) waited too long for a CPU (analysis.host)
    FAILED_FAST = "failed_fast"  # --fail-fast stopped a target: an objective can no longer be met
    ALL_FAILED = "all_failed"  # every request failed, the service's own way (5xx, timeouts)
    SLO = "slo"  # an objective was missed
    REGRESSION = "regression"  # a significant regression against the baseline
    MOSTLY_FAILED = "mostly_failed"  # a warning: over half the requests failed and no objective judges errors

    @property
    def invalid(self) -> bool:
        return self in _INVALID


_INVALID = frozenset({Kind.INTERRUPTED, Kind.TARGET_ERROR, Kind.PREFLIGHT, Kind.SERVER_EXITED, Kind.UNREACHABLE,
                      Kind.SETUP, Kind.GENERATOR_LIMITED, Kind.MISSING_TARGETS, Kind.HOST_CONTENDED})
WARNINGS = frozenset({Kind.MOSTLY_FAILED})


@dataclass(frozen=True)
class Reason:
    kind: Kind
    target: str | None
    text: str  # one sentence, for people; never parsed

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "target": self.target, "text": self.text}

    @classmethod
    def from_json(cls, d: dict) -> "Reason":
        return cls(Kind(d["kind"]), d.get("target"), d["text"])


@dataclass(frozen=True)
class Verdict:
    outcome: str  # passed | failed | invalid
    exit_code: int
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[Reason] = field(default_factory=list)  # said beside the outcome, never changing it

    def texts(self) -> list[str]:
        return [r.text for r in self.reasons] + [f"warning: {w.text}" for w in self.warnings]

    def to_json(self) -> dict:
        return {"outcome": self.outcome, "exit_code": self.exit_code, "reasons": [r.to_json() for r in self.reasons],
                "warnings": [w.to_json() for w in self.warnings]}

    @classmethod
    def from_json(cls, d: dict) -> "Verdict":
        return cls(d["outcome"], int(d["exit_code"]), [Reason.from_json(r) for r in d.get("reasons", [])],
                   [Reason.from_json(r) for r in d.get("warnings", [])])


@dataclass
class TargetOutcome:
    """What the verdict needs of one target's run: its summary (summary.json's model), or why it has none.

    ``slo``: the objective results to judge, when they are not the summary's own: a repeated run's runs
    pass ``[]`` (each run alone is not judged), and each repeated target one outcome with its objectives
    judged over the runs (:func:`loadgen.analysis.repeated.group_outcomes`), without a summary."""

    name: str
    summary: Summary | None = None
    error: str | None = None  # the target did not start (its message)
    failed_fast: str | None = None  # the objective --fail-fast stopped it on
    interrupted: bool = False
    slo: list[SloResult] | None = None  # None: the summary's objectives
    error_kind: Kind = Kind.TARGET_ERROR  # what ``error`` was (a start that failed, or the pre-flight)
    group: str | None = None  # a fresh start of a cold-start study: its architecture ...
    start: int | None = None  # ... and which start (1-based); its reasons name it 'naive (start 2)'

    @property
    def label(self) -> str:
        """How reasons name it: 'naive (start 2)' for a fresh start, as junit.xml and summary.md group it under its
        architecture; else its name."""
        return f"{self.group} (start {self.start})" if self.group and self.start is not None else self.name


def _failure_reasons(target: str, s: Summary, name: str) -> list[Reason]:
    """Every request failed: invalid when the failures say the set-up is wrong, failed when they are the
    service's own; over half failed with no objective on errors: a warning (``name``: how the text names
    ``target``)."""
    ov = s.overall or Scope()
    f = s.failures
    errors = ov.errors or {}
    failed = sum(errors.values())
    if not ov.count or not failed:
        return []
    if ov.ok == 0 and set(errors) <= UNREACHABLE_CLASSES:
        return [Reason(Kind.UNREACHABLE, target,
                       f"{name}: target unreachable ({', '.join(sorted(errors))} on every request)")]
    what = describe(f) if f and f.by_status else ", ".join(f"{k} {v}" for k, v in sorted(errors.items()))
    if ov.ok == 0 and s.server_exit is None:
        commonest = f.by_status[0].error if f and f.by_status else max(errors, key=errors.get)
        if commonest in SERVICE_CLASSES:
            return [Reason(Kind.ALL_FAILED, target, f"{name}: every request failed: {what}")]
        return [Reason(Kind.SETUP, target, f"{name}: every request failed, so the numbers describe no service: {what}")]
    judged = any(sl.metric == "error_rate" or "error_rate" in (sl.expr or "") for sl in s.slo or [])
    if failed > ov.count / 2 and not judged:
        return [Reason(Kind.MOSTLY_FAILED, target, f"{name}: {failed} of {ov.count} requests failed and no objective "
                                                 f"judges errors: {what}")]
    return []


def target_reasons(t: TargetOutcome) -> list[Reason]:
    """The reasons one target gives, from its summary alone (also for one entry of a comparison); the text names it
    by ``t.label`` where it has one (a fresh start: 'naive (start 2)'), each reason's target is its name."""
    name = t.label
    if t.error:
        return [Reason(t.error_kind, t.name, f"{name}: {'pre-flight: ' if t.error_kind == Kind.PREFLIGHT else ''}"
                                             f"{t.error}")]
    s = t.summary
    out = []
    if s is not None:
        if s.server_exit:
            out.append(Reason(Kind.SERVER_EXITED, t.name, f"{name}: {s.server_exit.text}: the records after "
                                                          "it measured a dead process (its log: server.log)"))
        out += _failure_reasons(t.name, s, name)
        if s.generator_limited:
            out.append(Reason(Kind.GENERATOR_LIMITED, t.name,
                              f"{name}: {generator_limited_text(s.generator or Generator())}"))
        for w in s.lost_workers or []:  # which worker made the run incomplete, named for its target
            out.append(Reason(Kind.INTERRUPTED, t.name, f"{name}: {LostWorker.from_json(w).sentence()}"))
        contended = s.host.contended if s.host else None
        if contended:
            out.append(Reason(Kind.HOST_CONTENDED, t.name, f"{name}: {host_contended_text(contended)}"))
    if t.failed_fast:
        out.append(Reason(Kind.FAILED_FAST, t.name,
                          f"{name}: stopped early by --fail-fast: {t.failed_fast} can no longer be met"))
    for slo in (t.slo if t.slo is not None else (s.slo if s else None) or []):
        if slo.applies and not slo.passed:
            basis = f", {slo.basis}" if isinstance(slo, RepeatSlo) and slo.basis else ""
            why = f"; {slo.reason}" if slo.reason else ""
            measured = (f"measured {show_value(slo.value, slo.stat, slo.metric)}{basis}{why}"
                        if slo.value is not None else unmeasured(slo, s) + why)
            start = f"start {t.start}: " if t.group and t.start is not None else ""
            out.append(Reason(Kind.SLO, t.name, f"{labelled(t.group or t.name, slo.expr or '')} ({start}{measured})"))
    return out


def labelled(name: str, expr: str) -> str:
    """An objective named for its target, once: 'naive: latency.p99 < 1s', and 'optimized: latency.p99 < 1s' for
    an objective already scoped to it (not 'optimized: optimized: ...')."""
    scope = expr.split(":", 1)[0].strip() if ":" in expr else ""
    return expr if scope == name or scope.startswith(f"{name}/") else f"{name}: {expr}"


def unmeasured(slo: SloResult, s: Summary | None) -> str:
    """Why an objective has no value, in words: its phase recorded no request (the run stopped before it, or the
    phase never ran), or none of its requests succeeded; a server-side objective's quantity was not measurable here
    (its reason says why)."""
    if metric_registry.slo_kind(slo.metric) == "telemetry":
        return "not measurable here"
    s = s or Summary()
    name = (slo.scope or "").split("/")[-1]
    phases = s.phases or {}
    if name in phases:
        if not (phases[name] or Scope()).count:
            if s.complete is False:
                return f"not measured: the run stopped before {name}, so no request was recorded in it"
            return f"not measured: no request was recorded in {name}"
        return f"not measured: no request of {name} succeeded"
    if not (s.overall or Scope()).count:
        return "not measured: no request was recorded"
    return "not measured: no request succeeded"


def generator_limited_text(g: Generator) -> str:
    """Only what held: the send lag when it was over its threshold, the CPU when it was saturated, each closed-loop
    phase that did not hold its concurrency (a summary that predates ``lagging`` is judged by the lag and the
    threshold it holds)."""
    parts = []
    lag, threshold = g.send_lag_p99, g.send_lag_threshold
    known = isinstance(lag, (int, float)) and not math.isnan(lag) and isinstance(threshold, (int, float))
    lagging = g.lagging
    if lagging is None:
        lagging = known and lag > threshold
    if lagging and known:
        parts.append(f"send lag p99 {lag * 1e3:.1f} ms > {threshold * 1e3:g} ms")
    if g.cpu_saturated:
        parts.append("generator CPU saturated")
    parts += [held_text(c.phase, c) for c in g.closed_loop_short or []]
    return "generator-limited" + (f" ({', '.join(parts)})" if parts else "")


def host_contended_text(contended: list[Contended]) -> str:
    """The phase whose judged process waited longest for a CPU, with its share (of the time it had work), and
    how many other phases were over the limit too."""
    busy = [c for c in contended if c.wait_per_run_ms is None]  # judged by the wait share
    more = len(contended) - 1
    tail = f" (and over the limit in {more} more phase{'s' if more > 1 else ''})" if more else ""
    if busy:
        worst = max(busy, key=lambda c: c.wait_share)
        return (f"host contended: {worst.label} waited for a CPU {worst.wait_share:.0%} of the time it had work "
                f"in phase {worst.phase}" + tail)
    worst = max(contended, key=lambda c: c.wait_per_run_ms)
    return (f"host contended: {worst.label} waited {worst.wait_per_run_ms:.1f} ms for a CPU each time it woke "
            f"in phase {worst.phase}" + tail)


def judge(targets: list[TargetOutcome], *, interrupted: bool = False, expected_targets: int | None = None,
          regressions: list[Reason] | None = None, groups: list[TargetOutcome] | None = None) -> Verdict:
    """The verdict over a run's targets. Invalid runs (exit 3) outrank failed objectives (exit 1).

    ``groups``: a repeated run's targets, their objectives judged over their runs (not counted as runs)."""
    reasons: list[Reason] = []
    if interrupted:
        reasons.append(Reason(Kind.INTERRUPTED, None, "the run was interrupted: its numbers are incomplete"))
    reasons += list(regressions or [])
    for t in targets:
        reasons += target_reasons(t)
    for g in groups or []:
        reasons += target_reasons(g)
    expected = len(targets) if expected_targets is None else expected_targets
    if len(targets) < expected and not interrupted and not any(t.failed_fast for t in targets):
        reasons.append(Reason(Kind.MISSING_TARGETS, None, f"only {len(targets)} of {expected} targets ran"))
    warnings = [r for r in reasons if r.kind in WARNINGS]
    invalid = [r for r in reasons if r.kind.invalid]
    failed = [r for r in reasons if not r.kind.invalid and r.kind not in WARNINGS]
    if invalid:
        return Verdict("invalid", EXIT_INVALID, invalid + failed, warnings)
    if failed:
        return Verdict("failed", EXIT_FAILED, failed, warnings)
    return Verdict("passed", EXIT_OK, [], warnings)
