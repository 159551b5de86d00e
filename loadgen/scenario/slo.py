"""Service-level objectives: parsing ``[scope:] metric.stat op value`` lines and checking them.

Grammar (one objective per line)::

    latency.p99 < 300ms            distribution metric . statistic, a duration
    burst: latency.p99 < 800ms     only the phase (or target) named 'burst'
    naive/burst: ttft.p50 < 1s     target 'naive', phase 'burst'
    error_rate < 0.1%              a fraction: '0.1%' or 0.001
    goodput >= 99%                 the fraction of requests that were good (the scenario's goodput: block)
    goodput_qps >= 50              good requests per second
    achieved_qps >= 95             requests per second completed
    latency.p99 < 300ms @upper     with repeated runs: judged on the bound of the between-run interval
    server.queue_waiting.max < 50  a server-side quantity (the engine's or the GPU's own telemetry) . statistic
    gpu.utilization.mean in 70%..80%   ``in lo..hi``: inside the range, both ends included (any metric)

A suffix ``@median`` or ``@upper`` says how an objective is judged when a scenario runs several times
(``repeat:``): on the median run's value, or on the pessimistic bound of the between-run 95% interval
(the upper one for ``<``, the lower one for ``>``). Without it, ``repeat.judge`` decides. A single run
ignores it.

An unknown metric, statistic or judgement is a ValueError at parse time, listing the valid choices: an
objective that cannot be checked must never pass silently. A server-side objective whose quantity the target's
telemetry did not give is judged "not measurable here", which fails it.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from loadgen import metric_registry
from loadgen.units import fmt_ms, parse_duration, parse_percent

#: Named statistics; any ``pNN`` or ``pNN.N`` percentile is accepted too.
STATS = ("mean", "min", "max", "p50", "p90", "p95", "p99", "p99.9")
_PCT = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
IN = "in"  # ``metric in lo..hi``
#: ``[scope:] lhs op rhs [@judge]``; a scope is any text without ':' (a phase may be called "ramp (50%)").
_LINE = re.compile(r"^\s*(?:(?P<scope>[^:]+?)\s*:\s*)?(?P<lhs>[A-Za-z_][A-Za-z0-9_.]*)\s*"
                   r"(?P<op><=|>=|<|>|in(?=\s))\s*(?P<rhs>[^\s@]+)(?:\s*@\s*(?P<judge>\S*))?\s*$")
#: How an objective is judged over repeated runs (``@median`` / ``@upper`` after it, or ``repeat.judge``).
JUDGES = ("median", "upper")


def split_scope(scope: str | None) -> tuple[str | None, str | None]:
    """(target, phase_or_target) of a scope ``phase``, ``target`` or ``target/phase``; either may be None."""
    if not scope:
        return None, None
    if "/" in scope:
        target, phase = scope.split("/", 1)
        return target.strip(), phase.strip()
    return None, scope.strip()


@dataclass(frozen=True)
class SLO:
    """One parsed objective. ``threshold`` is in seconds for distributions, a fraction for rates."""

    expr: str
    metric: str
    stat: str | None
    op: str
    threshold: float
    scope: str | None = None  # 'phase', 'target' or 'target/phase'
    judge: str | None = None  # 'median' | 'upper' over repeated runs; None: the scenario's repeat.judge
    upper: float | None = None  # ``in lo..hi``: hi (``threshold`` is lo)

    @property
    def name(self) -> str:
        return self.expr

    def check(self, value: float | None) -> bool:
        """True when ``value`` meets the objective; a missing or NaN value never passes."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if self.op == IN:
            return self.threshold <= value <= self.upper
        return _OPS[self.op](value, self.threshold)

    @property
    def server_side(self) -> bool:
        """An objective on a server-side quantity (``server.*``, ``gpu.*``): judged from the target's telemetry."""
        return metric_registry.slo_kind(self.metric) == "telemetry"

    def scope_parts(self) -> tuple[str | None, str | None]:
        """(target, phase_or_target) of the scope; either may be None."""
        return split_scope(self.scope)


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
    judge = m.group("judge")
    if judge is not None and judge not in JUDGES:
        raise ValueError(f"unknown judgement '@{judge}'; expected one of {', '.join('@' + j for j in JUDGES)}")
    quantity, _, qstat = lhs.rpartition(".")
    if metric_registry.slo_kind(quantity) == "telemetry":
        m = metric_registry.metric(quantity)
        if qstat not in m.stats:
            raise ValueError(f"{quantity}: unknown statistic {qstat!r}; expected one of {', '.join(m.stats)}")
        lo, hi = _threshold(lhs, op, rhs, *_reader(m.unit))
        return SLO(text.strip(), quantity, qstat, op, lo, scope, judge, hi)
    if lhs in metric_registry.slo_scalars():
        rate = lhs in metric_registry.slo_rates()
        if op == IN:
            lo, hi = _threshold(lhs, op, rhs, *(_reader("1/s") if rate else _reader("fraction")))
            return SLO(text.strip(), lhs, None, op, lo, scope, judge, hi)
        try:
            threshold = float(rhs) if rate else parse_percent(rhs)
        except ValueError:
            what = "a number" if rate else "a fraction such as '1%' or 0.01"
            raise ValueError(f"{lhs}: expected {what}, got {rhs!r}") from None
        if rate:
            if not math.isfinite(threshold) or threshold < 0:
                raise ValueError(f"{lhs}: expected a finite, non-negative rate in requests per second, got {rhs!r}")
        elif not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{lhs}: expected a fraction between 0% and 100%, got {rhs!r}")
        _never_met(lhs, op, threshold, math.inf if rate else 1.0, rhs)
        return SLO(text.strip(), lhs, None, op, threshold, scope, judge)
    metric, _, stat = lhs.partition(".")
    if metric in ("server", "gpu"):
        names = ", ".join(m.name for m in metric_registry.telemetry_quantities())
        raise ValueError(f"unknown server-side quantity {quantity!r}; expected one of {names} (then .stat)")
    known = metric_registry.distributions()
    if metric not in known:
        expected = ", ".join(known + metric_registry.slo_scalars())
        raise ValueError(f"unknown metric {metric!r}; expected one of {expected}")
    if not stat or not valid_stat(stat):
        raise ValueError(f"{metric}: unknown statistic {stat!r}; expected one of {', '.join(STATS)} (or any pNN)")
    if op == IN:
        lo, hi = _threshold(lhs, op, rhs, *_reader("s"))
        return SLO(text.strip(), metric, stat, op, lo, scope, judge, hi)
    try:
        threshold = parse_duration(rhs)
    except ValueError:
        raise ValueError(f"{lhs}: expected a duration such as '300ms', got {rhs!r}") from None
    _never_met(lhs, op, threshold, math.inf, rhs)
    return SLO(text.strip(), metric, stat, op, threshold, scope, judge)


