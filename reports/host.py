"""The host beside latency: how long the managed server and latbench waited for a CPU, over the run.

Drawn from host.csv (:mod:`loadgen.engine.host`) with the one definition of the wait share
(:mod:`loadgen.analysis.host`): per sample interval, the share of the time a process tree had work that it spent
waiting for a CPU (blank where it did under 0.2 CPUs of work), the run's limit dashed, CPU steal dotted; the
client's p99 above it on the same clock.

One idea at several stages, the host's share of a run, so one file name: :mod:`loadgen.engine.host` (sampling it),
:mod:`loadgen.analysis.host` (judging it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.host import series, wait_share_series
from loadgen.records.results import HostSummary, Summary, Timeseries
from reports.drawing import figure, to_uri
from reports.plots import (
    OUTSIDE,
    PALETTE,
    latency_axis,
    phase_windows,
    shade_phases,
    shade_windows,
)
from reports.plots import (
    series as summary_series,
)


def host_plot(summary: Summary, frame: pd.DataFrame | None) -> str | None:
    """Client p99 per second (top) and each watched tree's CPU wait share per sample interval (bottom)."""
    host = summary.host or HostSummary()
    if frame is None or not host.measured:
        return None
    labels = host.labels or {}
    ts = summary.timeseries or Timeseries()
    t = np.asarray(ts.t or [], dtype=float)
    p99 = summary_series(ts.latency_p99 or [])
    phases = phase_windows(summary)
    fig, ax = figure(11, 3.8, 2, 1, sharex=True, height_ratios=[1.3, 1.7])
    a, w = ax[0, 0], ax[1, 0]
    if t.size and p99.size == t.size:
        step = float(ts.step_s or 1.0)
        a.plot(t + step / 2, p99 * 1e3, color=PALETTE[1], lw=1.3, label="p99")
        latency_axis(a, p99 * 1e3, "latency")
        a.legend(**OUTSIDE)
    for i, src in enumerate(s for s in dict.fromkeys(frame["source"]) if s != "host"):
        x, share = wait_share_series(frame, src)
        judged = " (judged)" if src == host.judged else ""
        w.plot(x, share * 100, color=PALETTE[(i + 3) % len(PALETTE)], lw=1.6 if judged else 1.0,
               drawstyle="steps-mid", label=f"{labels.get(src, src)}{judged}")
    tt, steal = series(frame, "host", "steal_s")
    _, total = series(frame, "host", "host_cpu_s")
    if tt.size > 1 and total.size == tt.size:
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.diff(steal) / np.diff(total)
        w.plot(tt[:-1] + np.diff(tt) / 2, share * 100, color="#7f7f7f", lw=1.0, ls=":", label="CPU steal (host)")
    w.axhline(host.wait_share_limit * 100, color="#d62728", lw=0.8, ls="--", label="limit")
    w.set_ylim(0, 100), w.set_ylabel("waited for a CPU (%)"), w.set_xlabel("time since start (s)")
    w.legend(**OUTSIDE)
    shade_phases(a, phases), shade_windows(w, phases)
    a.set_xlim(0, max((p["end"] for p in phases), default=float(t[-1] + 1) if t.size else 1.0))
    return to_uri(fig)


def host_caption(summary: Summary) -> str:
    host = summary.host or HostSummary()
    min_busy = 0.2 if "min_busy" not in host.model_fields_set else host.min_busy
    return ("Per sample (every 0.5 s): of the time each process tree had work to do (CPU time plus run-queue "
            "delay, summed over its threads), the share it waited for a CPU; blank where it did under "
            f"{min_busy:g} CPUs of work. Over the dashed limit in a recorded phase, the judged "
            "process makes the run invalid (host contended)"
            + (f"; where it did less work, so does a mean wait over {host.wait_per_run_limit_ms:g} ms each time it "
               "woke" if host.wait_per_run_limit_ms else "")
            + ". Client p99 above, on the same clock.")
