"""Client-side figures of a report, built with :mod:`reports.svg` (matplotlib's calls, latbench's own drawing) and
drawn as SVG data URIs by :mod:`reports.drawing`.

Inputs are summaries (their models: time series, phase windows) and record frames; every figure is drawn from at most
a few thousand points, whatever the run's size: CDFs from a rank grid, distributions as histograms,
time series from the summary's per-second bins. Axes are in milliseconds; data stays in seconds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.records.results import Burst, InFlight, Recovery, RecoveryWindows, StartGroup, Summary, Timeseries
from reports.drawing import figure, to_uri

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
ERROR_COLORS = {"timeout": "#ff7f0e", "connect": "#7f7f7f", "http_5xx": "#d62728", "http_429": "#9467bd",
                "http_4xx": "#e377c2", "http_3xx": "#aec7e8", "bad_stream": "#8c564b", "reset": "#bcbd22",
                "dropped": "#17becf", "cancelled": "#c7c7c7"}
BREAKDOWN = (("send lag", "#bcbd22"), ("connect", "#9467bd"), ("TLS", "#e377c2"),
             ("first byte", "#1f77b4"), ("first token", "#ff7f0e"), ("generation / transfer", "#2ca02c"))
CDF_POINTS = 1500
# legends beside time series, never over them
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.0, 1.0), "fontsize": 8}


def rank_grid(n: int, points: int = CDF_POINTS) -> np.ndarray:
    """0-based ranks to plot of n sorted samples: evenly spread, denser in the tail, always the max."""
    if n <= points:
        return np.arange(n)
    body = np.linspace(0, n - 1, points // 2)
    tail = n - np.logspace(0, math.log10(n), points // 2)
    return np.unique(np.clip(np.concatenate([body, tail, [n - 1]]).astype(np.int64), 0, n - 1))


def cdf_points(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x seconds, F(x)) of an empirical CDF, downsampled by :func:`rank_grid`."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    idx = rank_grid(len(x))
    return x[idx], (idx + 1) / max(len(x), 1)


def shade_phases(ax, phases: list[dict]) -> None:
    """Shade each phase window; label it once at the top of the axis (a label that would run into the
    previous one goes one line higher)."""
    shade_windows(ax, phases)
    span = max((ph["end"] for ph in phases), default=1.0) or 1.0
    raised = False
    for i, ph in enumerate(phases):
        label = " " + ph["name"] + ("" if ph["recorded"] else " (not recorded)")
        prev = phases[i - 1] if i else None
        raised = bool(prev and not raised and (ph["start"] - prev["start"]) / span * 130 < len(prev["name"]) + 16)
        ax.text(ph["start"], 1.07 if raised else 1.0, label, transform=ax.get_xaxis_transform(), va="bottom",
                ha="left", fontsize=7, color="#555555")


def phase_windows(summary: Summary) -> list[dict]:
    """Each phase's name, start and end (seconds from the run's start) and whether it was recorded."""
    return [{"name": n, "start": p.start, "end": p.end, "recorded": p.is_recorded}
            for n, p in (summary.phases or {}).items()]


def series(values: list | None, size: int | None = None) -> np.ndarray:
    """A time series of a summary as floats, None as NaN (absent: ``size`` NaNs, or none)."""
    if values is None:
        return np.full(size or 0, np.nan)
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def cdf_plot(series: list[tuple[str, np.ndarray]], title: str = "Latency CDF") -> str | None:
    """Overlaid latency CDFs (log x) and their tails (1 - F, log-log) for each (label, latencies in s)."""
    series = [(n, v) for n, v in series if len(v)]
    if not series:
        return None
    fig, ax = figure(11, 3.6, 1, 2)
    for i, (label, v) in enumerate(series):
        x, f = cdf_points(v)
        c = PALETTE[i % len(PALETTE)]
        ax[0, 0].plot(x * 1e3, f, color=c, lw=1.5, label=label)
        tail = 1 - f + 1.0 / len(v)
        ax[0, 1].plot(x * 1e3, tail, color=c, lw=1.5, label=label)
    a, b = ax[0, 0], ax[0, 1]
    for x in (a, b):
        x.set_xscale("log"), ms_log_axis(x.xaxis)
    a.set_xlabel("latency (ms, log)"), a.set_ylabel("fraction of requests ≤ x")
    a.set_title(title), a.set_ylim(0, 1.01)
    b.set_yscale("log"), fraction_log_axis(b.yaxis)
    b.set_xlabel("latency (ms, log)"), b.set_ylabel("fraction slower than x")
    b.set_title("Tail (1 − CDF)")
    for q, name in ((1e-2, "p99"), (1e-3, "p99.9")):
        b.axhline(q, color="#999999", lw=0.6, ls="--")
        b.text(1.0, q, " " + name, transform=b.get_yaxis_transform(), va="center", fontsize=7, color="#555555")
    a.legend(loc="lower right")
    return to_uri(fig)


def timeseries_plot(summary: Summary) -> str | None:
    """Latency p50/p99, target vs achieved QPS, errors by class and in-flight over time, phases shaded."""
    ts = summary.timeseries or Timeseries()
    t = np.asarray(ts.t or [], dtype=float)
    if t.size == 0:
        return None
    step = float(ts.step_s or 1.0)
    mid = t + step / 2
    phases = phase_windows(summary)

    def f(values: list | None) -> np.ndarray:
        return series(values or None, t.size)

    fig, ax = figure(11, 7.2, 4, 1, sharex=True, height_ratios=[3, 2.2, 1.5, 1.5])
    a = ax[0, 0]
    a.plot(mid, f(ts.latency_p50) * 1e3, color=PALETTE[0], lw=1.3, label="p50")
    a.plot(mid, f(ts.latency_p99) * 1e3, color=PALETTE[1], lw=1.3, label="p99")
    latency_axis(a, np.concatenate([f(ts.latency_p50), f(ts.latency_p99)]) * 1e3, "latency")
    q = ax[1, 0]
    q.plot(mid, f(ts.target_qps), color="#555555", lw=1.2, ls="--", label="target", drawstyle="steps-mid")
    q.plot(mid, f(ts.sent) / step, color=PALETTE[4], lw=1.0, alpha=0.8, label="sent")
    q.plot(mid, f(ts.ok) / step, color=PALETTE[2], lw=1.3, label="achieved (ok)")
    q.set_ylabel("req/s"), q.set_ylim(bottom=0), q.legend(**OUTSIDE)
    e = ax[2, 0]
    bottom = np.zeros(t.size)
    for cls, counts in sorted((ts.errors or {}).items()):
        y = np.asarray(counts, dtype=float) / step
        e.bar(mid, y, width=step * 0.9, bottom=bottom, color=ERROR_COLORS.get(cls, "#333333"), label=cls)
        bottom += y
    e.set_ylabel("errors/s")
    if bottom.any():
        e.legend(**OUTSIDE)
    else:
        e.text(0.5, 0.5, "no errors", transform=e.transAxes, ha="center", va="center", color="#2ca02c")
    n = ax[3, 0]
    # each second's peak, as the headline's peaks are (a RunDir older than in_flight_peak: its end-of-second count)
    peaks = f(ts.in_flight_peak if ts.in_flight_peak is not None else ts.in_flight)
    n.plot(np.append(t, t[-1] + step), np.append(peaks, peaks[-1]), color=PALETTE[3], lw=1.2,
           drawstyle="steps-post")
    n.set_ylabel("in flight\n(peak)" if ts.in_flight_peak is not None else "in flight")
    n.set_ylim(bottom=0), n.set_xlabel("time since start (s)")
    for row in ax[:, 0]:
        shade_phases(row, phases) if row is a else shade_windows(row, phases)
    mark_bursts(a, n, summary.burst or [], summary.duration_s)
    a.legend(**OUTSIDE)
    a.set_xlim(0, max(t[-1] + step, max((p["end"] for p in phases), default=0)))
    return to_uri(fig)


RECOVERY_COLOR, DRAIN_COLOR = "#2ca02c", "#9467bd"


def mark_bursts(lat_ax, inflight_ax, bursts: list[Burst], duration: float | None = None) -> None:
    """Each spike's aftermath as marked intervals (values from the summary's ``burst`` entries): on the
    latency panel, from the spike's end to the recovery time, with the objective it recovered to; on the
    in-flight panel, the baseline's peak and the drain time back to it (none when the run, ``duration`` seconds
    long, stopped before the spike ended: there was no drain)."""
    for b in bursts:
        rec = b.recovery or Recovery()
        if rec.threshold is not None:
            lat_ax.axhline(rec.threshold * 1e3, color="#7f7f7f", lw=0.8, ls="--")
        win = rec.windows or RecoveryWindows()
        x = np.asarray(win.start or [], dtype=float)  # at its start: it crosses the objective where
        y = np.asarray([np.nan if v is None else (np.inf if v == "inf" else v) for v in win.p99 or []],
                       dtype=float)  # recovery is; by intended send time (the p50/p99 lines: by completion)
        if np.isfinite(y).any():  # a window with a failure is infinitely slow: not drawn
            lat_ax.plot(x, np.where(np.isfinite(y), y, np.nan) * 1e3, color=RECOVERY_COLOR, lw=1.2, ls="-.",
                        drawstyle="steps-post", label=f"p99 of the {rec.window_s:g} s window\nsent from here (rule)")
        if rec.recovered:
            t_rec = b.end + rec.seconds
            lat_ax.axvspan(b.end, t_rec, color=RECOVERY_COLOR, alpha=0.18)
            lat_ax.axvline(t_rec, color=RECOVERY_COLOR, lw=1.4)
            lat_ax.text(t_rec, 0.97, f" recovered {rec.seconds:.1f} s after {b.spike}",
                        transform=lat_ax.get_xaxis_transform(), va="top", ha="left", fontsize=8,
                        color=RECOVERY_COLOR, fontweight="bold")
        elif b.recovery is not None and rec.measured is not False:
            lat_ax.axvspan(b.end, b.after_end, color="#d62728", alpha=0.10)
            lat_ax.text(b.end, 0.97, f" not recovered during {rec.phase}", transform=lat_ax.get_xaxis_transform(),
                        va="top", ha="left", fontsize=8, color="#d62728", fontweight="bold")
        fl = b.in_flight or InFlight()
        if fl.baseline_peak is not None:
            inflight_ax.axhline(fl.baseline_peak, color="#7f7f7f", lw=0.8, ls="--")
        if fl.drain_s is not None and not (duration is not None and b.end is not None and duration < b.end):
            inflight_ax.axvspan(b.end, b.end + fl.drain_s, color=DRAIN_COLOR, alpha=0.18)
            inflight_ax.text(b.end + fl.drain_s, 0.95, f" drained {fl.drain_s:.1f} s (peak {fl.peak})",
                             transform=inflight_ax.get_xaxis_transform(), va="top", ha="left", fontsize=8,
                             color=DRAIN_COLOR, fontweight="bold")


def warmup_plot(cold_start: dict[str, StartGroup]) -> str | None:
    """Latency of request 1..N after each fresh start, one line per start, one colour per architecture
    (values from cold_start.json); each architecture's steady latency dashed."""
    groups = [(g, d) for g, d in cold_start.items() if d.per_start]
    if not groups:
        return None
    fig, ax = figure(11, 3.8)
    a = ax[0, 0]
    values, any_failed = [], False
    for gi, (group, d) in enumerate(groups):
        c = PALETTE[gi % len(PALETTE)]
        for si, row in enumerate(d.per_start):
            y = np.asarray([math.inf if v == "inf" else (math.nan if v is None else v)
                            for v in row.latencies_s or []], dtype=float) * 1e3
            if y.size == 0:
                continue
            values.append(y)
            failed = np.nonzero(np.isinf(y))[0] + 1  # a failed request: an x at the top of the axis
            if failed.size:
                a.plot(failed, np.full(failed.size, 0.97), "x", color=c, ms=8, mew=2,
                       transform=a.get_xaxis_transform(), label="failed request" if not any_failed else None)
                any_failed = True
            cold = row.cold
            n_cold = sum(1 for r in d.per_start if r.cold)
            a.plot(np.arange(1, y.size + 1), np.where(np.isfinite(y), y, np.nan), color=c, lw=1.2, alpha=0.75,
                   marker="o", ms=3, ls="-" if cold is not False else ":",
                   label=f"{group} ({n_cold} of {len(d.per_start)} starts cold)" if si == 0 else None)
        steady = d.spread("steady_latency_s").median
        if steady:
            a.axhline(steady * 1e3, color=c, lw=0.9, ls="--", label=f"{group} steady {steady * 1e3:.0f} ms")
    allv = np.concatenate(values) if values else np.empty(0)
    latency_axis(a, allv[np.isfinite(allv)], "latency")
    a.set_xlabel("request after start (sent one at a time)")
    n = max((v.size for v in values), default=1)
    a.set_xticks(np.arange(1, n + 1)) if n <= 30 else None
    a.set_title("Warm-up curve: latency of each request after a fresh start")
    a.legend(loc="upper right")
    return to_uri(fig)


