"""The figures of a report from loaded targets: gathers samples (downsampled) and calls reports.plots."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.metrics import itl_samples  # the one definition of inter-token latency
from loadgen.records.results import StartGroup
from reports import plots
from reports.host import host_caption, host_plot
from reports.rundir_loader import PLOT_COLUMNS, TOKEN_COLUMNS, TargetData
from reports.server import gpu_utilization, server_plot, ttft_comparison

ITL_SAMPLE = 5000  # requests whose token gaps feed the ITL histogram
HIST_SAMPLE = 200_000


def _ok_recorded(td: TargetData) -> pd.DataFrame:
    """The successful requests of recorded phases (a view of the frame, computed once per target)."""
    if not td.has_records:
        return pd.DataFrame()
    return td.ok_recorded()


def _sample(v: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    if v.size <= n:
        return v
    return np.random.default_rng(seed).choice(v, n, replace=False)


def itl_sample(td: TargetData, ok: pd.DataFrame) -> np.ndarray:
    """Per-token inter-token gaps (s) of at most ITL_SAMPLE successful requests, drawn at random with a fixed
    seed (a chunk of n tokens counts as n gaps: :func:`~loadgen.analysis.metrics.itl_samples`)."""
    if ok.empty:
        return np.empty(0)
    idx = ok.index.to_numpy()
    if idx.size > ITL_SAMPLE:
        idx = np.sort(np.random.default_rng(1).choice(idx, ITL_SAMPLE, replace=False))
    lists = td.table(TOKEN_COLUMNS)
    if lists.num_rows != td.table(PLOT_COLUMNS).num_rows:  # read apart from the frame: unreadable since
        return np.empty(0)
    lists = lists.take(idx)
    return itl_samples(lists.to_pandas(types_mapper=pd.ArrowDtype))  # Arrow lists, as itl_samples reads them


def latency_samples(targets: list[tuple[str, TargetData | list[TargetData]]]) -> list[tuple[str, np.ndarray]]:
    """Successful recorded latencies (s) of each label; a list of targets (the fresh starts of one
    architecture) is pooled."""
    out = []
    for label, tds in targets:
        parts = [_ok_recorded(td)["latency"].to_numpy() for td in _as_list(tds) if td.has_records]
        out.append((label, np.concatenate(parts) if parts else np.empty(0)))
    return out


def _as_list(tds) -> list[TargetData]:
    return tds if isinstance(tds, list) else [tds]


def _pooled_ok(tds: list[TargetData]) -> pd.DataFrame:
    frames = [_ok_recorded(td) for td in tds]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def overview_figures(targets: list[tuple[str, TargetData | list[TargetData]]]) -> list[dict]:
    """Figures across targets: latency CDF, TTFT / ITL distributions, latency breakdown. A label with a
    list of targets (the fresh starts of one architecture) pools their requests."""
    if any(isinstance(tds, list) for _, tds in targets):
        return _pooled_figures([(label, _as_list(tds)) for label, tds in targets])
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
        phases = list(((td.result.phases if td.result else None) or {}).items())
        if sum(1 for _, ph in phases if ph.is_recorded) > 1:
            for i, (name, ph) in enumerate(phases):
                if ph.is_recorded:
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


def _pooled_figures(groups: list[tuple[str, list[TargetData]]]) -> list[dict]:
    """CDF, TTFT / ITL and the breakdown with the requests of each architecture's starts pooled."""
    figs = []
    cdf = plots.cdf_plot(latency_samples(groups), "Latency CDF (every request of every start)")
    if cdf:
        figs.append({"id": "cdf", "title": "Latency CDF", "uri": cdf,
                     "caption": "Every successful request of all fresh starts of each architecture, pooled: the "
                                "first requests after a start make the tail. Right: fraction slower than x."})
    dist, bars = [], []
    for label, tds in groups:
        ok = _pooled_ok(tds)
        if ok.empty:
            continue
        itl = [itl_sample(td, _ok_recorded(td)) for td in tds if td.has_records]
        dist.append((label, ok["ttft"].dropna().to_numpy(), np.concatenate(itl) if itl else np.empty(0)))
        bars.append((f"{label} · all starts", plots.breakdown_means(ok)))
    d = plots.distributions_plot(dist)
    if d:
        figs.append({"id": "dist", "title": "TTFT and inter-token latency", "uri": d,
                     "caption": "Share of requests (TTFT) and of token gaps (ITL) per bin, log axis, starts pooled."})
    b = plots.breakdown_plot(bars)
    if b:
        figs.append({"id": "breakdown", "title": "Where the time goes", "uri": b,
                     "caption": "Mean per successful request over all starts (see each start's own figures below)."})
    return figs


