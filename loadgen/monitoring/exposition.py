"""The Prometheus metrics ``latbench watch`` serves, computed from the records as they are written.

Every series carries ``scenario``, ``target`` and ``phase`` (always ``watch``) labels. Names (the one place
they are defined: the alert rules and the dashboard read them from here):

| metric | type | what |
|---|---|---|
| ``latbench_latency_seconds`` | histogram | ``done - scheduled`` of each successful request |
| ``latbench_ttft_seconds`` | histogram | ``first_token - scheduled`` (streams) |
| ``latbench_tpot_seconds`` | histogram | ``(done - first_token) / (output_tokens - 1)`` |
| ``latbench_itl_seconds`` | histogram | each gap between token chunks |
| ``latbench_service_time_seconds`` | histogram | ``done - sent`` |
| ``latbench_requests_total`` | counter | every request, by ``outcome`` (ok, error) and ``error`` class (none when ok) |
| ``latbench_send_lag_seconds`` | gauge | p99 of ``sent - scheduled`` in the window: the probe's own lateness |
| ``latbench_probe_lagging`` | gauge | 1 when the probe's lag makes its numbers its own (the rule of a run), else 0 |
| ``latbench_slo_holding`` | gauge | per objective (``slo`` label): 1 holding, 0 not, NaN nothing in the window |
| ``latbench_slo_value`` | gauge | per objective: its value over the window (seconds, or a fraction) |
| ``latbench_window_requests`` | gauge | requests completed in the window |
| ``latbench_window_seconds`` | gauge | the window's span |
| ``latbench_probe_qps`` | gauge | the rate the probe sends at |

Histograms count successful requests (as latbench's distributions do); failures are counted in
``latbench_requests_total``. Bucket bounds include every threshold of the scenario's objectives
(:mod:`loadgen.monitoring.buckets`). Histograms and counters are updated per record batch, as the engine
writes it (about once a second); the window gauges are judged when Prometheus scrapes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from loadgen import metric_registry
from loadgen.analysis.metrics import metric_samples, records_frame
from loadgen.errors import UsageError
from loadgen.monitoring.buckets import HISTOGRAM_METRICS, bucket_bounds
from loadgen.monitoring.metrics_server import MAX_CONNECTIONS, READ_TIMEOUT_S, MetricsServer
from loadgen.monitoring.window import SlidingWindow, WindowState
from loadgen.records.schema import ERROR_CLASSES
from loadgen.scenario.slo import SLO

log = logging.getLogger("latbench.watch")

PHASE = "watch"
LABELS = ("scenario", "target", "phase")
HISTOGRAMS = {m: f"latbench_{m}_seconds" for m in HISTOGRAM_METRICS}  # for the alert rules and the dashboard
REQUESTS = "latbench_requests_total"
SEND_LAG = "latbench_send_lag_seconds"
PROBE_LAGGING = "latbench_probe_lagging"
SLO_HOLDING = "latbench_slo_holding"
SLO_VALUE = "latbench_slo_value"
WINDOW_REQUESTS = "latbench_window_requests"
WINDOW_SECONDS = "latbench_window_seconds"
PROBE_QPS = "latbench_probe_qps"
EVALUATE_EVERY_S = 1.0  # scrapes closer together than this get the same judgement


class _Hist:
    """Cumulative bucket counts and sum of one histogram series, updated in bulk."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = np.asarray(bounds)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # per bucket, +Inf last
        self.sum = 0.0

    def observe(self, values: np.ndarray) -> None:
        v = values[~np.isnan(values)]
        if v.size:
            self.counts += np.bincount(np.searchsorted(self.bounds, v, side="left"), minlength=len(self.counts))
            self.sum += float(v.sum())

    def buckets(self) -> list[tuple[str, float]]:
        cum = np.cumsum(self.counts)
        return [(floatToGoString(b), float(c)) for b, c in zip(self.bounds, cum[:-1])] + [("+Inf", float(cum[-1]))]


@dataclass
class _Target:
    name: str
    labels: tuple[str, str, str]
    now: Callable[[], float | None]
    qps: float
    window: SlidingWindow
    hists: dict[str, _Hist]
    requests: dict[str, int] = field(default_factory=dict)  # error class ('' ok) -> count
    state: WindowState | None = None
    judged_at: float = -math.inf


