"""Baseline regression checks: is this run worse than a baseline run, beyond noise?

A percentile regresses when it is worse by more than the allowance (``--max-regression 10%``) AND the
difference is statistically significant: the 95% bootstrap interval of the ratio current/baseline lies
wholly above 1. Run-to-run noise then does not fail builds, and a real slowdown hidden in a small
sample is reported as "not significant" rather than passed silently. Error rates are compared with a
two-proportion z-test the same way (worse by more than the allowance, in absolute terms, and
significant).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from loadgen.analysis.metrics import metric_samples, records_frame
from loadgen.analysis.stats import nearest_rank_unsorted
from loadgen.analysis.verdict import Kind, Reason
from loadgen.errors import RunDirError, UsageError
from loadgen.records.results import Check, Regression
from loadgen.records.rundir import META, REQUESTS, RunDir
from loadgen.records.schema import read_records, records_exist

#: (metric, percentile) pairs compared against a baseline, when both runs have samples.
CHECKS = (("latency", 50.0), ("latency", 90.0), ("latency", 99.0), ("ttft", 50.0), ("ttft", 99.0),
          ("itl", 50.0), ("itl", 99.0), ("service_time", 99.0))
BOOTSTRAP = 1000
MAX_SAMPLE = 4_000  # larger samples are subsampled for the bootstrap (the point estimate uses all)


def _samples(frame, metric: str) -> np.ndarray:
    ok = frame[frame["ok"] & frame["recorded"]]
    x = metric_samples(ok, metric)
    return x[~np.isnan(x)]


def bootstrap_ratio(cur: np.ndarray, base: np.ndarray, p: float, seed: int = 0,
                    rounds: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile-bootstrap interval of percentile_p(cur) / percentile_p(base)."""
    rng = np.random.default_rng(seed)
    c = cur if len(cur) <= MAX_SAMPLE else rng.choice(cur, MAX_SAMPLE, replace=False)
    b = base if len(base) <= MAX_SAMPLE else rng.choice(base, MAX_SAMPLE, replace=False)
    q = p / 100.0
    rc = np.quantile(rng.choice(c, (rounds, len(c)), replace=True), q, axis=1, method="inverted_cdf")
    rb = np.quantile(rng.choice(b, (rounds, len(b)), replace=True), q, axis=1, method="inverted_cdf")
    ratios = rc / np.maximum(rb, 1e-12)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return float(lo), float(hi)


def _error_test(cur, base, allowance: float) -> Check:
    n1, n0 = len(cur), len(base)
    e1, e0 = int(cur["failed"].sum()), int(base["failed"].sum())
    r1, r0 = (e1 / n1 if n1 else 0.0), (e0 / n0 if n0 else 0.0)
    pooled = (e1 + e0) / max(n1 + n0, 1)
    se = math.sqrt(max(pooled * (1 - pooled) * (1 / max(n1, 1) + 1 / max(n0, 1)), 1e-18))
    z = (r1 - r0) / se
    diff_se = math.sqrt(max(r1 * (1 - r1) / max(n1, 1) + r0 * (1 - r0) / max(n0, 1), 0.0))
    ci = [r1 - r0 - 1.96 * diff_se, r1 - r0 + 1.96 * diff_se]
    significant = z > 1.96
    worse = (r1 - r0) > allowance * max(r0, 0.0) and (r1 - r0) > 0.001
    return Check(metric="error_rate", stat=None, baseline=r0, current=r1, difference=r1 - r0, ci=ci,
                 significant=bool(significant), regressed=bool(worse and significant))


def compare_target(cur_dir: Path, base_dir: Path, allowance: float, seed: int = 0) -> list[Check]:
    """Regression checks of one target's records against the baseline's."""
    cur = records_frame(read_records(cur_dir / REQUESTS))
    base = records_frame(read_records(base_dir / REQUESTS))
    return compare_frames(cur, base, allowance, seed)


