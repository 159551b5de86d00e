"""The host's part in a run's numbers: per phase, how long the managed server and latbench waited for a CPU.

The samples are :mod:`loadgen.engine.host`'s ``host.csv``. For a watched process tree and a phase ``[a, b)``
(its counters read at ``a`` and ``b``, linearly between the two samples around each)::

    cpu        = CPU seconds its threads ran in the phase (summed over threads)
    wait       = run-queue delay of its threads in the phase: seconds each thread was runnable, its work ready,
                 while other tasks held every CPU it may use (or its cgroup's quota was spent)
    busy       = cpu / (b - a)              CPUs' worth of work it did
    wait_share = wait / (cpu + wait)        of the time its threads had work to do, the share they waited

Why ``wait_share``: what a server does for a request is CPU bursts between waits for I/O; a burst of ``c`` CPU
seconds took ``c + its wait``, so the work took ``1 / (1 - wait_share)`` times its CPU time (a third: 1.5
times). It is the stretch the host put on the server's own time, whatever the load: a busier server, or one of
more threads, waits more seconds in all (``wait / wall`` grows with the load sent and the threads that run) but
the same share while the host has CPUs to spare. The load average and steal are host-wide: they say the machine
was busy, not that the process measured waited; they are recorded beside it, not judged.

The rule: a run is invalid (:class:`~loadgen.analysis.verdict.Kind` ``HOST_CONTENDED``) when the judged tree
(a managed target; for an external target, latbench itself: the send-lag rule stays) has a ``wait_share`` over
``WAIT_SHARE_LIMIT`` = 1/3 (the scenario's ``load.host_wait_limit``) in a recorded phase in which it did at
least ``MIN_BUSY`` = 0.2 CPUs of work.
Measured with ``scenarios/burst.yaml`` on the 2-core machine it was sized for, side by side, the reference server's
``wait_share`` per recorded phase (baseline, burst, recovery): alone 0.13-0.19 baseline, 0.19-0.28 burst (its 8
threads at 1.2 CPUs wait for each other), 0.27 recovery; beside two CPU hogs 0.39-0.41 baseline, 0.58 burst,
0.39 recovery, its p99 2-3x the quiet run's. Under ``MIN_BUSY`` the share is made of the wake-up delays of
microsecond-long runs: large as a fraction, small against any latency (latbench at 0.06 CPUs, alone: 0.23-0.54).

A nearly idle tree (under ``MIN_BUSY``) is judged by what does bend its timestamps: how long it waited for a CPU
each time it woke (``wait_per_run_ms``, wait over the times its threads were put on a CPU), over
``WAIT_PER_RUN_LIMIT_MS`` = 1 ms in a recorded phase. Each wake-up stamps a send, a byte or a token, so a timestamp
is late by about that much. Measured over every run of the test suite, the judged trees under 0.2 CPUs: on a quiet
host (the suite's two workers on two cores) 0.01-0.22 ms a wake-up (10th-90th percentile of 527 phases), at most
0.73 ms; beside four CPU hogs 0.3-3.4 ms, median 1.0-1.3 ms; the runs whose known-latency checks then failed
(TTFT 88 ms against a server that waits 80, inter-token gaps off by 4 ms) 0.8-2.4 ms, with wait shares of
0.77-0.91 that the share rule did not judge. A streaming run of 0.05 CPUs alone: 0.12-0.17 ms.

One idea at several stages, the host's share of a run, so one file name: :mod:`loadgen.engine.host` (sampling it),
:mod:`reports.host` (drawing it).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen.records.results import Contended, HostPhase, HostSummary, HostTree
from loadgen.records.series_file import read_series
from loadgen.schedule.arrivals import PhasePlan

WAIT_SHARE_LIMIT = 1 / 3  # over it, the judged tree's work took over 1.5 times its CPU time: invalid
MIN_BUSY = 0.2  # CPUs of work in a phase under which the wait share does not judge a tree
WAIT_PER_RUN_LIMIT_MS = 1.0  # under MIN_BUSY: its mean wait for a CPU each time it woke, over which it is invalid
NOTABLE_SHARE = WAIT_SHARE_LIMIT / 2  # summary.md mentions a phase from here on
NOTABLE_STEAL = 0.02


def read_host(path: Path) -> pd.DataFrame | None:
    """host.csv (time, source, metric, value), or None when the run has none or it cannot be read."""
    return read_series(path)


def series(frame: pd.DataFrame, source: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of one counter, in time order."""
    sel = frame[(frame["source"] == source) & (frame["metric"] == metric)].sort_values("time")
    return sel["time"].to_numpy(dtype=float), sel["value"].to_numpy(dtype=float)


def delta(frame: pd.DataFrame, source: str, metric: str, a: float, b: float) -> float | None:
    """How much a cumulative counter grew over ``[a, b)`` (interpolated between samples); None without samples
    on both sides of the window's part that was sampled."""
    t, v = series(frame, source, metric)
    if t.size < 2 or b <= t[0] or a >= t[-1]:
        return None
    return float(np.interp(b, t, v) - np.interp(a, t, v))


def _window_max(frame: pd.DataFrame, source: str, metric: str, a: float, b: float) -> float | None:
    t, v = series(frame, source, metric)
    sel = v[(t >= a) & (t <= b)]
    return float(sel.max()) if sel.size else None


