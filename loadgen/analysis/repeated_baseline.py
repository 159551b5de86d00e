"""Baseline checks that measure between-run noise: is this RunDir worse than the baseline, beyond what
varies from one run to the next?

A run's requests describe that run. The within-run check (:mod:`loadgen.analysis.regression`) bootstraps
requests as if independent, so a machine that drifts by 20% between two runs fails it though nothing
changed. With repeated runs on either side (``--repeat N``) the comparison is run against run instead:

- each percentile (latency p50/p90/p99, TTFT and ITL p50/p99: :data:`RUN_CHECKS`) becomes one value per
  run, read from each run's summary, and is compared on a log scale (the effect is a ratio);
- the test is Welch's t-test, one-sided (a regression is *worse*), on the per-run log values, with the
  Welch-Satterthwaite degrees of freedom. It can reach significance with 3 runs against 3, where a rank
  test cannot (its smallest one-sided p-value over 3 vs 3 is 1/20 = 0.05). With one run on one side, that
  side's spread is taken to be the repeated side's (a prediction test, N - 1 degrees of freedom);
- a target has several checks, and a build that changed nothing must fail it at most 5% of the time, not
  5% per check: each check is tested at 0.05 / K, K the number of its checks tested (Bonferroni; the
  percentiles of one run move together, but how closely cannot be told from 3 runs, so no correlation is
  assumed). ``benchmarks/gate_calibration.py`` measured about 8% false alarms without it, 3% with it;
- the effect is the ratio of the geometric means current / baseline, with its two-sided 1 - 0.1/K
  interval (its lower end is the one-sided bound the test uses: above 1 exactly when significant);
- a check fails only when the ratio exceeds 1 + the allowance AND it is significant. The error rate
  (when any run had errors) is compared the same way on the per-run rates themselves (a difference, not a
  ratio), failing when worse by more than the allowance (relative) and 0.1 point, and significant.

With one run on each side between-run noise was not measured: the within-run bootstrap is used, and
the result says so plainly (``notes``).

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from loadgen.analysis.regression import CHECKS, compare_target, regression_reasons
from loadgen.analysis.repeated import repeat_groups, run_value
from loadgen.analysis.tdist import t_ppf, t_sf
from loadgen.analysis.verdict import Kind, Reason
from loadgen.records.results import Check, MetaTarget, Regression, RunCounts, Summary
from loadgen.records.rundir import SUMMARY, RunDir, read_result

ALPHA = 0.05  # one-sided, for all of a target's checks together
#: The percentiles compared run against run: those of the within-run check but service_time.p99, which between
#: runs moves with latency.p99 (the same percentile less the generator's lag) and would only cost the others
#: power under the correction for several checks.
RUN_CHECKS = tuple(c for c in CHECKS if c != ("service_time", 99.0))
NOT_MEASURED = ("one run on each side: between-run noise was not measured. The within-run bootstrap treats "
                "requests as independent, so run-to-run drift of the machine can fail it; run both sides with "
                "--repeat 3 (or more) for a check that measures it")


class Welch(NamedTuple):
    """A one-sided between-run test (:func:`welch`)."""

    effect: float
    ci: list[float]
    p_value: float
    df: float
    t: float
    test: str


def welch(cur: list[float], base: list[float], log: bool = True, alpha: float = 0.05) -> Welch:
    """One-sided test that ``cur`` is larger than ``base`` (per-run values; on their logs when ``log``).

    Returns a :class:`Welch` (effect, ci, p_value, df, t, test): ``effect`` is the ratio of geometric means
    (``log``) or the difference of means; ``ci`` its two-sided 1 - 2 ``alpha`` interval (its lower end is
    the one-sided 1 - ``alpha`` bound: above 1, or 0, exactly when ``p_value`` < ``alpha``); ``test``
    'welch', or 'prediction' when one side has a single value (its spread is taken to be the other side's).
    Needs two values on at least one side."""
    x = np.log(cur) if log else np.asarray(cur, dtype=np.float64)
    y = np.log(base) if log else np.asarray(base, dtype=np.float64)
    n1, n0 = len(x), len(y)
    if n1 < 1 or n0 < 1 or max(n1, n0) < 2:
        raise ValueError("a between-run test needs one value on each side and two on one of them")
    d = float(x.mean() - y.mean())
    if n1 >= 2 and n0 >= 2:
        v1, v0 = float(x.var(ddof=1)) / n1, float(y.var(ddof=1)) / n0
        se = math.sqrt(v1 + v0)
        df = (v1 + v0) ** 2 / (v1 ** 2 / (n1 - 1) + v0 ** 2 / (n0 - 1)) if se > 0 else float(n1 + n0 - 2)
        test = "welch"
    else:
        many = x if n1 >= 2 else y
        se = float(many.std(ddof=1)) * math.sqrt(1.0 / n1 + 1.0 / n0)
        df = float(len(many) - 1)
        test = "prediction"
    if se > 0:
        t = d / se
        p = t_sf(t, df)
        half = t_ppf(1 - alpha, df) * se
    else:  # identical values within each side: any difference is certain
        t = math.inf if d > 0 else -math.inf if d < 0 else 0.0
        p = 0.0 if d > 0 else 1.0 if d < 0 else 0.5
        half = 0.0
    lo, hi = d - half, d + half
    effect, ci = (math.exp(d), [math.exp(lo), math.exp(hi)]) if log else (d, [lo, hi])
    return Welch(effect=effect, ci=ci, p_value=p, df=df, t=t, test=test)


def _gmean(v: list[float]) -> float:
    return float(math.exp(np.mean(np.log(v))))


def _skip(c: list, b: list) -> str:
    if not c and not b:
        return "not measured in these runs"
    return "measured in too few runs (needs one on each side and two on one of them)"


def _values(runs: list[Summary], key: str, positive: bool) -> list[float]:
    vals = [run_value(s, key) for s in runs]
    return [v for v in vals if v is not None and (0 < v < math.inf if positive else v < math.inf)]


def compare_run_sets(cur: list[Summary], base: list[Summary], allowance: float) -> list[Check]:
    """Run-level checks of one target: ``cur`` and ``base`` are the summaries of its runs on each side.

    Each check measured is a one-sided test; the target's checks are corrected together (Bonferroni: each
    at ``ALPHA`` / the number of checks tested, its interval at the same level), so the target fails a
    build that changed nothing at most ``ALPHA`` of the time, however its checks move together."""
    rows, tests = [], []
    for metric, p in RUN_CHECKS:
        key, stat = f"{metric}.p{p:g}", f"p{p:g}"
        c, b = _values(cur, key, True), _values(base, key, True)
        row = Check(metric=metric, stat=stat, method="between-run", current_runs=c, baseline_runs=b)
        rows.append(row)
        if not c or not b or max(len(c), len(b)) < 2:
            row.skipped, row.regressed, row.significant = _skip(c, b), False, False
            continue
        tests.append((row, c, b, True))
    c, b = _values(cur, "error_rate", False), _values(base, "error_rate", False)
    row = Check(metric="error_rate", stat=None, method="between-run", current_runs=c, baseline_runs=b)
    rows.append(row)
    if not c or not b or max(len(c), len(b)) < 2:
        row.skipped, row.regressed, row.significant = _skip(c, b), False, False
    elif not any(c) and not any(b):
        row.skipped, row.regressed, row.significant = "no errors in any run", False, False
    else:
        tests.append((row, c, b, False))
    alpha = ALPHA / max(len(tests), 1)
    for row, c, b, log in tests:
        w = welch(c, b, log=log, alpha=alpha)
        significant = w.p_value < alpha
        row.ci, row.ci_level, row.p_value, row.alpha, row.checks = w.ci, 1 - 2 * alpha, w.p_value, alpha, len(tests)
        row.df, row.test, row.significant = w.df, w.test, bool(significant)
        if log:
            row.baseline, row.current, row.ratio = _gmean(b), _gmean(c), w.effect
            row.regressed = bool(w.effect > 1.0 + allowance and significant)
        else:
            r1, r0 = float(np.mean(c)), float(np.mean(b))
            worse = (r1 - r0) > allowance * max(r0, 0.0) and (r1 - r0) > 0.001
            row.baseline, row.current, row.difference = r0, r1, w.effect
            row.regressed = bool(worse and significant)
    return rows


def _summaries(rd: RunDir, entries: list[MetaTarget]) -> list[Summary]:
    out = []
    for e in entries:
        f = Path(rd.path) / e.dir / SUMMARY
        if f.is_file():
            out.append(Summary.model_validate(read_result(f)))
    return out


def compare_baseline(current: RunDir, baseline: RunDir, allowance: float) -> dict:
    """:func:`build_regression` as the JSON it writes (a plain dict)."""
    return build_regression(current, baseline, allowance).to_json()


def build_regression(current: RunDir, baseline: RunDir, allowance: float) -> Regression:
    """regression.json, as its model: each target of ``current`` against the baseline's of the same name (a
    repeated target's runs together), between-run where either side has repeated runs, else within-run."""
    cur_groups = repeat_groups(current.read_meta().targets)
    base_groups = repeat_groups(baseline.read_meta().targets)
    repeated = any(len(es) > 1 for es in (*cur_groups.values(), *base_groups.values()))
    targets, notes, methods, runs = {}, [], {}, {}
    pairs = [(name, name) for name in cur_groups if name in base_groups]
    missing = [name for name in cur_groups if name not in base_groups]
    if not pairs and len(cur_groups) == 1 and len(base_groups) == 1:
        # one target each under different names (e.g. a --target URL run against a reference run)
        pairs, missing = [(next(iter(cur_groups)), next(iter(base_groups)))], []
    for c, b in pairs:
        ce, be = cur_groups[c], base_groups[b]
        if len(ce) == 1 and len(be) == 1:
            targets[c] = compare_target(current.path / ce[0].dir, baseline.path / be[0].dir, allowance)
            methods[c] = "within-run"
            notes.append(f"{c}: {NOT_MEASURED}")
            continue
        targets[c] = compare_run_sets(_summaries(current, ce), _summaries(baseline, be), allowance)
        methods[c] = "between-run"
        runs[c] = RunCounts(current=len(ce), baseline=len(be))
        if min(len(ce), len(be)) == 1:
            side = "baseline" if len(be) == 1 else "current RunDir"
            notes.append(f"{c}: the {side} has one run: its between-run spread is taken to be the other "
                         "side's (a prediction test)")
    return Regression(baseline=str(baseline.path), max_regression=allowance, targets=targets, missing=missing,
                      notes=notes, methods=methods, **({"runs": runs} if runs else {}), repeated=repeated,
                      passed=not any(r.regressed for rs in targets.values() for r in rs))


