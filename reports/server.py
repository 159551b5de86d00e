"""Server-side metrics from server_metrics.csv, turned into per-interval series beside client latency.

The scraper (loadgen/scrape.py) stores raw Prometheus samples: counters and histogram ``_sum`` /
``_count`` as the server reports them (cumulative). Here they become per-interval values: a counter's
rate, a histogram's mean over each scrape interval (delta sum / delta count). Metric names are
normalised with ':' -> '_' so the reference server's ``refserver:*`` and vLLM's ``vllm:*`` match.

vLLM's names are today's (v1 engine, checked against vLLM 0.32's /metrics; ``tests/data/vllm_metrics.txt``
is a trimmed capture): ``vllm:num_requests_running`` / ``_waiting``, ``vllm:kv_cache_usage_perc`` (a
fraction, 0-1), ``vllm:prefix_cache_hits`` / ``_queries`` (tokens), ``vllm:request_queue_time_seconds`` and
``vllm:time_to_first_token_seconds`` (histograms); the older ``gpu_cache_usage_perc`` and
``gpu_prefix_cache_*`` are still understood. Nothing is configured beyond the target's ``metrics_url``.

Where the engine reports its own TTFT, :func:`ttft_comparison` sets it beside latbench's: the engine
counts from the request's arrival in the server to its first token, latbench from the intended send time
to the first token's arrival, so the difference is the part spent outside the engine (generator lag,
network, HTTP server, tokenization, streaming the chunk back).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.telemetry import series_frame
from loadgen.records.results import Summary, Timeseries
from reports.drawing import figure, to_uri
from reports.plots import (
    PALETTE,
    latency_axis,
    phase_windows,
    series,
    shade_phases,
    shade_windows,
)

PREFIXES = ("refserver_", "vllm_")

#: The panels, in order: (quantity of the metric registry, title, unit, scale from its unit to the one shown). The
#: series come from telemetry.csv (each quantity read through its engine's adapter,
#: :mod:`loadgen.telemetry.adapters`), so any engine latbench knows fills them; a panel whose source is already
#: drawn (vLLM's batch size is its running requests) is left out.
PANELS = (
    ("server.requests_running", "requests running", "requests", 1.0),
    ("server.batch_size", "batch size", "sequences", 1.0),
    ("server.queue_waiting", "queued requests", "requests", 1.0),
    ("server.queue_time", "queue time", "ms", 1e3),
    ("server.kv_cache_usage", "KV cache usage", "%", 100.0),
    ("server.prefix_cache_hit_rate", "prefix cache hit rate", "% of tokens", 100.0),
    ("server.result_cache_hit_rate", "cache hit rate", "%", 100.0),
    ("gpu.utilization", "GPU utilization", "%", 100.0),
)
#: The engine's own time to first token (a histogram, seconds), under each server's prefix.
TTFT_BASE = "{p}time_to_first_token_seconds"
TTFT_TITLE = "TTFT: engine vs latbench"


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


def panels(frame: pd.DataFrame | None) -> list[tuple[str, str, pd.Series, str]]:
    """(title, unit, series indexed by time, source name) for each panel telemetry.csv's ``frame`` can fill."""
    if frame is None or frame.empty:
        return []
    out, drawn = [], set()
    for quantity, title, unit, scale in PANELS:
        sel = frame[frame["metric"] == quantity]
        if sel.empty:
            continue
        source = str(sel["source"].iloc[0])
        if source in drawn:
            continue
        drawn.add(source)
        s = sel.groupby("time")["value"].mean().sort_index() * scale
        out.append((title, unit, s, source))
    return out


def panel_series(df: pd.DataFrame) -> list[tuple[str, str, pd.Series]]:
    """(title, unit, series) of each panel raw scraped samples (server_metrics.csv) can fill, read through the
    engine adapters as a run's telemetry.csv is."""
    return [(title, unit, s) for title, unit, s, _ in panels(series_frame(df))]


