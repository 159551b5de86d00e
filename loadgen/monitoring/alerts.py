"""Prometheus alerting rules from a scenario's objectives, over the metrics ``latbench watch`` serves.

One rule per objective and target (:func:`alert_rules`), fired when the objective has been breached for
``for_s`` seconds, judged over the last ``range_s`` seconds of the watch's histograms:

- a percentile (``latency.p99 < 300ms``): ``histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m]))) > 0.3``.
  Quantiles from buckets are *interpolated* (linearly, inside the bucket), unlike latbench's exact
  nearest-rank percentiles; but the watch puts a bucket bound on every threshold, so the comparison with the
  threshold is exact: the quantile is read as above ``T`` exactly when fewer than 99% of the requests in the
  range took at most ``T`` (a request of exactly ``T`` aside). The *value* shown is an estimate; the
  *decision* is not.
- a mean: ``rate(_sum) / rate(_count)``, exact over the range.
- a maximum (``ttft.max < 1s``): any request above the threshold, from the bucket on it, exact.
- anything else (``goodput``, ``send_lag``, a minimum): the watch's own judgement, ``latbench_slo_holding == 0``,
  made over its ``--window`` with exact percentiles.
- ``error_rate``: the ratio of the error counter's rate to the total's, exact over the range.

Two rules watch the probe itself: its send lag judged as a run's is (``load.send_lag_threshold``; its numbers
then describe the generator), and a probe that stopped sending. :func:`prometheus_rule` wraps the groups in a Kubernetes
``PrometheusRule`` (prometheus-operator). Durations in seconds.
"""

from __future__ import annotations

import re

from prometheus_client.utils import floatToGoString

from loadgen.monitoring.buckets import HISTOGRAM_METRICS
from loadgen.monitoring.exposition import (
    HISTOGRAMS,
    PHASE,
    PROBE_LAGGING,
    PROBE_QPS,
    REQUESTS,
    SLO_HOLDING,
)
from loadgen.scenario.slo import IN, SLO, percentile_of

_NEGATE_EXACT = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
# from buckets a value equal to the threshold cannot be told apart: the strict side is taken (ties aside)
_NEGATE_BUCKETS = {"<": ">", "<=": ">", ">": "<=", ">=": "<"}
INTERPOLATION_NOTE = ("Quantiles from histogram buckets are interpolated (linearly inside a bucket), unlike "
                      "latbench's exact nearest-rank percentiles; the watch puts a bucket bound on this threshold, "
                      "so whether the quantile is above it is exact (a request of exactly the threshold aside).")


def duration(seconds: float) -> str:
    """A Prometheus duration: 300 -> '5m', 90 -> '90s', 0.5 -> '500ms'."""
    ms = round(seconds * 1000)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def escape_label(v: str) -> str:
    """A PromQL label value inside double quotes: backslash, quote and newline escaped."""
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(scenario: str, target: str, **extra: str) -> str:
    """``{scenario="s",target="t",phase="watch",...}`` with PromQL string escaping."""
    labels = {"scenario": scenario, "target": target, "phase": PHASE, **extra}
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}"


def _num(x: float) -> str:
    return repr(float(x))


def alert_name(slo: SLO) -> str:
    """``latency.p99 < 300ms`` -> LatbenchLatencyP99; ``error_rate < 1%`` -> LatbenchErrorRate."""
    words = [slo.metric] + ([slo.stat.replace(".", "_")] if slo.stat else [])
    return "Latbench" + "".join(w.capitalize() for part in words for w in re.split(r"[_.]", part))


