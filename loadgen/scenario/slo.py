"""Service-level objectives: parsing ``[scope:] metric.stat op value`` lines and checking them.

Grammar (one objective per line)::

    latency.p99 < 300ms            distribution metric . statistic, a duration
    burst: latency.p99 < 800ms     only the phase (or target) named 'burst'
    naive/burst: ttft.p50 < 1s     target 'naive', phase 'burst'
    error_rate < 0.1%              a fraction: '0.1%' or 0.001
    goodput >= 99%                 the fraction of requests that succeeded within every per-request SLO
    achieved_qps >= 95             requests per second completed

An unknown metric or statistic is a ValueError at parse time, listing the valid choices: an objective
that cannot be checked must never pass silently.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from loadgen.units import fmt_ms, parse_duration, parse_percent

#: Distribution metrics, each defined once in loadgen.analysis.metrics.
DISTRIBUTIONS = ("latency", "ttft", "itl", "tpot", "service_time", "send_lag")
#: Scalar metrics of a phase or run.
SCALARS = ("error_rate", "goodput", "achieved_qps")
#: Named statistics; any ``pNN`` or ``pNN.N`` percentile is accepted too.
STATS = ("mean", "min", "max", "p50", "p90", "p95", "p99", "p99.9")
_PCT = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
#: ``[scope:] lhs op rhs``; a scope is any text without ':' (a phase may be called "ramp (50%)").
_LINE = re.compile(r"^\s*(?:(?P<scope>[^:]+?)\s*:\s*)?(?P<lhs>[A-Za-z_][A-Za-z0-9_.]*)\s*"
                   r"(?P<op><=|>=|<|>)\s*(?P<rhs>\S+)\s*$")


@dataclass(frozen=True)
class SLO:
    """One parsed objective. ``threshold`` is in seconds for distributions, a fraction for rates."""

    expr: str
    metric: str
    stat: str | None
    op: str
    threshold: float
    scope: str | None = None  # 'phase', 'target' or 'target/phase'

    @property
    def name(self) -> str:
        return self.expr

    def check(self, value: float | None) -> bool:
        """True when ``value`` meets the objective; a missing or NaN value never passes."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        return _OPS[self.op](value, self.threshold)

    def scope_parts(self) -> tuple[str | None, str | None]:
        """(target, phase_or_target) of the scope; either may be None."""
        if not self.scope:
            return None, None
        if "/" in self.scope:
            target, phase = self.scope.split("/", 1)
            return target.strip(), phase.strip()
        return None, self.scope


def valid_stat(stat: str) -> bool:
    if stat in STATS:
        return True
    m = _PCT.match(stat)
    return bool(m) and 0 < float(m.group(1)) < 100


def percentile_of(stat: str) -> float | None:
    """'p99.9' -> 99.9; None for mean/min/max."""
    m = _PCT.match(stat)
    return float(m.group(1)) if m else None


def parse_slo(text: str) -> SLO:
    """Parse one objective line. Raises ValueError with a message saying what was expected."""
    if not isinstance(text, str):
        raise ValueError(f"expected an objective such as 'latency.p99 < 300ms', got {text!r}")
    m = _LINE.match(text)
    if not m:
        raise ValueError(f"expected an objective such as 'latency.p99 < 300ms' or 'error_rate < 1%', got {text!r}")
    scope, lhs, op, rhs = m.group("scope"), m.group("lhs"), m.group("op"), m.group("rhs")
    if lhs in SCALARS:
        try:
            threshold = float(rhs) if lhs == "achieved_qps" else parse_percent(rhs)
        except ValueError:
            what = "a number" if lhs == "achieved_qps" else "a fraction such as '1%' or 0.01"
            raise ValueError(f"{lhs}: expected {what}, got {rhs!r}") from None
        if lhs == "achieved_qps":
            if not math.isfinite(threshold) or threshold < 0:
                raise ValueError(f"{lhs}: expected a finite, non-negative rate in requests per second, got {rhs!r}")
        elif not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{lhs}: expected a fraction between 0% and 100%, got {rhs!r}")
        _never_met(lhs, op, threshold, 1.0 if lhs != "achieved_qps" else math.inf, rhs)
        return SLO(text.strip(), lhs, None, op, threshold, scope)
    metric, _, stat = lhs.partition(".")
    if metric not in DISTRIBUTIONS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(DISTRIBUTIONS + SCALARS)}")
    if not stat or not valid_stat(stat):
        raise ValueError(f"{metric}: unknown statistic {stat!r}; expected one of {', '.join(STATS)} (or any pNN)")
    try:
        threshold = parse_duration(rhs)
    except ValueError:
        raise ValueError(f"{lhs}: expected a duration such as '300ms', got {rhs!r}") from None
    _never_met(lhs, op, threshold, math.inf, rhs)
    return SLO(text.strip(), metric, stat, op, threshold, scope)


def _never_met(lhs: str, op: str, threshold: float, top: float, rhs: str) -> None:
    """An objective no measurement can meet (``< 0``, a fraction ``> 100%``) is a mistake, not a check."""
    if (op == "<" and threshold <= 0) or (op == ">" and threshold >= top):
        raise ValueError(f"{lhs} {op} {rhs} can never be met")


def show_value(result: dict, value=None) -> str:
    """A value of an objective's result dict for people: milliseconds for distributions, a percentage
    for error_rate and goodput. ``value`` defaults to the measured one (pass a CI bound to show that)."""
    v = result.get("value") if value is None else value
    if v is None:
        return "no value"
    if v == "inf":
        return "inf"
    if result.get("stat"):
        return fmt_ms(float(v))
    if result.get("metric") in ("error_rate", "goodput"):
        return f"{float(v) * 100:.2f}%"
    return f"{float(v):.4g}"
