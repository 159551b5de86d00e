"""``latbench gate``: the verdict of an existing RunDir, as recorded, optionally against a baseline."""

from __future__ import annotations

from loadgen.analysis.regression import check_baseline
from loadgen.analysis.repeated import group_outcomes
from loadgen.analysis.repeated_baseline import baseline_reasons, build_regression
from loadgen.analysis.verdict import TargetOutcome, Verdict, judge
from loadgen.records.results import Repeats, Summary
from loadgen.records.rundir import REGRESSION, REPEATS, SUMMARY, RunDir, read_result, write_json


def gate_rundir(path: str, baseline: str | None = None, max_regression: float = 0.10) -> Verdict:
    """The verdict of the RunDir at ``path`` (its SLOs as recorded); with ``baseline``, regressions too.

    Every result file is read into its model (:mod:`loadgen.records.results`). A repeated run is judged as it
    was: each target's objectives over its runs (repeats.json), the runs alone only for what makes them invalid.
    ``max_regression`` is the allowed worsening of a percentile, as a fraction."""
    if baseline is not None:
        check_baseline(baseline)
    rd = RunDir(path)
    meta = rd.read_meta()
    targets = []
    for t in meta.targets:
        f = rd.path / t.dir / SUMMARY
        slo = [] if t.repetition is not None else None
        if f.is_file():
            summary = Summary.model_validate(read_result(f))
            targets.append(TargetOutcome(t.name, summary, failed_fast=summary.failed_fast, slo=slo,
                                         group=t.group if t.start is not None else None, start=t.start))
        else:
            targets.append(TargetOutcome(t.name, error="no summary.json: the run did not finish this target"))
    groups = []
    if (rd.path / REPEATS).is_file():
        groups = group_outcomes(Repeats.model_validate(read_result(rd.path / REPEATS)))
    interrupted = not meta.complete and not any(t.failed_fast for t in targets)
    regressions = []
    if baseline is not None:
        regression = build_regression(rd, RunDir(baseline), max_regression)
        write_json(rd.path / REGRESSION, regression)
        regressions = baseline_reasons(regression)
    return judge(targets, interrupted=interrupted, regressions=regressions, groups=groups)