def compare_frames(cur, base, allowance: float, seed: int = 0) -> list[Check]:
    """Regression checks of records (:func:`~loadgen.analysis.metrics.records_frame` frames) against a
    baseline's: every request taken as an independent sample, whatever run it came from."""
    cur = cur[cur["recorded"]]
    base = base[base["recorded"]]
    out = []
    for metric, p in CHECKS:
        c, b = _samples(cur, metric), _samples(base, metric)
        need = max(20, math.ceil(10 / (1 - p / 100.0)))  # ten samples beyond the percentile, in each run
        if len(c) < need or len(b) < need:
            out.append(Check(metric=metric, stat=f"p{p:g}", skipped=f"too few samples (need {need} in each run)",
                             regressed=False, significant=False))
            continue
        vc, vb = nearest_rank_unsorted(c, p), nearest_rank_unsorted(b, p)
        ratio = vc / vb if vb > 0 else math.inf
        lo, hi = bootstrap_ratio(c, b, p, seed)
        significant = lo > 1.0
        out.append(Check(metric=metric, stat=f"p{p:g}", baseline=vb, current=vc, ratio=ratio, ci=[lo, hi],
                         significant=bool(significant), regressed=bool(ratio > 1.0 + allowance and significant)))
    out.append(_error_test(cur, base, allowance))
    return out


def check_baseline(path) -> RunDir:
    """The baseline RunDir at ``path``, checked before any traffic is sent: its meta.json is what latbench
    writes and every target's records can be read. Raises :class:`UsageError` (exit 2) saying what is wrong."""
    rd = RunDir(path)
    if not rd.path.is_dir():
        raise UsageError(f"--baseline {path}: not a directory")
    if not (rd.path / META).is_file():
        raise UsageError(f"--baseline {path}: not a RunDir (no {META})")
    try:
        dirs = rd.target_dirs()
    except RunDirError as exc:
        raise UsageError(f"--baseline {path}: {exc}") from None
    if not dirs:
        raise UsageError(f"--baseline {path}: the RunDir holds no targets")
    for name, d in dirs.items():
        f = rd.path / d / REQUESTS
        if not records_exist(f):
            raise UsageError(f"--baseline {path}: target {name!r} has no records ({f} is missing)")
        try:
            read_records(f)
        except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
            raise UsageError(f"--baseline {path}: target {name!r}: {f} cannot be read "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    return rd


def compare_runs(current: RunDir, baseline: RunDir, allowance: float) -> Regression:
    """Regression checks of every target of ``current`` that the baseline also has (matched by name)."""
    base_dirs, cur_dirs = baseline.target_dirs(), current.target_dirs()
    result = Regression(baseline=str(baseline.path), max_regression=allowance, targets={}, missing=[])
    for name, d in cur_dirs.items():
        if name not in base_dirs:
            result.missing.append(name)
            continue
        result.targets[name] = compare_target(current.path / d, baseline.path / base_dirs[name], allowance)
    if not result.targets and len(base_dirs) == 1 and len(cur_dirs) == 1:
        # one target each under different names (e.g. a --target URL run against a reference run)
        (b,), ((c, cd),) = list(base_dirs.values()), list(cur_dirs.items())
        result.targets[c] = compare_target(current.path / cd, baseline.path / b, allowance)
        result.missing = []
    result.passed = not any(r.regressed for rs in result.targets.values() for r in rs)
    return result


def regression_reasons(result: Regression, targets: dict[str, list[Check]] | None = None) -> list[Reason]:
    """One verdict reason per regressed check (of ``targets``: by default all of the result's)."""
    lines = []
    for target, rows in (result.targets if targets is None else targets).items():
        for r in rows:
            if not r.regressed:
                continue
            if r.metric == "error_rate":
                text = (f"{target}: error_rate regressed {r.baseline * 100:.2f}% -> {r.current * 100:.2f}% "
                        f"(difference 95% CI {r.ci[0] * 100:+.2f}..{r.ci[1] * 100:+.2f} points)")
            else:
                text = (f"{target}: {r.metric}.{r.stat} regressed {r.baseline * 1e3:.1f} ms -> "
                        f"{r.current * 1e3:.1f} ms ({(r.ratio - 1) * 100:+.0f}%, ratio 95% CI "
                        f"{r.ci[0]:.2f}..{r.ci[1]:.2f}) beyond the {result.max_regression * 100:g}% allowance")
            lines.append(Reason(Kind.REGRESSION, target, text))
    return lines
