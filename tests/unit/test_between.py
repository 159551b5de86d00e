"""The run-level baseline test, table-driven with values worked by hand (Welch's t on per-run log values),
and the choice between it and the within-run bootstrap on real RunDir files."""

import json
import math

import pytest

from benchmarks.report_speed import synthetic_repeated_rundir, synthetic_rundir
from loadgen.analysis.repeated_baseline import (
    baseline_reasons,
    build_regression,
    compare_baseline,
    compare_run_sets,
    welch,
)
from loadgen.analysis.tdist import t_ppf, t_sf
from loadgen.analysis.verdict import Kind
from loadgen.records.results import Summary
from loadgen.records.rundir import RunDir

E = math.exp


def hand_welch(x, y):
    """Welch's statistic, degrees of freedom and one-sided p, written out from the textbook definition."""
    n1, n0 = len(x), len(y)
    m1, m0 = sum(x) / n1, sum(y) / n0
    v1 = sum((a - m1) ** 2 for a in x) / (n1 - 1) / n1
    v0 = sum((a - m0) ** 2 for a in y) / (n0 - 1) / n0
    t = (m1 - m0) / math.sqrt(v1 + v0)
    df = (v1 + v0) ** 2 / (v1 ** 2 / (n1 - 1) + v0 ** 2 / (n0 - 1))
    return t, df, t_sf(t, df)


@pytest.mark.parametrize("cur, base, test, t, df, p, ratio", [
    # equal spreads, 3 vs 3: df = 4, t = 0.1 / sqrt(2 * 0.01 / 3); not significant
    ([1.0, 1.1, 1.2], [0.9, 1.0, 1.1], "welch", 1.224745, 4.0, 0.143932, E(0.1)),
    # +49% at 3 vs 3 reaches significance, which no rank test over 3 vs 3 can (its floor is p = 0.05)
    ([1.3, 1.4, 1.5], [0.9, 1.0, 1.1], "welch", 4.898979, 4.0, None, E(0.4)),
    # unequal spreads: fractional Welch-Satterthwaite degrees of freedom
    ([1.0, 1.5, 2.0, 1.2, 1.8], [1.0, 1.05, 0.95], "welch", None, None, None, E(0.5)),
    # one baseline run: its spread is taken to be the current runs' (prediction test, n - 1 df)
    ([1.0, 1.1, 1.2], [0.9], "prediction", 0.2 / (0.1 * math.sqrt(1 / 3 + 1)), 2.0, None, E(0.2)),
    # faster is never a regression: p near 1
    ([0.5, 0.55, 0.6], [1.0, 1.1, 1.2], "welch", None, None, None, E(-0.55)),
])
def test_welch_on_log_values(cur, base, test, t, df, p, ratio):
    w = welch([E(v) for v in cur], [E(v) for v in base], log=True)
    assert w.test == test and w.effect == pytest.approx(ratio)
    if test == "welch":
        ht, hdf, hp = hand_welch(cur, base)
        assert (w.t, w.df, w.p_value) == pytest.approx((ht, hdf, hp))
    else:  # closed form of t with 2 df: P(T > t) = 1/2 - t / (2 sqrt(2 + t^2))
        assert w.p_value == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)))
    if t is not None:
        assert w.t == pytest.approx(t, rel=1e-5)
    if df is not None:
        assert w.df == pytest.approx(df)
    if df == 4.0:  # closed form of t with 4 df: P(T > t) = 1/2 - t (t^2 + 6) / (2 (t^2 + 4)^1.5)
        tt = w.t
        assert w.p_value == pytest.approx(0.5 - tt * (tt * tt + 6) / (2 * (tt * tt + 4) ** 1.5), abs=1e-9)
    if p is not None:
        assert w.p_value == pytest.approx(p, abs=1e-5)
    # the 90% interval's lower end is the one-sided 95% bound: above 1 exactly when p < 0.05
    lo, hi = w.ci
    assert lo < w.effect < hi
    assert (lo > 1.0) == (w.p_value < 0.05)
    se = math.log(w.effect) / w.t
    assert lo == pytest.approx(w.effect * E(-t_ppf(0.95, w.df) * se))


def test_identical_runs_make_any_difference_certain_and_none_not_significant():
    assert welch([2.0, 2.0], [1.0, 1.0]).p_value == 0.0
    assert welch([1.0, 1.0], [1.0, 1.0]).p_value == 0.5
    with pytest.raises(ValueError):
        welch([1.0], [1.0])


def summary(p50: float, error_rate: float = 0.0) -> Summary:
    pcts = {f"p{p:g}": {"value": p50 * f} for p, f in ((50, 1.0), (90, 1.5), (99, 2.0))}
    desc = {"n": 500, "mean": p50, "percentiles": pcts}
    empty = {"n": 0, "mean": None, "percentiles": {}}
    return Summary.model_validate({"overall": {"metrics": {"latency": desc, "service_time": desc, "ttft": empty,
                                                           "itl": empty}, "error_rate": error_rate}})