def _reader(unit: str):
    """(parse, what it expects) of a threshold in ``unit``: a duration, a fraction, or a plain number."""
    if unit == "s":
        return parse_duration, "a duration such as '300ms'"
    if unit == "fraction":
        return parse_percent, "a fraction such as '80%' or 0.8"
    return float, "a number"


def _threshold(lhs: str, op: str, rhs: str, parse, what: str) -> tuple[float, float | None]:
    """(threshold, upper) of ``op rhs``: one value, or both ends of ``lo..hi`` for ``in``."""
    ends = rhs.split("..") if op == IN else [rhs]
    if len(ends) != (2 if op == IN else 1):
        raise ValueError(f"{lhs} in: expected a range such as '70%..80%' (lo..hi), got {rhs!r}")
    try:
        vals = [parse(e) for e in ends]
    except ValueError:
        raise ValueError(f"{lhs}: expected {what}{' at each end of lo..hi' if op == IN else ''}, got {rhs!r}") \
            from None
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{lhs}: expected a finite {what.split(' such')[0]}, got {rhs!r}")
    if op == IN:
        if vals[0] > vals[1]:
            raise ValueError(f"{lhs} in {rhs}: the range is empty (its low end is above its high end)")
        return vals[0], vals[1]
    _never_met(lhs, op, vals[0], math.inf, rhs)
    return vals[0], None


def _never_met(lhs: str, op: str, threshold: float, top: float, rhs: str) -> None:
    """An objective no measurement can meet (``< 0``, a fraction ``> 100%``) is a mistake, not a check."""
    if (op == "<" and threshold <= 0) or (op == ">" and threshold >= top):
        raise ValueError(f"{lhs} {op} {rhs} can never be met")


def show_value(v, stat: str | None, metric: str | None) -> str:
    """A value of an objective (``metric`` and its ``stat``, None for a scalar metric) for people: milliseconds
    for distributions, a percentage for error_rate and goodput ('no value' for None)."""
    if v is None:
        return "no value"
    if metric_registry.slo_kind(metric) == "telemetry":
        unit = metric_registry.metric(metric).unit
        return (f"{float(v) * 100:.1f}%" if unit == "fraction" else fmt_ms(float(v)) if unit == "s"
                else f"{float(v):.4g}")
    if v == "inf":
        return "inf"
    if stat:
        return fmt_ms(float(v))
    if metric_registry.slo_kind(metric) == "fraction":
        return f"{float(v) * 100:.2f}%"
    return f"{float(v):.4g}"
