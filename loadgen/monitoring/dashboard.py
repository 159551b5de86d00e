"""A Grafana dashboard for a scenario watched by ``latbench watch`` (JSON, importable as it is).

Rows, top to bottom: the objectives (one stat per objective and target, from the watch's sliding-window
judgement), latency percentiles (p50/p90/p99 from the histograms, each objective's threshold drawn as a line),
TTFT and time per output token (streaming targets only), requests by outcome and error class, the probe's
send lag; then, when a target names its server's ``metrics_url``, the server's own metrics (the reference
server's ``refserver:*`` or vLLM's ``vllm:*`` names): requests running and waiting, queue time, batch size,
cache hit rate. GPU utilization, with the article's 70-80% band shaded, sits beside latency, and only when
asked for (``gpu=True``): a CPU server exports no such metric, and an empty panel says nothing.

Percentiles are ``histogram_quantile`` estimates (interpolated inside a bucket); the panel descriptions say so.
"""

from __future__ import annotations

from loadgen.monitoring.alerts import escape_label
from loadgen.monitoring.exposition import HISTOGRAMS, PHASE, REQUESTS, SEND_LAG, SLO_HOLDING
from loadgen.scenario.slo import SLO

GPU_BAND = (70.0, 80.0)  # the article: keep GPU utilization at 70-80%
_QUANTILE_NOTE = ("Estimated from the histogram buckets (linear interpolation inside a bucket); latbench's own "
                  "percentiles are exact. The threshold lines sit on bucket bounds, so above/below is exact.")
_DS = {"type": "prometheus", "uid": "${datasource}"}


class _Layout:
    """Panels placed on Grafana's 24-column grid, two per row unless told."""

    def __init__(self):
        self.panels: list[dict] = []
        self.y = 0
        self.x = 0
        self.next_id = 1

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []})
        self.y += 1

    def add(self, panel: dict, w: int = 12, h: int = 8) -> None:
        if self.x + w > 24:
            self._newline()
        panel.update(id=self._id(), gridPos={"x": self.x, "y": self.y, "w": w, "h": h}, datasource=_DS)
        self.panels.append(panel)
        self.x += w
        self._h = h

    def _newline(self) -> None:
        if self.x:
            self.y += getattr(self, "_h", 8)
            self.x = 0

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


