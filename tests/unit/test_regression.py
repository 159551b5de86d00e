"""Baseline regression checks, table-driven over RunDirs with known latencies and error rates (real files,
written as a run writes them)."""

import pytest

from benchmarks.report_speed import synthetic_rundir
from loadgen.analysis.regression import compare_runs, compare_target, regression_reasons
from loadgen.analysis.verdict import Kind
from loadgen.records.rundir import RunDir


def pair(tmp_path, base_s: float, cur_s: float, base_err: float = 0.01, cur_err: float = 0.01, rows: int = 4000):
    b = synthetic_rundir(tmp_path / "base", rows, targets=(("t", base_s),), error_rate=base_err, seed=1)
    c = synthetic_rundir(tmp_path / "cur", rows, targets=(("t", cur_s),), error_rate=cur_err, seed=2)
    return c, b


def by_check(rows):
    return {(r.metric, r.stat): r for r in rows}


@pytest.mark.parametrize("factor, allowance, regressed", [
    (1.0, 0.10, False),  # the same server: no regression
    (1.5, 0.10, True),  # 50% slower: significant and beyond the allowance
    (1.5, 0.60, False),  # ... but within a 60% allowance
    (0.7, 0.00, False),  # faster is never a regression (one-sided)
])
def test_latency_regressions(tmp_path, factor, allowance, regressed):
    c, b = pair(tmp_path, 0.05, 0.05 * factor)
    rows = by_check(compare_target(c / "t", b / "t", allowance))
    p50 = rows[("latency", "p50")]
    assert p50.regressed is regressed
    assert p50.ratio == pytest.approx(factor, rel=0.1)
    lo, hi = p50.ci
    assert lo <= p50.ratio <= hi


@pytest.mark.parametrize("base_err, cur_err, regressed", [(0.01, 0.01, False), (0.01, 0.10, True), (0.10, 0.01, False)])
def test_error_rate_regressions(tmp_path, base_err, cur_err, regressed):
    c, b = pair(tmp_path, 0.05, 0.05, base_err, cur_err)
    err = by_check(compare_target(c / "t", b / "t", 0.10))[("error_rate", None)]
    assert err.regressed is regressed
    assert err.current == pytest.approx(cur_err, abs=0.02) and err.baseline == pytest.approx(base_err, abs=0.02)


def test_too_few_samples_are_skipped_not_judged(tmp_path):
    c, b = pair(tmp_path, 0.05, 0.5, rows=300)  # p99 needs 1,000 samples in each run
    rows = by_check(compare_target(c / "t", b / "t", 0.10))
    assert "too few" in rows[("latency", "p99")].skipped and not rows[("latency", "p99")].regressed
    assert rows[("latency", "p50")].regressed


def test_reasons_are_typed_and_name_the_target(tmp_path):
    c, b = pair(tmp_path, 0.05, 0.1)
    result = compare_runs(RunDir(c), RunDir(b), 0.10)
    reasons = regression_reasons(result)
    assert not result.passed and reasons
    assert all(r.kind is Kind.REGRESSION and r.target == "t" and "regressed" in r.text for r in reasons)