def shade_windows(ax, phases) -> None:
    """Shade each phase window, unlabelled (the panels below a labelled one): every other recorded phase grey, a
    phase not recorded orange, a dotted line where each starts."""
    for i, ph in enumerate(phases):
        if i % 2 == 0 or not ph["recorded"]:
            ax.axvspan(ph["start"], ph["end"], color="#000000" if ph["recorded"] else "#ff9900", alpha=0.06)
        ax.axvline(ph["start"], color="#999999", lw=0.6, ls=":")


def ms_log_axis(axis) -> None:
    """Log scale with plain millisecond tick labels at 1, 2 and 5 of each decade (2, 5, 10, 20, ...) where they fit."""
    axis.log_ticks(major=(1.0, 2.0, 5.0))


def fraction_log_axis(axis) -> None:
    """Log scale with plain decimal tick labels (0.1, 0.01, 0.001), unlabelled minor ticks at 2 and 5 of each decade."""
    axis.log_ticks(minor=(2.0, 5.0))


def latency_axis(ax, ms_values: np.ndarray, label: str) -> None:
    """A linear y axis from 0, or a log one when the values span more than 20x (a spike over a low floor)."""
    v = ms_values[np.isfinite(ms_values) & (ms_values > 0)]
    if v.size and v.max() > 20 * v.min():
        ax.set_yscale("log"), ms_log_axis(ax.yaxis), ax.set_ylabel(f"{label} (ms, log)")
    else:
        ax.set_ylim(bottom=0), ax.set_ylabel(f"{label} (ms)")


