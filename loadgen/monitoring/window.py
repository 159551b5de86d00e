"""Objectives judged over a sliding window of the most recent requests (``latbench watch``).

A window holds the records that completed in the last ``span_s`` seconds (by ``done``, run seconds) and is
judged as a phase of a run is: the same statistics (:func:`loadgen.analysis.metrics.window_stats`, exact
nearest-rank percentiles, failed requests counted in ``error_rate``) and the same test per objective
(:meth:`SLO.check`: a missing value never passes). A window with no request at all is *unknown* (NaN), not
failed: nothing was observed.

Which objectives a watch can judge (:func:`watchable`): the unscoped ones and those scoped to the target.
An objective scoped to a phase of the scenario does not apply (a watch has one phase, ``watch``), nor
``achieved_qps`` (the probe's rate is the watch's choice, not the scenario's).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import pyarrow as pa

from loadgen.analysis.metrics import records_frame, send_lag_limited, slo_value, window_stats
from loadgen.scenario.slo import SLO


def watchable(slos: list[SLO], target: str) -> tuple[list[SLO], list[tuple[SLO, str]]]:
    """(objectives a watch of ``target`` judges, [(objective, why not)] for the others)."""
    keep, skip = [], []
    for s in slos:
        tgt, name = s.scope_parts()
        if s.metric == "achieved_qps":
            skip.append((s, "the probe's rate is set by --qps, not by the scenario"))
        elif s.server_side:
            skip.append((s, "a server-side quantity: judged from a run's telemetry, not by a watch"))
        elif tgt is not None:
            if tgt == target:
                skip.append((s, f"scoped to phase {name!r}; a watch has one phase, 'watch'"))
        elif name is not None and name != target:
            skip.append((s, f"scoped to {name!r}, a phase of the scenario or another target"))
        else:
            keep.append(s)
    return keep, skip


@dataclass(frozen=True)
class SloState:
    """One objective over the window: ``value`` (seconds, or a fraction) and ``holding`` (1.0, 0.0, NaN unknown)."""

    slo: SLO
    value: float
    holding: float


@dataclass(frozen=True)
class WindowState:
    """What the window held at ``now``: request count, errors, the p99 send lag (s), whether the probe lags (by
    the rule that marks a run generator-limited: 1.0, 0.0, NaN when empty), each objective."""

    now: float
    count: int
    errors: int
    send_lag_p99: float
    lagging: float
    slos: tuple[SloState, ...]


def _num(v) -> float:
    if v is None:
        return math.nan
    if v == "inf":
        return math.inf
    return float(v)


class SlidingWindow:
    """Record batches of the last ``span_s`` seconds, judged on demand. Not thread-safe: its owner locks."""

    def __init__(self, span_s: float, slos: list[SLO], send_lag_threshold: float = 0.005,
                 goodput_bounds: dict[str, float] | None = None):
        if span_s <= 0:
            raise ValueError(f"window: expected a span above 0 s, got {span_s}")
        self.span_s = span_s
        self.slos = list(slos)
        self.send_lag_threshold = send_lag_threshold
        self.goodput_bounds = goodput_bounds  # the scenario's goodput: bounds for this target (metric -> s)
        self._batches: deque[tuple[float, pa.RecordBatch]] = deque()  # (latest done in the batch, batch)

    def add(self, batch: pa.RecordBatch) -> None:
        if batch is None or batch.num_rows == 0:
            return
        done = batch.column("done").to_numpy(zero_copy_only=False)
        self._batches.append((float(done.max()), batch))

    def _trim(self, now: float) -> None:
        while self._batches and self._batches[0][0] <= now - self.span_s:
            self._batches.popleft()

    def evaluate(self, now: float) -> WindowState:
        """Judge every objective over the requests done in ``(now - span_s, now]`` (run seconds)."""
        self._trim(now)
        start = now - self.span_s
        if self._batches:
            df = records_frame(pa.Table.from_batches([b for _, b in self._batches]))
            df = df[(df["done"] > start) & (df["done"] <= now)]
        else:
            df = None
        if df is None or df.empty:
            return WindowState(now, 0, 0, math.nan, math.nan,
                               tuple(SloState(s, math.nan, math.nan) for s in self.slos))
        stats = window_stats(df, start, now, self.slos, self.goodput_bounds)
        states = []
        for s in self.slos:
            value = _num(slo_value(stats, s)[0])
            states.append(SloState(s, value, 1.0 if s.check(value) else 0.0))
        lag = stats.metrics["send_lag"].pct("p99").value
        return WindowState(now, int(stats.count), int(stats.count - stats.ok), _num(lag),
                           float(send_lag_limited(stats, self.send_lag_threshold)), tuple(states))