def slo_expr(slo: SLO, scenario: str, target: str, range_s: float) -> tuple[str, str]:
    """(PromQL that is non-empty while ``slo`` is breached, how it is computed: 'buckets', 'exact' or 'watch')."""
    r = duration(range_s)
    sel = selector(scenario, target)
    if slo.op == IN:  # a range: the watch's own holding gauge says it
        return f"{SLO_HOLDING}{selector(scenario, target, slo=slo.expr)} == 0", "watch"
    if slo.metric == "error_rate":
        errors = f'sum(rate({REQUESTS}{selector(scenario, target, outcome="error")}[{r}]))'
        return (f"{errors} / sum(rate({REQUESTS}{sel}[{r}])) {_NEGATE_EXACT[slo.op]} {_num(slo.threshold)}",
                "exact")
    if slo.metric in HISTOGRAM_METRICS and slo.stat:
        name = HISTOGRAMS[slo.metric]
        q = percentile_of(slo.stat)
        if q is not None:
            return (f"histogram_quantile({q / 100:.6g}, sum by (le) (rate({name}_bucket{sel}[{r}]))) "
                    f"{_NEGATE_BUCKETS[slo.op]} {_num(slo.threshold)}", "buckets")
        if slo.stat == "mean":
            return (f"sum(rate({name}_sum{sel}[{r}])) / sum(rate({name}_count{sel}[{r}])) "
                    f"{_NEGATE_EXACT[slo.op]} {_num(slo.threshold)}", "exact")
        if slo.stat == "max" and slo.op in ("<", "<="):
            le = selector(scenario, target, le=floatToGoString(slo.threshold))
            return (f"sum(increase({name}_count{sel}[{r}])) - sum(increase({name}_bucket{le}[{r}])) > 0",
                    "exact")
    return f"{SLO_HOLDING}{selector(scenario, target, slo=slo.expr)} == 0", "watch"


def _rule(alert: str, expr: str, for_s: float, labels: dict, summary: str, description: str) -> dict:
    return {"alert": alert, "expr": expr, "for": duration(for_s), "labels": labels,
            "annotations": {"summary": summary, "description": description}}


def alert_rules(scenario: str, targets: dict[str, list[SLO]], for_s: float = 300.0, range_s: float = 300.0,
                send_lag_threshold: float = 0.005, severity: str = "warning", window_s: float = 300.0) -> dict:
    """The rules file (``{"groups": [...]}``): one group per target, one rule per objective, two for the probe.

    ``targets``: target name -> the objectives a watch judges for it. ``window_s``: the watch's ``--window``
    (the span of the rules that read its own judgement)."""
    groups = []
    for target, slos in targets.items():
        rules = []
        base = {"severity": severity, "scenario": scenario, "target": target}
        for s in slos:
            expr, how = slo_expr(s, scenario, target, range_s)
            over = (f"over the last {duration(range_s)}" if how != "watch"
                    else f"over the watch's {duration(window_s)} window")
            text = {"buckets": INTERPOLATION_NOTE,
                    "exact": "Computed from the watch's counters and histogram sums: exact over the range.",
                    "watch": "Judged by latbench watch itself with exact nearest-rank percentiles "
                             f"({SLO_HOLDING} is 0)."}[how]
            rules.append(_rule(alert_name(s), expr, for_s, {**base, "slo": s.expr},
                               f"{target}: SLO '{s.expr}' breached {over} for {duration(for_s)}",
                               f"Scenario {scenario}, target {target}: the objective '{s.expr}' has not held "
                               f"{over} for {duration(for_s)}. {text}"))
        rules.append(_rule("LatbenchProbeLagging", f"{PROBE_LAGGING}{selector(scenario, target)} == 1", for_s,
                           {**base, "slo": "send_lag"}, f"{target}: the latbench probe sends late",
                           f"The probe's p99 send lag is clearly above {send_lag_threshold * 1e3:g} ms and above a "
                           "tenth of the median latency (the rule that marks a run generator-limited): its latencies "
                           "describe the probe as much as the server. Give latbench watch more CPU."))
        sel = selector(scenario, target)
        rules.append(_rule("LatbenchProbeSilent",
                           f"absent({PROBE_QPS}{sel}) or sum(rate({REQUESTS}{sel}[{duration(range_s)}])) == 0",
                           for_s, {**base, "slo": "probe"}, f"{target}: the latbench probe is not measuring",
                           "No request of the probe was counted: latbench watch is not running, not scraped, or "
                           "sends nothing; the SLO alerts above cannot fire without it."))
        groups.append({"name": f"latbench-{scenario}-{target}", "rules": rules})
    return {"groups": groups}


def k8s_name(text: str) -> str:
    """A Kubernetes object name (DNS-1123: lowercase letters, digits and '-', at most 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name or "latbench")[:63].rstrip("-")


def prometheus_rule(rules: dict, scenario: str, labels: dict | None = None) -> dict:
    """The rules as a prometheus-operator ``PrometheusRule`` (its ``spec`` is the rules file)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": k8s_name(f"latbench-{scenario}"),
                         "labels": {"app.kubernetes.io/name": "latbench", **(labels or {})}},
            "spec": rules}