def _log_bins(values: np.ndarray, n: int = 60) -> np.ndarray:
    v = values[np.isfinite(values) & (values > 0)]
    lo, hi = float(v.min()), float(v.max())
    if hi <= lo * 1.01:
        lo, hi = lo / 1.5, hi * 1.5
    return np.logspace(math.log10(lo), math.log10(hi), n + 1)


def distributions_plot(series: list[tuple[str, np.ndarray, np.ndarray]]) -> str | None:
    """TTFT and inter-token latency histograms (log ms) for each (label, ttft s, itl s)."""
    if not any(len(tt) or len(it) for _, tt, it in series):
        return None
    fig, ax = figure(11, 3.2, 1, 2)
    for col, (idx, title) in enumerate(((1, "Time to first token"), (2, "Inter-token latency"))):
        a = ax[0, col]
        allv = np.concatenate([np.asarray(s[idx], dtype=float) for s in series]) * 1e3
        allv = allv[np.isfinite(allv) & (allv > 0)]
        if allv.size == 0:
            a.text(0.5, 0.5, "not measured (no streamed tokens)", transform=a.transAxes, ha="center", va="center")
            a.set_title(title)
            continue
        bins = _log_bins(allv)
        for i, s in enumerate(series):
            v = np.asarray(s[idx], dtype=float) * 1e3
            v = v[np.isfinite(v) & (v > 0)]
            if v.size:
                w = np.full(v.size, 1.0 / v.size)
                a.hist(v, bins=bins, weights=w, histtype="stepfilled", alpha=0.35, color=PALETTE[i % len(PALETTE)],
                       label=s[0])
                a.hist(v, bins=bins, weights=w, histtype="step", color=PALETTE[i % len(PALETTE)], lw=1.0)
        (a.set_xscale("log"), ms_log_axis(a.xaxis), a.set_xlabel("ms (log)"), a.set_ylabel("fraction"),
         a.set_title(title))
        a.legend(loc="best")
    return to_uri(fig)


