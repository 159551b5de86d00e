"""Server-side metrics from server_metrics.csv, turned into per-interval series beside client latency.

The scraper (loadgen/scrape.py) stores raw Prometheus samples: counters and histogram ``_sum`` /
``_count`` as the server reports them (cumulative). Here they become per-interval values: a counter's
rate, a histogram's mean over each scrape interval (delta sum / delta count). Metric names are
normalised with ':' -> '_' so the reference server's ``refserver:*`` and vLLM's ``vllm:*`` match.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.plots import PALETTE, figure, latency_axis, phase_windows, plot_style, shade_phases, shade_windows, to_uri

PREFIXES = ("refserver_", "vllm_")

#: Each panel: title, y label, and the ways to compute it, first available wins:
#: ("hist", base) mean per interval; ("gauge", name) value; ("ratio", hits, misses) hits / (hits + misses).
PANELS = (
    ("batch size", "sequences", [("hist", "{p}batch_size", 1.0), ("gauge", "{p}num_requests_running", 1.0)]),
    ("queue time", "ms", [("hist", "{p}request_queue_time_seconds", 1e3)]),
    ("queued requests", "requests", [("gauge", "{p}num_requests_waiting", 1.0)]),
    ("cache hit rate", "%", [("ratio", "{p}cache_hits_total", "{p}cache_misses_total"),
                             ("share", "{p}gpu_prefix_cache_hits_total", "{p}gpu_prefix_cache_queries_total")]),
    ("GPU utilization", "%", [("gauge", "{p}gpu_utilization_percent", 1.0), ("gauge", "DCGM_FI_DEV_GPU_UTIL", 1.0)]),
)


GPU_TITLE = "GPU utilization"
GPU_BAND = (70.0, 80.0)  # the article: keep GPU utilization at 70-80%


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["metric"] = df["metric"].astype(str).str.replace(":", "_", regex=False)
    return df


def total(df: pd.DataFrame, name: str) -> pd.Series:
    """One sample name summed over its label sets, indexed by scrape time (seconds since the run's t0)."""
    sel = df[df["metric"] == name]
    return sel.groupby("time")["value"].sum().sort_index()


def _delta(s: pd.Series) -> pd.Series:
    d = s.diff()
    return d.where(d >= 0)  # a counter reset (server restart) is not a negative rate


def hist_mean(df: pd.DataFrame, base: str) -> pd.Series:
    """Per-interval mean of a Prometheus histogram: delta _sum / delta _count (NaN where nothing was observed)."""
    ds, dc = _delta(total(df, base + "_sum")), _delta(total(df, base + "_count"))
    return (ds / dc.where(dc > 0)).iloc[1:]  # NaN kept: a gap in the line, not a straight line across it


def counter_rate(df: pd.DataFrame, name: str) -> pd.Series:
    """Per-second rate of a counter over each scrape interval."""
    s = total(df, name)
    dt = pd.Series(s.index, index=s.index).diff()
    return (_delta(s) / dt).dropna()


def _ratio(df, a: str, b: str, share: bool) -> pd.Series:
    da, db = _delta(total(df, a)), _delta(total(df, b))
    den = db if share else da + db
    return (100.0 * da / den.where(den > 0)).iloc[1:]


def panel_series(df: pd.DataFrame) -> list[tuple[str, str, pd.Series]]:
    """(title, unit, series) for each panel the scraped metrics can fill; absent metrics are left out."""
    df = normalise(df)
    names = set(df["metric"].unique())
    out = []
    for title, unit, ways in PANELS:
        for way in ways:
            for p in PREFIXES:
                kind, first = way[0], way[1].format(p=p)
                if kind == "hist" and first + "_count" in names:
                    s = hist_mean(df, first) * way[2]
                elif kind == "gauge" and first in names:
                    s = total(df, first) * way[2]
                elif kind in ("ratio", "share") and first in names and way[2].format(p=p) in names:
                    s = _ratio(df, first, way[2].format(p=p), kind == "share")
                else:
                    continue
                out.append((title, unit, s))
                break
            else:
                continue
            break
    return out


def gpu_utilization(df: pd.DataFrame | None) -> dict | None:
    """GPU utilization against the article's 70-80% band, over the scrapes: median and the share of scrapes
    below, within and above it (percent, fractions); None when the server exported none (a CPU server)."""
    if df is None or df.empty:
        return None
    s = next((s for title, _, s in panel_series(df) if title == GPU_TITLE), None)
    v = s.dropna().to_numpy() if s is not None else np.empty(0)
    if not v.size:
        return None
    lo, hi = GPU_BAND
    return {"median": float(np.median(v)), "below": float(np.mean(v < lo)),
            "within": float(np.mean((v >= lo) & (v <= hi))), "above": float(np.mean(v > hi)), "scrapes": int(v.size)}


def server_plot(summary: dict, df: pd.DataFrame | None) -> tuple[str | None, list[str]]:
    """Client p99 above the server's panels on one time axis; returns (data URI or None, panel titles)."""
    if df is None or df.empty:
        return None, []
    panels = [p for p in panel_series(df) if p[2].notna().any()]
    if not panels:
        return None, []
    ts = summary.get("timeseries") or {}
    t = np.asarray(ts.get("t") or [], dtype=float)
    step = float(ts.get("step_s") or 1.0)
    p99 = np.asarray([np.nan if v is None else v for v in ts.get("latency_p99") or []], dtype=float)
    phases = phase_windows(summary)
    with plot_style():
        fig, ax = figure(11, 1.6 + 1.5 * len(panels), 1 + len(panels), 1, sharex=True)
        a = ax[0, 0]
        if t.size:
            a.plot(t + step / 2, p99 * 1e3, color=PALETTE[1], lw=1.3, label="client p99")
        latency_axis(a, p99 * 1e3, "client p99")
        shade_phases(a, phases)
        for i, (title, unit, s) in enumerate(panels, start=1):
            b = ax[i, 0]
            b.plot(s.index.to_numpy(), s.to_numpy(), color=PALETTE[(i + 1) % len(PALETTE)], lw=1.3, marker=".", ms=3)
            b.set_ylabel(f"{title}\n({unit})"), b.set_ylim(0, None if np.nanmax(s.to_numpy()) > 0 else 1)
            if title == GPU_TITLE:  # the article's band, where the GPU is busy but has room for a burst
                b.axhspan(*GPU_BAND, color=PALETTE[2], alpha=0.15, lw=0, label="target 70-80%")
                b.set_ylim(0, 100)
                b.legend(loc="upper left", fontsize=7, frameon=False)
            shade_windows(b, phases)
        ax[-1, 0].set_xlabel("time since start (s)")
        end = max([t[-1] + step if t.size else 0] + [p["end"] for p in phases] + [float(df["time"].max())])
        a.set_xlim(0, end)
        return to_uri(fig), [p[0] for p in panels]
