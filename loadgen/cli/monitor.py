"""``latbench alerts`` and ``latbench dashboards``: the monitoring stack's side of a watched scenario."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from loadgen.cli.checks import load_or_exit
from loadgen.cli.common import console, exits_on_errors
from loadgen.engine.scrape import MAX_BODY, parse_samples
from loadgen.fetch import fetch
from loadgen.monitoring.alerts import alert_rules, duration, prometheus_rule
from loadgen.monitoring.dashboard import dashboard
from loadgen.monitoring.window import watchable
from loadgen.records.rundir import safe_name
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.slo import percentile_of
from loadgen.units import parse_duration

GPU_METRICS = ("refserver:gpu_utilization_percent", "vllm:gpu_utilization_percent", "DCGM_FI_DEV_GPU_UTIL")


def _seconds(text: str, name: str) -> float:
    try:
        v = parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None
    if v <= 0:
        raise click.BadParameter(f"expected a duration above 0, got {text!r}", param_hint=name)
    return v


def watched(loaded: LoadedScenario) -> dict:
    """Target name -> the objectives a watch judges for it."""
    return {t.name: watchable(list(loaded.scenario.slo), t.name)[0] for t in loaded.scenario.target_list()}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@click.command(help="Write Prometheus alerting rules for the scenario's SLOs over the metrics of `latbench watch`: "
                    "a rules file and a Kubernetes PrometheusRule. Percentiles are histogram_quantile over the "
                    "watch's buckets; each SLO threshold is a bucket bound, so the threshold test is exact.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", default=".", show_default=True, metavar="DIR", help="folder of the two files")
@click.option("--for", "for_", default="5m", show_default=True, help="how long a breach lasts before the alert fires")
@click.option("--range", "range_", default="5m", show_default=True, help="the span each rule judges (rate range)")
@click.option("--window", default="5m", show_default=True, help="the watch's --window (rules on its own gauges)")
@click.option("--qps", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="the watch's --qps (to warn when the range holds too few requests for a percentile)")
@click.option("--severity", default="warning", show_default=True, help="the rules' severity label")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="a label of the PrometheusRule object (e.g. release=prometheus, for its ruleSelector)")
@exits_on_errors
def alerts(scenario, out, for_, range_, window, qps, severity, labels) -> None:
    out_console = console()
    loaded = load_or_exit(scenario)
    sc = loaded.scenario
    extra = {}
    for lab in labels:
        k, sep, v = lab.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"expected KEY=VALUE, got {lab!r}", param_hint="--label")
        extra[k] = v
    rng = _seconds(range_, "--range")
    targets = watched(loaded)
    rules = alert_rules(sc.name, targets, _seconds(for_, "--for"), rng, sc.load.send_lag_threshold, severity,
                        _seconds(window, "--window"))
    base = Path(out) / f"latbench-{safe_name(sc.name)}"
    plain, k8s = base.with_suffix(".rules.yml"), base.with_suffix(".prometheusrule.yaml")
    _write(plain, yaml.safe_dump(rules, sort_keys=False, width=1000))
    _write(k8s, yaml.safe_dump(prometheus_rule(rules, sc.name, extra), sort_keys=False, width=1000))
    n = sum(len(g["rules"]) for g in rules["groups"])
    out_console.print(f"{n} rules for {len(targets)} target(s): {plain} and {k8s}", highlight=False)
    per_range = qps * rng
    for s in {s for ss in targets.values() for s in ss}:
        p = percentile_of(s.stat) if s.stat else None
        if p is not None and per_range * (1 - p / 100) < 1:
            out_console.print(f"note: at {qps:g} req/s a {duration(rng)} range holds ~{per_range:.0f} requests; "
                              f"'{s.expr}' needs over {100 / (100 - p):.0f} for its p{p:g} to be more than the "
                              "slowest request (raise --range or the watch's --qps)", highlight=False)
    for t, ss in targets.items():
        for s, why in watchable(list(sc.slo), t)[1]:
            out_console.print(f"no rule for '{s.expr}' ({t}): {why}", highlight=False)


def server_exports(url: str, names=GPU_METRICS, timeout: float = 3.0) -> bool | None:
    """Whether the Prometheus endpoint ``url`` exports one of ``names`` (None: it could not be read)."""
    try:
        resp = fetch("GET", url, deadline_s=timeout, max_bytes=MAX_BODY)
        if not resp.ok:
            return None
        text = resp.body.decode("utf-8", "replace")
        return any(name in names for name, _, _ in parse_samples(text))
    except Exception:
        return None


@click.command(help="Write a Grafana dashboard (JSON) for the scenario watched by `latbench watch`: SLO gauges, "
                    "latency/TTFT/TPOT percentiles from the histograms, requests by outcome, the probe's send lag, "
                    "and the server's own metrics when a target sets metrics_url (GPU utilization with the 70-80% "
                    "band when the server exports it).")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", default=".", show_default=True, metavar="DIR", help="folder of the JSON file")
@click.option("--gpu/--no-gpu", default=None,
              help="the GPU utilization panel [default: when a target's metrics_url answers with a GPU metric]")
@click.option("--server-selector", default="", metavar="MATCHERS",
              help='PromQL label matchers of the server\'s series, e.g. \'job="vllm"\'')
@exits_on_errors
def dashboards(scenario, out, gpu, server_selector) -> None:
    out_console = console()
    loaded = load_or_exit(scenario)
    sc = loaded.scenario
    tl = sc.target_list()
    urls = [t.metrics_url for t in tl if t.metrics_url]
    if gpu is None:
        found = [server_exports(u) for u in urls]
        gpu = any(found)
        if not gpu:
            why = ("no target sets metrics_url" if not urls else
                   "its metrics_url exports no GPU utilization (a CPU server)" if any(f is False for f in found)
                   else "its metrics_url could not be read now")
            out_console.print(f"no GPU panel: {why}; --gpu adds it", highlight=False)
    board = dashboard(sc.name, watched(loaded), streaming=any(t.stream and t.api != "embeddings" for t in tl),
                      server_metrics=bool(urls), gpu=gpu, server_selector=server_selector,
                      send_lag_threshold=sc.load.send_lag_threshold)
    path = Path(out) / f"latbench-{safe_name(sc.name)}.dashboard.json"
    _write(path, json.dumps(board, indent=1))
    titles = [p["title"] for p in board["panels"] if p["type"] != "row"]
    out_console.print(f"{len(titles)} panels: {path} (Grafana: Dashboards > New > Import)", highlight=False)