def breakdown_means(df: pd.DataFrame) -> dict[str, float]:
    """Mean seconds of each latency component over successful requests; the parts add up to mean latency.

    send lag = sent - scheduled; connect = connected - connect_start - TLS (0 when the connection was
    reused); first byte = first_byte - sent - connect - TLS; first token = first_token - first_byte (streams
    only: queueing and prefill after the headers); generation / transfer = done - first_token, or
    done - first_byte without a stream.
    """
    if len(df) == 0:
        return {k: math.nan for k, _ in BREAKDOWN}
    conn = (df["connected"] - df["connect_start"]).fillna(0.0).clip(lower=0)
    tls = df["tls"].fillna(0.0).clip(lower=0)
    tls = np.minimum(tls, conn)
    parts = {
        "send lag": df["sent"] - df["scheduled"],
        "connect": conn - tls,
        "TLS": tls,
        "first byte": df["first_byte"] - df["sent"] - conn,
        "first token": (df["first_token"] - df["first_byte"]).fillna(0.0),
        "generation / transfer": df["done"] - df["first_token"].fillna(df["first_byte"]),
    }
    return {k: float(np.nanmean(v.to_numpy())) if len(v) else math.nan for k, v in parts.items()}


def breakdown_plot(rows: list[tuple[str, dict[str, float]]]) -> str | None:
    """Horizontal stacked bars of mean latency components, one bar per (label, breakdown_means)."""
    rows = [(label, m) for label, m in rows if not all(math.isnan(v) for v in m.values())]
    if not rows:
        return None
    fig, ax = figure(11, 0.9 + 0.38 * len(rows))
    a = ax[0, 0]
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for name, color in BREAKDOWN:
        w = np.asarray([max(0.0, np.nan_to_num(m[name])) for _, m in rows]) * 1e3
        a.barh(y, w, left=left, color=color, label=name, height=0.6)
        left += w
    for yi, total in zip(y, left):
        a.text(total, yi, f" {total:.1f} ms", va="center", fontsize=8)
    a.set_yticks(y, [label for label, _ in rows])
    a.set_xlabel("mean time per successful request (ms)"), a.set_xlim(0, left.max() * 1.15 or 1)
    a.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=len(BREAKDOWN))
    a.grid(axis="y", visible=False)
    return to_uri(fig)