def warmup_figure(cold_start: dict[str, StartGroup]) -> dict | None:
    """The warm-up curve of a cold-start study (from cold_start.json)."""
    uri = plots.warmup_plot(cold_start)
    if uri is None:
        return None
    return {"id": "warmup", "title": "Warm-up curve", "uri": uri,
            "caption": "Latency of each request after a fresh start, one line per start, one colour per "
                       "architecture; a dotted line is a start that was not cold. Dashed: each architecture's "
                       "steady latency (median over starts). Naive loads the model on its first request; optimized "
                       "loads and warms up before it says ready."}


def target_figures(td: TargetData) -> list[dict]:
    """Per-target figures: time series with phases shaded, and server metrics beside client p99."""
    figs = []
    if td.result:
        ts = plots.timeseries_plot(td.result)
        if ts:
            marked = "" if not td.result.burst else (
                " Green: from the spike's end to the recovery time (dashed: the objective recovered to; dash-dot: "
                "the recovery rule's own windows); purple: the drain back to the baseline's peak in flight (dashed).")
            figs.append({"id": "timeseries", "title": "Over time", "uri": ts,
                         "caption": "Per second: latency p50 / p99 of completed requests; target, sent and achieved "
                                    "request rates; errors by class; the most requests in flight at any moment of "
                                    "it. Phases shaded." + marked})
        hp = host_plot(td.result, td.host())
        if hp:
            figs.append({"id": "host", "title": "Host: CPU waits", "uri": hp, "caption": host_caption(td.result)})
        records = td.frame() if td.has_records else None
        sp, panels = server_plot(td.result, td.server_metrics(), records, td.telemetry())
        if sp:
            gpu = gpu_utilization(td.telemetry())
            band = ("" if gpu is None else
                    f" GPU utilization: median {gpu['median']:.0f}%; {gpu['within']:.0%} of scrapes within the "
                    f"article's 70-80% band (shaded), {gpu['below']:.0%} below, {gpu['above']:.0%} above.")
            figs.append({"id": "server", "title": "Server side", "uri": sp,
                         "caption": "The target's own telemetry (its Prometheus /metrics, and NVML or DCGM where "
                                    "sampled), every second on the same clock as the requests: "
                                    + ", ".join(panels) + " (per scrape interval)." + band + _ttft_note(
                                        ttft_comparison(td.server_metrics(), records))})
    return figs


def _ttft_note(c: dict | None) -> str:
    """One sentence setting the engine's own mean TTFT beside latbench's (ms), or '' without it."""
    if not c:
        return ""
    return (f" Mean TTFT over the scraped window: the engine's own {c['engine_ms']:.1f} ms ({c['engine_requests']} "
            f"requests, its {c['metric']} histogram: arrival in the server to first token) vs "
            f"latbench's {c['latbench_ms']:.1f} ms ({c['latbench_requests']} requests, from the intended send time; "
            f"{c['latbench_sent_ms']:.1f} ms from the actual send): {c['outside_ms']:.1f} ms per request is spent "
            f"outside the engine (generator, network, HTTP server, tokenizing, streaming the chunk back).")