def baseline_reasons(result: Regression) -> list[Reason]:
    """One verdict reason per regressed check (within-run targets as :func:`regression_reasons` words them)."""
    methods = result.methods or {}
    targets = result.targets or {}
    within = {t: rows for t, rows in targets.items() if methods.get(t, "within-run") == "within-run"}
    lines = regression_reasons(result, within)
    allowance = result.max_regression * 100
    for target, rows in targets.items():
        if target in within:
            continue
        for r in rows:
            if not r.regressed:
                continue
            runs = f"{len(r.current_runs)} runs vs {len(r.baseline_runs)}"
            level = f"{r.ci_level * 100:.3g}%"
            test = f"one-sided p = {r.p_value:.4f} < {r.alpha:.4f}, 0.05 over {r.checks} checks"
            if r.metric == "error_rate":
                text = (f"{target}: error_rate regressed {r.baseline * 100:.2f}% -> {r.current * 100:.2f}% "
                        f"(mean of {runs}; difference {level} CI {r.ci[0] * 100:+.2f}..{r.ci[1] * 100:+.2f} "
                        f"points, {test})")
            else:
                text = (f"{target}: {r.metric}.{r.stat} regressed {r.baseline * 1e3:.1f} ms -> "
                        f"{r.current * 1e3:.1f} ms ({(r.ratio - 1) * 100:+.0f}%, geometric means of {runs}; "
                        f"ratio {level} CI {r.ci[0]:.2f}..{r.ci[1]:.2f}, {test}) "
                        f"beyond the {allowance:g}% allowance")
            lines.append(Reason(Kind.REGRESSION, target, text))
    return lines