def _ttft_base(names: set[str]) -> str | None:
    for p in PREFIXES:
        base = TTFT_BASE.format(p=p)
        if base + "_count" in names and base + "_sum" in names:
            return base
    return None


def client_ttft(records: pd.DataFrame, times: np.ndarray) -> pd.Series:
    """latbench's mean TTFT (ms) per scrape interval ``(times[k-1], times[k]]``, by first-token arrival.

    Every request with a first token counts (recorded phase or not, as the engine's histogram does);
    indexed by the interval's end, like :func:`hist_mean`. NaN where no first token arrived.
    """
    ft = records["first_token"].to_numpy(dtype=float)
    ttft = (records["first_token"] - records["scheduled"]).to_numpy(dtype=float)
    keep = np.isfinite(ft) & np.isfinite(ttft)
    ft, ttft = ft[keep], ttft[keep]
    k = np.searchsorted(times, ft, side="left")  # interval k ends at times[k]; 0 and len(times) lie outside
    inside = (k > 0) & (k < len(times))
    sums = np.bincount(k[inside], weights=ttft[inside], minlength=len(times))
    counts = np.bincount(k[inside], minlength=len(times))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, 1e3 * sums / np.maximum(counts, 1), np.nan)
    return pd.Series(mean[1:], index=times[1:])


def ttft_comparison(df: pd.DataFrame | None, records: pd.DataFrame | None) -> dict | None:
    """The engine's mean TTFT beside latbench's over the same scrape window, or None without both.

    Means, since a Prometheus histogram gives an exact mean (delta sum / delta count) but only bucketed
    percentiles. The window runs from the first to the last scrape; latbench's requests are those whose
    first token arrived in it. Returns ms: ``engine_ms``, ``latbench_ms`` (from the intended send time),
    ``latbench_sent_ms`` (from the actual send), ``outside_ms`` (latbench - engine), and the request counts
    of each side (``engine_requests``, ``latbench_requests``), which should agree when latbench was the only
    client.
    """
    if df is None or df.empty or records is None or records.empty or "first_token" not in records:
        return None
    df = normalise(df)
    base = _ttft_base(set(df["metric"].unique()))
    if base is None:
        return None
    sums, counts = total(df, base + "_sum"), total(df, base + "_count")
    if len(counts) < 2 or counts.iloc[-1] - counts.iloc[0] <= 0:
        return None
    lo, hi = float(counts.index[0]), float(counts.index[-1])
    ft = records["first_token"]
    sel = records[(ft > lo) & (ft <= hi)]
    if sel.empty:
        return None
    n = float(counts.iloc[-1] - counts.iloc[0])
    engine = 1e3 * float(sums.iloc[-1] - sums.iloc[0]) / n
    ours = 1e3 * float((sel["first_token"] - sel["scheduled"]).mean())
    from_sent = 1e3 * float((sel["first_token"] - sel["sent"]).mean())
    prefix = next(p for p in PREFIXES if base.startswith(p))
    return {"engine_ms": engine, "latbench_ms": ours, "latbench_sent_ms": from_sent, "outside_ms": ours - engine,
            "engine_requests": int(round(n)), "latbench_requests": int(len(sel)),
            "metric": prefix[:-1] + ":" + base[len(prefix):]}  # as the server names it: vllm:time_to_first_...


def ttft_panel(df: pd.DataFrame, records: pd.DataFrame | None) -> tuple[pd.Series, pd.Series | None] | None:
    """(engine TTFT ms, latbench TTFT ms or None) per scrape interval, or None when the engine reports none."""
    df = normalise(df)
    base = _ttft_base(set(df["metric"].unique()))
    if base is None:
        return None
    engine = hist_mean(df, base) * 1e3
    if not engine.notna().any():
        return None
    if records is None or records.empty or "first_token" not in records:
        return engine, None
    times = np.asarray(sorted(df["time"].unique()), dtype=float)
    return engine, client_ttft(records, times)