class WatchExporter:
    """A prometheus_client collector over the records of one or more watched targets.

    ``add_target`` once per target, then ``observe(name, batch)`` with each record batch (from any thread);
    ``registry`` is what ``/metrics`` serves (:func:`serve`)."""

    def __init__(self, scenario: str, window_s: float):
        self.scenario = scenario
        self.window_s = window_s
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def add_target(self, name: str, slos: list[SLO], qps: float, now: Callable[[], float | None],
                   all_slos: list[SLO] | None = None, send_lag_threshold: float = 0.005,
                   goodput_bounds: dict[str, float] | None = None) -> None:
        """Watch target ``name``: ``slos`` are judged over the window; bucket bounds come from ``all_slos``
        (default ``slos``); ``now`` gives run seconds on the records' clock, None before the run starts;
        ``send_lag_threshold`` (s) is the scenario's ``load.send_lag_threshold``; ``goodput_bounds`` the per-request
        bounds of its goodput: block that apply to this target (metric -> s; None: no goodput)."""
        bounds_from = all_slos if all_slos is not None else slos
        hists = {m: _Hist(bucket_bounds(bounds_from, m)) for m in metric_registry.watch_histograms()}
        window = SlidingWindow(self.window_s, slos, send_lag_threshold, goodput_bounds)
        t = _Target(name, (self.scenario, name, PHASE), now, qps, window, hists)
        t.requests = {c: 0 for c in ("",) + ERROR_CLASSES}  # every series exists from the start (rate() needs it)
        with self._lock:
            self._targets[name] = t

    def bounds(self, target: str, metric: str) -> tuple[float, ...]:
        return tuple(float(b) for b in self._targets[target].hists[metric].bounds)

    def observe(self, target: str, batch: pa.RecordBatch) -> None:
        """Count a batch of written records (called by the writer, in its thread)."""
        if batch is None or batch.num_rows == 0:
            return
        df = records_frame(pa.Table.from_batches([batch]))
        ok = df[df["ok"]]
        errors = df.loc[~df["ok"], "error"].value_counts()
        values = {m: metric_samples(ok, m) for m in self._targets[target].hists}  # its keys never change
        with self._lock:
            t = self._targets[target]
            for m, v in values.items():
                t.hists[m].observe(v)
            t.requests[""] += len(ok)
            for cls, n in errors.items():
                t.requests[cls] = t.requests.get(cls, 0) + int(n)
            t.window.add(batch)

    def judge(self, target: str) -> WindowState | None:
        """The window of ``target`` judged now (at most once per :data:`EVALUATE_EVERY_S`); None before its run."""
        with self._lock:
            t = self._targets[target]
            now = t.now()
            if now is None:
                return None
            if t.state is None or time.monotonic() - t.judged_at >= EVALUATE_EVERY_S:
                t.state = t.window.evaluate(now)
                t.judged_at = time.monotonic()
            return t.state

    def requests(self, target: str) -> dict[str, int]:
        """Requests counted so far by error class ('' for success)."""
        with self._lock:
            return dict(self._targets[target].requests)

    # -- prometheus_client's collector protocol ---------------------------------------------------------
    def collect(self):
        names = list(self._targets)
        states = {n: self.judge(n) for n in names}
        hist = {m.name: HistogramMetricFamily(f"latbench_{m.name}", m.watch, labels=LABELS, unit="seconds")
                for m in map(metric_registry.metric, metric_registry.watch_histograms())}
        req = CounterMetricFamily(REQUESTS.removesuffix("_total"), "Requests the probe sent, by outcome and error "
                                  "class (dropped: never sent, the in-flight cap was reached).",
                                  labels=LABELS + ("outcome", "error"))
        lag = GaugeMetricFamily(SEND_LAG, "p99 of the send lag (sent - scheduled) in the window: the probe's own "
                                "lateness.", labels=LABELS)
        lagging = GaugeMetricFamily(PROBE_LAGGING, "1 when the probe's send lag makes its numbers describe the "
                                    "probe (the rule that marks a run generator-limited), 0 when not, NaN when the "
                                    "window is empty.", labels=LABELS)
        holding = GaugeMetricFamily(SLO_HOLDING, "1 when the objective holds over the window, 0 when it does not, "
                                    "NaN when the window holds no request.", labels=LABELS + ("slo",))
        value = GaugeMetricFamily(SLO_VALUE, "The objective's value over the window (seconds, or a fraction).",
                                  labels=LABELS + ("slo",))
        in_window = GaugeMetricFamily(WINDOW_REQUESTS, "Requests completed in the window.", labels=LABELS)
        span = GaugeMetricFamily(WINDOW_SECONDS, "Span of the sliding window the objectives are judged over.",
                                 labels=LABELS)
        qps = GaugeMetricFamily(PROBE_QPS, "Rate the probe sends at (requests per second).", labels=LABELS)
        with self._lock:
            for n in names:
                t = self._targets[n]
                labels = list(t.labels)
                for m, h in t.hists.items():
                    if m in hist:  # a metric unregistered since the target was added (a test's) is not served
                        hist[m].add_metric(labels, h.buckets(), h.sum)
                for cls, count in t.requests.items():
                    req.add_metric(labels + ["error" if cls else "ok", cls or "none"], count)
                st = states[n]
                lag.add_metric(labels, st.send_lag_p99 if st else math.nan)
                lagging.add_metric(labels, st.lagging if st else math.nan)
                in_window.add_metric(labels, st.count if st else 0)
                span.add_metric(labels, self.window_s)
                qps.add_metric(labels, t.qps)
                for s in t.window.slos:
                    ss = next((x for x in st.slos if x.slo == s), None) if st else None
                    holding.add_metric(labels + [s.expr], ss.holding if ss else math.nan)
                    value.add_metric(labels + [s.expr], ss.value if ss else math.nan)
        yield from hist.values()
        yield from (req, lag, lagging, holding, value, in_window, span, qps)

    def render(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)


def serve(exporter: WatchExporter, host: str, port: int, read_timeout_s: float = READ_TIMEOUT_S,
          max_connections: int = MAX_CONNECTIONS):
    """Serve ``/metrics`` on ``host:port`` (0: a free port) in a thread; returns (url, stop).

    A connection that has not sent its request within ``read_timeout_s`` seconds is closed, and at most
    ``max_connections`` are open (:class:`~loadgen.monitoring.metrics_server.MetricsServer`): half-open clients cost
    neither threads nor the scrapes of others."""
    try:
        server = MetricsServer(exporter.registry, host, port, read_timeout_s, max_connections)
    except OSError as exc:  # the port is taken, the address is not this host's
        raise UsageError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    server.start()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{server.port}/metrics", server.stop