def _target(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": _DS, "expr": expr, "legendFormat": legend, "refId": ref}


def _timeseries(title: str, targets: list[dict], unit: str, description: str = "", lines: list[float] = (),
                band: tuple[float, float] | None = None, max_: float | None = None) -> dict:
    steps = [{"color": "transparent", "value": None}]
    style = "off"
    if band:
        steps += [{"color": "green", "value": band[0]}, {"color": "transparent", "value": band[1]}]
        style = "area"
    elif lines:
        steps += [{"color": "red", "value": t} for t in sorted(lines)]
        style = "dashed"
    defaults = {"unit": unit, "min": 0, "custom": {"thresholdsStyle": {"mode": style}, "lineWidth": 1,
                                                  "fillOpacity": 0, "spanNulls": False},
                "thresholds": {"mode": "absolute", "steps": steps}}
    if max_ is not None:
        defaults["max"] = max_
    return {"type": "timeseries", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi"}}}


def _quantiles(metric: str, sel: str, ps=(50, 90, 99)) -> list[dict]:
    name = HISTOGRAMS[metric]
    return [_target(f"histogram_quantile({p / 100:g}, sum by (le, target) (rate({name}_bucket{sel}"
                    f"[$__rate_interval])))", f"{{{{target}}}} p{p}", chr(65 + i)) for i, p in enumerate(ps)]


def _lines(slos: list[SLO], metric: str) -> list[float]:
    """Thresholds of the percentile and max objectives on ``metric``: the lines on its percentile panel."""
    return sorted({s.threshold for s in slos if s.metric == metric and s.stat and s.stat != "mean"})


def _server(metric: str, server_sel: str) -> str:
    """The reference server's name for a metric, or vLLM's, whichever the server exports."""
    sel = _sel(server_sel)
    return f"(refserver:{metric}{sel} or vllm:{metric}{sel})"


def _server_rate(metric: str, server_sel: str) -> str:
    """The per-second rate of a server counter, under the reference server's name or vLLM's."""
    sel = _sel(server_sel)
    return (f"(sum(rate(refserver:{metric}{sel}[$__rate_interval])) or "
            f"sum(rate(vllm:{metric}{sel}[$__rate_interval])))")


def dashboard(scenario: str, targets: dict[str, list[SLO]], streaming: bool, server_metrics: bool,
              gpu: bool = False, server_selector: str = "", send_lag_threshold: float = 0.005) -> dict:
    """The dashboard JSON. ``targets``: name -> objectives a watch judges; ``streaming``: any target streams
    (TTFT/TPOT rows); ``server_metrics``: a target has ``metrics_url`` (server rows); ``gpu``: the GPU panel;
    ``server_selector``: PromQL label matchers for the server's series (e.g. ``job="vllm"``)."""
    sc = escape_label(scenario)
    all_sel = "{" + f'scenario="{sc}",phase="{PHASE}",target=~"$target"' + "}"
    slos = [s for ss in targets.values() for s in ss]
    lay = _Layout()
    lay.row("Objectives (judged by latbench watch over its sliding window, exact percentiles)")
    lay.add({"type": "stat", "title": "SLOs holding",
             "description": "1 = the objective holds over the watch's window; 0 = breached; no value = no request "
                            "in the window.",
             "targets": [_target(f"{SLO_HOLDING}{all_sel}", "{{target}}: {{slo}}", "A")],
             "fieldConfig": {"defaults": {
                 "mappings": [{"type": "value", "options": {"1": {"text": "holding", "color": "green"},
                                                            "0": {"text": "BREACHED", "color": "red"}}},
                              {"type": "special", "options": {"match": "nan",
                                                              "result": {"text": "no data", "color": "gray"}}}],
                 "thresholds": {"mode": "absolute", "steps": [{"color": "red", "value": None},
                                                              {"color": "green", "value": 1}]}}, "overrides": []},
             "options": {"colorMode": "background", "graphMode": "none", "textMode": "value_and_name",
                         "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}}, w=24, h=5)
    lay.row("Latency")
    lay.add(_timeseries("Latency percentiles (intended send to last byte)", _quantiles("latency", all_sel), "s",
                        _QUANTILE_NOTE, _lines(slos, "latency")))
    if gpu:  # beside latency: the article's 70-80% is read against what users wait
        lay.add(_timeseries("GPU utilization (article: keep it at 70-80%)", [
            _target(f"{_server('gpu_utilization_percent', server_selector)} or "
                    f"DCGM_FI_DEV_GPU_UTIL{_sel(server_selector)}", "{{instance}}", "A")], "percent",
            "The shaded band is the article's target: below it the GPU idles, above it latency suffers "
            "when a burst comes.", band=GPU_BAND, max_=100))
    lay.add(_timeseries("Requests by outcome", [_target(
        f"sum by (target, outcome, error) (rate({REQUESTS}{all_sel}[$__rate_interval]))",
        "{{target}} {{outcome}} {{error}}", "A")], "reqps",
        "Every request the probe sent; error classes as latbench records them (dropped: never sent)."))
    if streaming:
        lay.add(_timeseries("Time to first token", _quantiles("ttft", all_sel), "s", _QUANTILE_NOTE,
                            _lines(slos, "ttft")))
        lay.add(_timeseries("Time per output token", _quantiles("tpot", all_sel), "s", _QUANTILE_NOTE,
                            _lines(slos, "tpot")))
    lay.add(_timeseries("Probe send lag (p99 over the window)", [_target(f"{SEND_LAG}{all_sel}", "{{target}}", "A")],
                        "s", "How late the probe sent its requests; above the line its numbers describe the "
                        "generator as much as the server.", [send_lag_threshold]))
    if server_metrics:
        lay.row("Server (its own /metrics)")
        lay.add(_timeseries("Requests running and waiting", [
            _target(f"sum({_server('num_requests_running', server_selector)})", "running", "A"),
            _target(f"sum({_server('num_requests_waiting', server_selector)})", "waiting", "B")], "short"))
        lay.add(_timeseries("Queue time (mean)", [_target(
            f"{_server_rate('request_queue_time_seconds_sum', server_selector)} / "
            f"{_server_rate('request_queue_time_seconds_count', server_selector)}", "queue time", "A")], "s"))
        lay.add(_timeseries("Batch size (mean)", [_target(
            f"sum(rate(refserver:batch_size_sum{_sel(server_selector)}[$__rate_interval])) / "
            f"sum(rate(refserver:batch_size_count{_sel(server_selector)}[$__rate_interval]))", "batch", "A")],
            "short"))
        hits = f"sum(rate(refserver:cache_hits_total{_sel(server_selector)}[$__rate_interval]))"
        misses = f"sum(rate(refserver:cache_misses_total{_sel(server_selector)}[$__rate_interval]))"
        lay.add(_timeseries("Result cache hit rate", [_target(f"100 * {hits} / ({hits} + {misses})", "hit rate",
                                                              "A")], "percent",
                            "The article: under 90% needs work, and a high hit rate is not service quality.",
                            max_=100))
    return {
        "title": f"latbench watch: {scenario}",
        "uid": f"latbench-{scenario}"[:40],
        "tags": ["latbench"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus",
             "current": {}, "hide": 0},
            {"name": "target", "type": "query", "datasource": _DS, "label": "target", "includeAll": True,
             "multi": True, "current": {"text": "All", "value": "$__all"}, "allValue": ".*", "refresh": 2,
             "query": {"query": f'label_values({REQUESTS}{{scenario="{sc}"}}, target)', "refId": "T"},
             "definition": f'label_values({REQUESTS}{{scenario="{sc}"}}, target)'},
        ]},
        "annotations": {"list": []},
        "panels": lay.panels,
        "description": "Generated by `latbench dashboards` from the scenario: the probe's metrics from "
                       "`latbench watch`, the server's own beside them.",
    }


def _sel(server_selector: str) -> str:
    return "{" + server_selector + "}" if server_selector else ""
