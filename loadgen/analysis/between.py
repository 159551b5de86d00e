"""Baseline checks that measure between-run noise: is this RunDir worse than the baseline, beyond what
varies from one run to the next?

A run's requests describe that run. The within-run check (:mod:`loadgen.analysis.regression`) bootstraps
requests as if independent, so a machine that drifts by 20% between two runs fails it though nothing
changed. With repeated runs on either side (``--repeat N``) the comparison is run against run instead:

- each percentile (the checks of :data:`loadgen.analysis.regression.CHECKS`) becomes one value per run,
  read from each run's summary, and is compared on a log scale (the effect is a ratio);
- the test is Welch's t-test, one-sided (a regression is *worse*), on the per-run log values, with the
  Welch-Satterthwaite degrees of freedom. It can reach significance with 3 runs against 3, where a rank
  test cannot (its smallest one-sided p-value over 3 vs 3 is 1/20 = 0.05). With one run on one side, that
  side's spread is taken to be the repeated side's (a prediction test, N - 1 degrees of freedom);
- the effect is the ratio of the geometric means current / baseline, with a 90% interval (its lower end
  is the one-sided 95% bound the test uses);
- a check fails only when the ratio exceeds 1 + the allowance AND the one-sided p-value is below 0.05.
  The error rate is compared the same way on the per-run rates themselves (a difference, not a ratio),
  failing when worse by more than the allowance (relative) and 0.1 point, and significant.

With one run on each side between-run noise was not measured: the within-run bootstrap is used, and
the result says so plainly (``notes``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from loadgen.analysis.regression import CHECKS, compare_target, regression_reasons
from loadgen.analysis.repeats import repeat_groups, run_value
from loadgen.analysis.tdist import t_ppf, t_sf
from loadgen.analysis.verdict import Kind, Reason
from loadgen.records.rundir import SUMMARY, RunDir

ALPHA = 0.05  # one-sided
NOT_MEASURED = ("one run on each side: between-run noise was not measured. The within-run bootstrap treats "
                "requests as independent, so run-to-run drift of the machine can fail it; run both sides with "
                "--repeat 3 (or more) for a check that measures it")


def welch(cur: list[float], base: list[float], log: bool = True) -> dict:
    """One-sided test that ``cur`` is larger than ``base`` (per-run values; on their logs when ``log``).

    Returns {'effect', 'ci', 'p_value', 'df', 't', 'test'}: ``effect`` is the ratio of geometric means
    (``log``) or the difference of means; ``ci`` its 90% interval (the lower end is the one-sided 95%
    bound); ``test`` 'welch', or 'prediction' when one side has a single value (its spread is taken to
    be the other side's). Needs two values on at least one side."""
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
        half = t_ppf(1 - ALPHA, df) * se
    else:  # identical values within each side: any difference is certain
        t = math.inf if d > 0 else -math.inf if d < 0 else 0.0
        p = 0.0 if d > 0 else 1.0 if d < 0 else 0.5
        half = 0.0
    lo, hi = d - half, d + half
    effect, ci = (math.exp(d), [math.exp(lo), math.exp(hi)]) if log else (d, [lo, hi])
    return {"effect": effect, "ci": ci, "p_value": p, "df": df, "t": t, "test": test}


def _gmean(v: list[float]) -> float:
    return float(math.exp(np.mean(np.log(v))))


def _skip(c: list, b: list) -> str:
    if not c and not b:
        return "not measured in these runs"
    return "measured in too few runs (needs one on each side and two on one of them)"


def compare_run_sets(cur: list[dict], base: list[dict], allowance: float) -> list[dict]:
    """Run-level checks of one target: ``cur`` and ``base`` are the summaries of its runs on each side."""
    out = []
    for metric, p in CHECKS:
        key, stat = f"{metric}.p{p:g}", f"p{p:g}"
        c = [v for v in (run_value(s, key) for s in cur) if v is not None and 0 < v < math.inf]
        b = [v for v in (run_value(s, key) for s in base) if v is not None and 0 < v < math.inf]
        row = {"metric": metric, "stat": stat, "method": "between-run", "current_runs": c, "baseline_runs": b}
        if not c or not b or max(len(c), len(b)) < 2:
            out.append(row | {"skipped": _skip(c, b), "regressed": False, "significant": False})
            continue
        w = welch(c, b, log=True)
        significant = w["p_value"] < ALPHA
        out.append(row | {"baseline": _gmean(b), "current": _gmean(c), "ratio": w["effect"], "ci": w["ci"],
                          "ci_level": 1 - 2 * ALPHA, "p_value": w["p_value"], "df": w["df"], "test": w["test"],
                          "significant": bool(significant),
                          "regressed": bool(w["effect"] > 1.0 + allowance and significant)})
    c = [v for v in (run_value(s, "error_rate") for s in cur) if v is not None]
    b = [v for v in (run_value(s, "error_rate") for s in base) if v is not None]
    row = {"metric": "error_rate", "stat": None, "method": "between-run", "current_runs": c, "baseline_runs": b}
    if not c or not b or max(len(c), len(b)) < 2:
        return out + [row | {"skipped": _skip(c, b), "regressed": False, "significant": False}]
    w = welch(c, b, log=False)
    r1, r0 = float(np.mean(c)), float(np.mean(b))
    significant = w["p_value"] < ALPHA
    worse = (r1 - r0) > allowance * max(r0, 0.0) and (r1 - r0) > 0.001
    return out + [row | {"baseline": r0, "current": r1, "difference": w["effect"], "ci": w["ci"],
                         "ci_level": 1 - 2 * ALPHA, "p_value": w["p_value"], "df": w["df"], "test": w["test"],
                         "significant": bool(significant), "regressed": bool(worse and significant)}]


def _summaries(rd: RunDir, entries: list[dict]) -> list[dict]:
    out = []
    for e in entries:
        f = Path(rd.path) / e["dir"] / SUMMARY
        if f.is_file():
            out.append(json.loads(f.read_text()))
    return out


def compare_baseline(current: RunDir, baseline: RunDir, allowance: float) -> dict:
    """regression.json: each target of ``current`` against the baseline's of the same name (a repeated
    target's runs together), between-run where either side has repeated runs, else within-run."""
    cur_groups = repeat_groups(current.meta().get("targets", []))
    base_groups = repeat_groups(baseline.meta().get("targets", []))
    repeated = any(len(es) > 1 for es in (*cur_groups.values(), *base_groups.values()))
    result = {"baseline": str(baseline.path), "max_regression": allowance, "targets": {}, "missing": [],
              "notes": [], "methods": {}}
    pairs = [(name, name) for name in cur_groups if name in base_groups]
    result["missing"] = [name for name in cur_groups if name not in base_groups]
    if not pairs and len(cur_groups) == 1 and len(base_groups) == 1:
        # one target each under different names (e.g. a --target URL run against a reference run)
        pairs, result["missing"] = [(next(iter(cur_groups)), next(iter(base_groups)))], []
    for c, b in pairs:
        ce, be = cur_groups[c], base_groups[b]
        if len(ce) == 1 and len(be) == 1:
            result["targets"][c] = compare_target(current.path / ce[0]["dir"], baseline.path / be[0]["dir"],
                                                  allowance)
            result["methods"][c] = "within-run"
            result["notes"].append(f"{c}: {NOT_MEASURED}")
            continue
        result["targets"][c] = compare_run_sets(_summaries(current, ce), _summaries(baseline, be), allowance)
        result["methods"][c] = "between-run"
        result["runs"] = result.get("runs", {}) | {c: {"current": len(ce), "baseline": len(be)}}
        if min(len(ce), len(be)) == 1:
            side = "baseline" if len(be) == 1 else "current RunDir"
            result["notes"].append(f"{c}: the {side} has one run: its between-run spread is taken to be the other "
                                   "side's (a prediction test)")
    result["repeated"] = repeated
    result["passed"] = not any(r["regressed"] for rs in result["targets"].values() for r in rs)
    return result


def baseline_reasons(result: dict) -> list[Reason]:
    """One verdict reason per regressed check (within-run targets as :func:`regression_reasons` words them)."""
    methods = result.get("methods", {})
    within = {t: rows for t, rows in result["targets"].items() if methods.get(t, "within-run") == "within-run"}
    lines = regression_reasons(result | {"targets": within})
    allowance = result["max_regression"] * 100
    for target, rows in result["targets"].items():
        if target in within:
            continue
        for r in rows:
            if not r["regressed"]:
                continue
            runs = f"{len(r['current_runs'])} runs vs {len(r['baseline_runs'])}"
            if r["metric"] == "error_rate":
                text = (f"{target}: error_rate regressed {r['baseline'] * 100:.2f}% -> {r['current'] * 100:.2f}% "
                        f"(mean of {runs}; difference 90% CI {r['ci'][0] * 100:+.2f}..{r['ci'][1] * 100:+.2f} "
                        f"points, p = {r['p_value']:.3f})")
            else:
                text = (f"{target}: {r['metric']}.{r['stat']} regressed {r['baseline'] * 1e3:.1f} ms -> "
                        f"{r['current'] * 1e3:.1f} ms ({(r['ratio'] - 1) * 100:+.0f}%, geometric means of {runs}; "
                        f"ratio 90% CI {r['ci'][0]:.2f}..{r['ci'][1]:.2f}, one-sided p = {r['p_value']:.3f}) "
                        f"beyond the {allowance:g}% allowance")
            lines.append(Reason(Kind.REGRESSION, target, text))
    return lines