def tree_phase(frame: pd.DataFrame, source: str, a: float, b: float) -> HostTree | None:
    """One tree's CPU, wait, busy and wait_share over ``[a, b)`` (see the module docstring); None unsampled."""
    cpu, wait = delta(frame, source, "cpu_s", a, b), delta(frame, source, "wait_s", a, b)
    if cpu is None or wait is None:
        return None
    slices = delta(frame, source, "slices", a, b)
    throttled = delta(frame, source, "throttled_s", a, b)
    return HostTree(cpu_s=cpu, wait_s=wait, busy=cpu / (b - a),
                    wait_share=wait / (cpu + wait) if cpu + wait > 0 else None,
                    wait_per_run_ms=(wait / slices * 1e3) if slices else None,  # mean delay before each run on a CPU
                    throttled_s=throttled, cpus=_window_max(frame, source, "cpus", a, b),
                    threads=_window_max(frame, source, "threads", a, b))


def host_summary(frame: pd.DataFrame | None, plans: list[PhasePlan], duration: float, judged: str,
                 labels: dict[str, str], note: str | None = None, limit: float = WAIT_SHARE_LIMIT) -> HostSummary:
    """summary.json's ``host``: per phase, each watched tree (:func:`tree_phase`), host steal and load; and the
    ``contended`` phases of the judged tree (``judged``: its source in host.csv; ``labels``: source -> how the
    reason names it, e.g. ``server`` -> ``the reference server``; ``limit``: the scenario's
    ``load.host_wait_limit``)."""
    if frame is None:
        return HostSummary(measured=False, note=note or "host not measured")
    sources = [s for s in dict.fromkeys(frame["source"]) if s != "host"]
    phases, contended = {}, []
    for p in plans:
        a, b = p.start, min(p.end, max(duration, p.start))
        if b - a <= 0:
            continue
        trees = {s: tree_phase(frame, s, a, b) for s in sources}
        steal, total = delta(frame, "host", "steal_s", a, b), delta(frame, "host", "host_cpu_s", a, b)
        phases[p.name] = HostPhase(start=a, end=b, recorded=p.recorded, processes=trees,
                                   steal_share=(steal / total) if steal is not None and total else None,
                                   load1_max=_window_max(frame, "host", "load1", a, b),
                                   runnable_max=_window_max(frame, "host", "runnable", a, b))
        j = trees.get(judged)
        if p.recorded and j and j.wait_share is not None and limit < 1 and _over(j, limit):
            contended.append(Contended(phase=p.name, source=judged, label=labels.get(judged, judged),
                                       wait_share=j.wait_share, busy=j.busy,
                                       wait_per_run_ms=j.wait_per_run_ms if j.busy < MIN_BUSY else None))
    return HostSummary(measured=True, note=note, judged=judged, labels=labels, wait_share_limit=limit,
                       min_busy=MIN_BUSY, wait_per_run_limit_ms=WAIT_PER_RUN_LIMIT_MS, phases=phases,
                       contended=contended)


def _over(tree: HostTree, limit: float) -> bool:
    """Whether a judged tree waited too long for a CPU in a phase: busy, by its wait share; nearly idle, by its
    mean wait each time it woke (the module docstring says why both)."""
    if tree.busy >= MIN_BUSY:
        return tree.wait_share > limit
    return tree.wait_per_run_ms is not None and tree.wait_per_run_ms > WAIT_PER_RUN_LIMIT_MS


def notable_lines(host: HostSummary | None) -> list[str]:
    """One sentence per phase worth a reader's eye: a judged wait share over half the limit, or steal over 2%."""
    if not host or not host.measured:
        return []
    out = []
    labels = host.labels or {}
    min_busy = host.min_busy if "min_busy" in host.model_fields_set else MIN_BUSY
    for name, ph in (host.phases or {}).items():
        parts = []
        for src, t in (ph.processes or {}).items():
            share = t.wait_share if t else None
            if share is not None and t.busy >= min_busy and share >= NOTABLE_SHARE \
                    and share >= host.wait_share_limit / 2:
                parts.append(f"{labels.get(src, src)} waited for a CPU {share:.0%} of the time it had work "
                             f"({t.busy:.2f} CPUs busy; limit {host.wait_share_limit:.0%})")
            per_run, run_limit = (t.wait_per_run_ms if t else None), host.wait_per_run_limit_ms
            if share is not None and t.busy < min_busy and run_limit and per_run is not None \
                    and per_run >= run_limit / 2:
                parts.append(f"{labels.get(src, src)} waited {per_run:.2f} ms for a CPU each time it woke "
                             f"({t.busy:.2f} CPUs busy; limit {run_limit:g} ms)")
        steal = ph.steal_share
        if isinstance(steal, (int, float)) and steal >= NOTABLE_STEAL:
            parts.append(f"CPU steal {steal:.1%}")
        if parts:
            out.append(f"phase {name}: " + "; ".join(parts))
    return out


def wait_share_series(frame: pd.DataFrame, source: str) -> tuple[np.ndarray, np.ndarray]:
    """(interval mid-times, wait_share per sample interval) of one tree; NaN where it did under ``MIN_BUSY``."""
    t, cpu = series(frame, source, "cpu_s")
    _, wait = series(frame, source, "wait_s")
    if t.size < 2 or wait.size != t.size:
        return np.empty(0), np.empty(0)
    dt, dc, dw = np.diff(t), np.diff(cpu), np.diff(wait)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where((dc / np.maximum(dt, 1e-9) >= MIN_BUSY) & (dc + dw > 0), dw / (dc + dw), math.nan)
    return t[:-1] + dt / 2, share