def overlay_timeseries_plot(entries: list[tuple[str, Summary]]) -> str | None:
    """Latency p99 and achieved req/s over time for several (label, summary), overlaid on one time axis."""
    entries = [(label, s) for label, s in entries if s.timeseries and s.timeseries.t]
    if len(entries) < 1:
        return None
    fig, ax = figure(11, 5.0, 2, 1, sharex=True)
    for i, (label, s) in enumerate(entries):
        ts = s.timeseries
        step = float(ts.step_s or 1.0)
        mid = np.asarray(ts.t, dtype=float) + step / 2
        p99 = series(ts.latency_p99 or [])
        c = PALETTE[i % len(PALETTE)]
        ax[0, 0].plot(mid[: p99.size], p99 * 1e3, color=c, lw=1.3, label=label)
        ax[1, 0].plot(mid, np.asarray(ts.ok or [], dtype=float) / step, color=c, lw=1.3, label=label)
    ax[0, 0].legend(**OUTSIDE)
    latency_axis(ax[0, 0], np.concatenate([series(s.timeseries.latency_p99 or []) for _, s in entries]) * 1e3,
                 "latency p99")
    ax[1, 0].set_ylabel("achieved req/s"), ax[1, 0].set_ylim(bottom=0), ax[1, 0].set_xlabel("time since start (s)")
    shade_phases(ax[0, 0], phase_windows(entries[0][1]))
    end = max(float(s.timeseries.t[-1]) + float(s.timeseries.step_s or 1.0) for _, s in entries)
    ax[0, 0].set_xlim(0, end)
    shade_windows(ax[1, 0], phase_windows(entries[0][1]))
    return to_uri(fig)
