"""The figures of a report from loaded targets: gathers samples (downsampled) and calls reports.plots."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.metrics import itl_samples  # the one definition of inter-token latency
from reports import plots
from reports.loader import TargetData
from reports.server import server_plot

ITL_SAMPLE = 5000  # requests whose token gaps feed the ITL histogram
HIST_SAMPLE = 200_000


def _ok_recorded(td: TargetData) -> pd.DataFrame:
    if not td.has_records:
        return pd.DataFrame()
    df = td.frame()
    return df[df["ok"] & df["recorded"]]


def _sample(v: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    if v.size <= n:
        return v
    return np.random.default_rng(seed).choice(v, n, replace=False)


def itl_sample(td: TargetData, ok: pd.DataFrame) -> np.ndarray:
    """Per-token inter-token gaps (s) of at most ITL_SAMPLE successful requests, drawn at random with a fixed
    seed (a chunk of n tokens counts as n gaps: :func:`~loadgen.analysis.metrics.itl_samples`)."""
    if ok.empty or "token_times" not in td.table().column_names:
        return np.empty(0)
    idx = ok.index.to_numpy()
    if idx.size > ITL_SAMPLE:
        idx = np.sort(np.random.default_rng(1).choice(idx, ITL_SAMPLE, replace=False))
    table = td.table()
    cols = ("token_times", "chunk_tokens")
    return itl_samples(pd.DataFrame({c: table.column(c).take(idx).to_pandas() for c in cols}))


def latency_samples(targets: list[tuple[str, TargetData]]) -> list[tuple[str, np.ndarray]]:
    return [(label, _ok_recorded(td)["latency"].to_numpy() if td.has_records else np.empty(0)) for label, td in targets]


def overview_figures(targets: list[tuple[str, TargetData]]) -> list[dict]:
    """Figures across targets: latency CDF, TTFT / ITL distributions, latency breakdown."""
    figs = []
    cdf = plots.cdf_plot(latency_samples(targets), "Latency CDF (successful requests, recorded phases)")
    if cdf:
        figs.append({"id": "cdf", "title": "Latency CDF", "uri": cdf,
                     "caption": "Left: fraction of requests at or below each latency (log axis). Right: the tail, "
                                "fraction slower than x; where a curve crosses the dashed lines is its p99 / p99.9."})
    dist, bars = [], []
    for label, td in targets:
        ok = _ok_recorded(td)
        if ok.empty:
            continue
        dist.append((label, _sample(ok["ttft"].dropna().to_numpy(), HIST_SAMPLE),
                     _sample(itl_sample(td, ok), HIST_SAMPLE)))
        bars.append((f"{label} · all recorded", plots.breakdown_means(ok)))
        phases = list((td.summary or {}).get("phases", {}).items())
        if sum(1 for _, ph in phases if ph.get("recorded", True)) > 1:
            for i, (name, ph) in enumerate(phases):
                if ph.get("recorded", True):
                    bars.append((f"{label} · {name}", plots.breakdown_means(ok[ok["phase"] == i])))
    d = plots.distributions_plot(dist)
    if d:
        figs.append({"id": "dist", "title": "TTFT and inter-token latency", "uri": d,
                     "caption": "Share of requests (TTFT) and of token gaps (ITL) per bin, log axis."})
    b = plots.breakdown_plot(bars)
    if b:
        figs.append({"id": "breakdown", "title": "Where the time goes", "uri": b,
                     "caption": "Mean per successful request: send lag (generator), new-connection setup, TLS, "
                                "waiting for the first byte, then for the first token (streams: queue and prefill), "
                                "then generation / transfer until the last byte."})
    return figs


def target_figures(td: TargetData) -> list[dict]:
    """Per-target figures: time series with phases shaded, and server metrics beside client p99."""
    figs = []
    if td.summary:
        ts = plots.timeseries_plot(td.summary)
        if ts:
            figs.append({"id": "timeseries", "title": "Over time", "uri": ts,
                         "caption": "Per second: latency p50 / p99 of completed requests; target, sent and achieved "
                                    "request rates; errors by class; requests in flight. Phases shaded."})
        sp, panels = server_plot(td.summary, td.server_metrics())
        if sp:
            figs.append({"id": "server", "title": "Server side", "uri": sp,
                         "caption": "Scraped from the target's Prometheus /metrics every second, on the same clock: "
                                    + ", ".join(panels) + " (per scrape interval)."})
    return figs