@pytest.mark.parametrize("cur, base, allowance, regressed, significant", [
    ([0.100, 0.110, 0.090], [0.100, 0.090, 0.110], 0.0, False, False),  # the same: nothing
    ([0.150, 0.165, 0.135], [0.100, 0.110, 0.090], 0.0, True, True),  # +50%: significant at 3 vs 3
    ([0.150, 0.165, 0.135], [0.100, 0.110, 0.090], 0.60, False, True),  # ... but within a 60% allowance
    ([0.150, 0.080, 0.220], [0.100, 0.110, 0.090], 0.0, False, False),  # +30% in the mean, but too noisy
    ([0.070, 0.077, 0.063], [0.100, 0.110, 0.090], 0.0, False, False),  # faster: one-sided
    ([0.150, 0.165, 0.135, 0.150, 0.140], [0.100], 0.0, True, True),  # 5 runs vs one: prediction test
])
def test_run_level_checks(cur, base, allowance, regressed, significant):
    rows = {(r.metric, r.stat): r for r in compare_run_sets([summary(v) for v in cur], [summary(v) for v in base],
                                                                  allowance)}
    assert ("service_time", "p99") not in rows  # between runs it moves with latency.p99
    p50 = rows[("latency", "p50")]
    assert (p50.regressed, p50.significant) == (regressed, significant)
    # three checks tested (latency p50, p90, p99; no TTFT or ITL, no errors): each at 0.05 / 3
    assert p50.checks == 3 and p50.alpha == pytest.approx(0.05 / 3)
    assert p50.ci_level == pytest.approx(1 - 0.1 / 3)
    assert p50.significant == (p50.p_value < 0.05 / 3) == (p50.ci[0] > 1.0)
    assert rows[("error_rate", None)].skipped == "no errors in any run"
    assert p50.current_runs == pytest.approx(cur) and p50.baseline_runs == pytest.approx(base)
    gm = lambda v: E(sum(map(math.log, v)) / len(v))  # noqa: E731
    assert p50.ratio == pytest.approx(gm(cur) / gm(base)) and p50.current == pytest.approx(gm(cur))
    assert rows[("ttft", "p50")].skipped == "not measured in these runs" and not rows[("ttft", "p50")].regressed


@pytest.mark.parametrize("cur, base, regressed", [
    ([0.10, 0.11, 0.09], [0.0, 0.001, 0.0], True),
    ([0.10, 0.0, 0.0], [0.0, 0.0, 0.0], False),  # one bad run in three: not significant
    ([0.0, 0.0, 0.0], [0.01, 0.0, 0.02], False),  # fewer errors: one-sided
])
def test_error_rates_between_runs(cur, base, regressed):
    rows = compare_run_sets([summary(0.1, e) for e in cur], [summary(0.1, e) for e in base], 0.10)
    err = rows[-1]
    assert err.metric == "error_rate" and err.regressed is regressed
    assert err.current == pytest.approx(sum(cur) / 3)
    assert err.difference == pytest.approx((sum(cur) - sum(base)) / 3)
    assert err.checks == 4 and err.alpha == pytest.approx(0.05 / 4)  # the error rate is a fourth check


# ---- which test a pair of RunDirs gets, on real files --------------------------------------------------------

def test_one_run_each_side_is_the_within_run_bootstrap_and_says_noise_was_not_measured(tmp_path):
    b = synthetic_rundir(tmp_path / "b", 2000, targets=(("t", 0.05),), seed=1)
    c = synthetic_rundir(tmp_path / "c", 2000, targets=(("t", 0.075),), seed=2)
    result = build_regression(RunDir(c), RunDir(b), 0.10)
    assert result.methods == {"t": "within-run"} and not result.repeated
    assert any("between-run noise was not measured" in n for n in result.notes)
    assert not result.passed and all("bootstrap" not in r.text for r in baseline_reasons(result))
    assert any(r.kind is Kind.REGRESSION and "latency.p50 regressed" in r.text for r in baseline_reasons(result))


@pytest.mark.parametrize("cur, base, passed, test", [
    ([0.05, 0.055, 0.048], [0.05, 0.052, 0.047], True, "welch"),
    ([0.075, 0.08, 0.072], [0.05, 0.052, 0.047], False, "welch"),
    ([0.075, 0.08, 0.072, 0.078, 0.074], [0.05], False, "prediction"),
])
def test_repeated_rundirs_are_compared_run_against_run(tmp_path, cur, base, passed, test):
    c = synthetic_repeated_rundir(tmp_path / "c", {"t": cur}, rows=1500, seed=3)
    b = (synthetic_repeated_rundir(tmp_path / "b", {"t": base}, rows=1500, seed=4) if len(base) > 1
         else synthetic_rundir(tmp_path / "b", 1500, targets=(("t", base[0]),), seed=4))
    result = build_regression(RunDir(c), RunDir(b), 0.10)
    assert result.methods == {"t": "between-run"} and result.passed is passed
    assert compare_baseline(RunDir(c), RunDir(b), 0.10) == result.to_json()  # the JSON regression.json holds
    p50 = next(r for r in result.targets["t"] if r.metric == "latency" and r.stat == "p50")
    assert p50.test == test and len(p50.current_runs) == len(cur) and len(p50.baseline_runs) == len(base)
    runs = [json.loads((c / f"t-rep{k}" / "summary.json").read_text()) for k in range(1, len(cur) + 1)]
    assert p50.current_runs == [s["overall"]["metrics"]["latency"]["percentiles"]["p50"]["value"] for s in runs]
    if len(base) == 1:
        assert any("has one run" in n for n in result.notes)
    reasons = baseline_reasons(result)
    assert bool(reasons) is not passed
    assert all(r.target == "t" and f"geometric means of {len(cur)} runs vs" in r.text for r in reasons)
