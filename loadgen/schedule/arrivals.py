"""Arrival schedules: pure functions from (phase plan, seed) to intended send times.

No event loop, no sleeping, no clock: the same seed gives the same schedule, and the engine only
reads it. Times are seconds from the run's start.

A phase's rate may ramp linearly from ``rate_start`` to ``rate_end``. Arrivals are generated in
"operational time" Lambda(t) = integral of the rate, where the process has unit rate, and mapped back
through the inverse of Lambda: the standard time-rescaling construction, exact for ramps.

Inter-arrival gaps in operational time:
- constant: exactly 1 (the first arrival at the phase start);
- poisson: exponential with mean 1 (coefficient of variation 1);
- gamma: shape ``k = burstiness``, mean 1, so CV = 1/sqrt(k): k = 1 is Poisson, k < 1 burstier.

A trace replay (``load.trace``) is one open-loop phase named ``trace`` whose arrivals are the trace's own
timestamps, shifted and divided by the speed (:func:`loadgen.scenario.trace.run_times`): no randomness, the same
times for every seed; the phase carries the slice it replays (file, rows, origin, speed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from loadgen.scenario.trace import TraceSlice, read_trace, run_times, select

CHUNK = 65536


@dataclass(frozen=True)
class PhasePlan:
    """One phase of a run, with its rates resolved. ``concurrency`` set means closed loop."""

    index: int
    name: str
    start: float
    end: float
    rate_start: float = 0.0
    rate_end: float = 0.0
    concurrency: int | None = None
    recorded: bool = True
    arrival: str = "poisson"
    max_requests: int | None = None
    trace: TraceSlice | None = None  # a trace replay: its arrivals are the slice's timestamps

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def closed(self) -> bool:
        return self.concurrency is not None

    def rate_at(self, t: float) -> float:
        """Intended arrival rate at run time ``t`` (0 outside the phase or in a closed-loop phase)."""
        if self.closed or not (self.start <= t < self.end):
            return 0.0
        f = (t - self.start) / self.duration
        return self.rate_start + (self.rate_end - self.rate_start) * f

    def expected_count(self) -> float:
        """Expected number of arrivals: the integral of the rate over the phase."""
        if self.closed:
            return math.nan
        n = 0.5 * (self.rate_start + self.rate_end) * self.duration
        return min(n, self.max_requests) if self.max_requests else n


def plan_phases(load) -> list[PhasePlan]:
    """Resolve a scenario's ``load`` section into consecutive phase plans.

    A trace replay (``load.trace`` and no phases of its own) is one phase, ``trace``, from 0 to its slice's end
    (reads the trace file: its path must be resolved, as :func:`loadgen.scenario.loader.load_scenario` does)."""
    if load.trace is not None and not load.phases:
        return [trace_plan(load.trace)]
    plans, t = [], 0.0
    for i, ph in enumerate(load.phases):
        kw = dict(index=i, name=ph.name, start=t, end=t + ph.duration, recorded=ph.record,
                  arrival=ph.arrival or load.arrival, max_requests=ph.max_requests)
        if ph.concurrency is not None:
            plans.append(PhasePlan(concurrency=ph.concurrency, **kw))
        else:
            r0, r1 = ph.rates(load.expected_qps)
            plans.append(PhasePlan(rate_start=r0, rate_end=r1, **kw))
        t += ph.duration
    return plans


def trace_plan(spec) -> PhasePlan:
    """The one phase of a trace replay (``spec``: the scenario's ``load.trace``); its rate is the slice's mean."""
    sl = select(spec, read_trace(spec.file))
    rate = sl.count / sl.end
    return PhasePlan(index=0, name="trace", start=0.0, end=sl.end, rate_start=rate, rate_end=rate, arrival="trace",
                     trace=sl)


def _unit_gaps(rng: np.random.Generator, arrival: str, burstiness: float, n: int) -> np.ndarray:
    if arrival == "constant":
        return np.ones(n)
    if arrival == "poisson":
        return rng.exponential(1.0, n)
    if arrival == "gamma":
        return rng.gamma(burstiness, 1.0 / burstiness, n)
    raise ValueError(f"unknown arrival process {arrival!r}")


def _inverse_lambda(u: np.ndarray, r0: float, r1: float, duration: float) -> np.ndarray:
    """Phase-relative time t at which the integrated rate reaches ``u``."""
    if r0 == r1:
        return u / r0
    a = (r1 - r0) / (2.0 * duration)  # Lambda(t) = r0 t + a t^2
    disc = np.maximum(r0 * r0 + 4.0 * a * u, 0.0)
    return 2.0 * u / (r0 + np.sqrt(disc))  # the stable root of a t^2 + r0 t - u = 0


def arrivals(plan: PhasePlan, seed: int = 0, burstiness: float = 1.0, chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """Yield the phase's intended send times (absolute, ascending) in chunks of at most ``chunk``."""
    if plan.closed:
        return
    if plan.trace is not None:
        times = plan.start + run_times(plan.trace)
        for i in range(0, len(times), chunk):
            yield times[i : i + chunk]
        return
    r0, r1 = plan.rate_start, plan.rate_end
    total = 0.5 * (r0 + r1) * plan.duration  # Lambda at the phase end
    if total <= 0:
        return
    rng = np.random.default_rng([seed, plan.index])
    u = 0.0
    emitted = 0
    first = True
    limit = plan.max_requests or math.inf
    while emitted < limit:
        gaps = _unit_gaps(rng, plan.arrival, burstiness, chunk)
        if first and plan.arrival == "constant":
            gaps[0] = 0.0
        first = False
        us = u + np.cumsum(gaps)
        u = float(us[-1])
        us = us[us < total]
        if emitted + len(us) > limit:
            us = us[: int(limit - emitted)]
        if len(us):
            emitted += len(us)
            yield plan.start + _inverse_lambda(us, r0, r1, plan.duration)
        if u >= total:
            return