def gpu_utilization(frame: pd.DataFrame | None) -> dict | None:
    """GPU utilization against the article's 70-80% band, over the samples of telemetry.csv's ``frame``: median and
    the share of samples below, within and above it (percent, fractions); None when none was sampled (a CPU
    server)."""
    s = next((s for title, _, s, _ in panels(frame) if title == GPU_TITLE), None)
    v = s.dropna().to_numpy() if s is not None else np.empty(0)
    if not v.size:
        return None
    lo, hi = GPU_BAND
    return {"median": float(np.median(v)), "below": float(np.mean(v < lo)),
            "within": float(np.mean((v >= lo) & (v <= hi))), "above": float(np.mean(v > hi)), "scrapes": int(v.size)}


def server_plot(summary: Summary, df: pd.DataFrame | None, records: pd.DataFrame | None = None,
                frame: pd.DataFrame | None = None) -> tuple[str | None, list[str]]:
    """Client p99 above the server's panels on one time axis; returns (data URI or None, panel titles, each with
    the metric it was read from).

    ``df``: server_metrics.csv (raw, for the engine's TTFT); ``frame``: telemetry.csv (the panels; made from ``df``
    when not given). ``records``: the run's records frame (``loadgen.analysis.metrics.records_frame``); with it, a
    server that reports its own TTFT gets a panel with latbench's TTFT per interval beside the engine's.
    """
    has_df = df is not None and not df.empty
    frame = frame if frame is not None else (series_frame(df) if has_df else None)
    panels_ = [p for p in panels(frame) if p[2].notna().any()]
    ttft = ttft_panel(df, records) if has_df else None
    if not panels_ and ttft is None:
        return None, []
    ts = summary.timeseries or Timeseries()
    t = np.asarray(ts.t or [], dtype=float)
    step = float(ts.step_s or 1.0)
    p99 = series(ts.latency_p99 or [])
    phases = phase_windows(summary)
    rows = len(panels_) + (ttft is not None)
    fig, ax = figure(11, 1.6 + 1.5 * rows, 1 + rows, 1, sharex=True)
    a = ax[0, 0]
    if t.size:
        a.plot(t + step / 2, p99 * 1e3, color=PALETTE[1], lw=1.3, label="client p99")
    latency_axis(a, p99 * 1e3, "client p99")
    shade_phases(a, phases)
    for i, (title, unit, s, _) in enumerate(panels_, start=1):
        b = ax[i, 0]
        b.plot(s.index.to_numpy(), s.to_numpy(), color=PALETTE[(i + 1) % len(PALETTE)], lw=1.3, marker=".", ms=3)
        b.set_ylabel(f"{title}\n({unit})"), b.set_ylim(0, None if np.nanmax(s.to_numpy()) > 0 else 1)
        if title == GPU_TITLE:  # the article's band, where the GPU is busy but has room for a burst
            b.axhspan(*GPU_BAND, color=PALETTE[2], alpha=0.15, label="target 70-80%")
            b.set_ylim(0, 100)
            b.legend(loc="upper left", fontsize=7)
        shade_windows(b, phases)
    if ttft is not None:
        b, (engine, ours) = ax[-1, 0], ttft
        b.plot(engine.index.to_numpy(), engine.to_numpy(), color=PALETTE[4], lw=1.3, marker=".", ms=3,
               label="engine (its own histogram: arrival to first token)")
        if ours is not None and ours.notna().any():
            b.plot(ours.index.to_numpy(), ours.to_numpy(), color=PALETTE[1], lw=1.3, marker=".", ms=3,
                   label="latbench (intended send to first token received)")
        b.set_ylabel("TTFT mean\n(ms)"), b.set_ylim(0, None)
        b.legend(loc="upper right", fontsize=7)
        shade_windows(b, phases)
    ax[-1, 0].set_xlabel("time since start (s)")
    end = max([t[-1] + step if t.size else 0] + [p["end"] for p in phases] + [float(frame["time"].max())
                                                                               if frame is not None else 0.0])
    a.set_xlim(0, end)
    return to_uri(fig), ([f"{p[0]} ({p[3]})" for p in panels_]
                         + ([TTFT_TITLE] if ttft is not None else []))
