"""Derived metrics, each defined once, and the summary of a target's records.

Definitions (seconds; see ``loadgen.records.definitions``, written to metrics.json):

    latency      = done - scheduled            what a user waits; corrects coordinated omission
    service_time = done - sent                 what the server and network took
    ttft         = first_token - scheduled     streaming only; the first token of any kind (reasoning too)
    ttfat        = first_answer - scheduled    streaming only; the first answer token (not reasoning)
    reasoning_time = first_answer - first_token  requests that reasoned
    itl          = per-token gaps: a chunk of n tokens after a gap g gives n samples of g / n
    chunk_gap    = gaps between consecutive token chunks of one response
    tpot         = (done - first_token) / (output_tokens - 1)
    send_lag     = sent - scheduled            the generator's own lag

Token throughput (tokens per second; see ``tokens`` below for how each count was made):

    input_tokens_per_s             prompt tokens of successful requests completed in the window / duration
    output_tokens_per_s            output tokens of the same requests / duration
    output_tokens_per_s_per_user   per request, (output_tokens - 1) / (done - first_token): the decode speed
                                   one user sees (streamed requests with 2+ tokens; AIPerf's "output token
                                   throughput per user", 1 / tpot); a distribution, its low percentiles
                                   are the slowest users

Distributions are taken over successful requests of recorded phases. Errors are never dropped from
view: ``error_rate`` counts them, and ``latency_errors_inf`` gives the latency percentiles with every
failed request counted as infinitely slow. Requests the client aborted on purpose (``workload.cancel``)
are neither: they are counted in ``aborted`` / ``aborted_rate`` and left out of every distribution.
A request belongs to the phase of its scheduled time.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from loadgen import metric_registry
from loadgen.analysis.closedloop import closed_loop_stats
from loadgen.analysis.conversations import conversation_stats
from loadgen.analysis.features import image_block, media_cache_block, structured_block, tool_call_block
from loadgen.analysis.goodput import good_column, good_within
from loadgen.analysis.headline import burst_effects, headroom, in_flight_peaks
from loadgen.analysis.stats import PERCENTILES, describe, nearest_rank_unsorted, rank
from loadgen.records.definitions import SCHEMA_VERSION
from loadgen.records.results import (
    CapacityRef,
    Chunks,
    Generator,
    Recovery,
    RecoveryWindows,
    Scope,
    ShortPhase,
    SloResult,
    Summary,
    Timeseries,
)
from loadgen.records.schema import ABORTED, ERROR_CLASSES, TOKEN_SOURCES
from loadgen.scenario.model import GoodputObjectives
from loadgen.scenario.slo import SLO, percentile_of
from loadgen.schedule.arrivals import PhasePlan
from loadgen.units import json_num


def _arrow_lists(dtype: pa.DataType):
    return pd.ArrowDtype(dtype) if pa.types.is_list(dtype) else None


def records_frame(table: pa.Table) -> pd.DataFrame:
    """The records as a DataFrame with the derived per-request columns added. The list columns (token_times,
    chunk_tokens) stay Arrow lists (``pd.ArrowDtype``; an element reads as a Python list): a conversion to an
    array object per request cost more than the rest of the frame, and the stream metrics read them as Arrow.

    Each column its own block, on the calling thread: the numeric columns are then views of the Arrow buffers,
    not copies consolidated into one 2-D block per type by a thread pool (0.06-0.19 CPU-s for a 6 s closed
    loop's 586k records, against 0.003). Readers only read the frame; a view cannot be written."""
    df = table.to_pandas(types_mapper=_arrow_lists, split_blocks=True, use_threads=False)
    df["ok"] = df["error"] == ""
    df["aborted"] = df["error"] == ABORTED  # the client aborted it on purpose: neither success nor error
    df["failed"] = ~df["ok"] & ~df["aborted"]
    df["latency"] = df["done"] - df["scheduled"]
    df["service_time"] = df["done"] - df["sent"]
    df["ttft"] = df["first_token"] - df["scheduled"]
    if "first_answer" in df:  # a reader may select fewer columns (the reports' plots)
        df["ttfat"] = df["first_answer"] - df["scheduled"]
        df["reasoning_time"] = np.where(df["reasoning_tokens"] > 0, df["first_answer"] - df["first_token"], np.nan)
    if "first_tool_call" in df:
        df["ttftc"] = df["first_tool_call"] - df["scheduled"]
    n = df["output_tokens"].astype(np.float64)
    df["tpot"] = np.where(n > 1, (df["done"] - df["first_token"]) / (n - 1), np.nan)
    df["send_lag"] = df["sent"] - df["scheduled"]
    df["output_tokens_per_s_per_user"] = np.where(n > 1, (n - 1) / (df["done"] - df["first_token"]), np.nan)
    return df


def rows(df: pd.DataFrame, mask) -> pd.DataFrame:
    """The rows of ``df`` where ``mask`` holds: ``df`` itself when it holds for every row (one phase, every request
    recorded and successful: the usual short run), not a copy of every column. Callers only read the frame."""
    mask = np.asarray(mask, dtype=bool)
    return df if mask.all() else df[mask]


#: Percentiles of per-user output throughput: its low ones are the slowest users.
USER_TPS_PERCENTILES = (1, 5, 10, 50, 90, 99)


def token_counts(ok: pd.DataFrame) -> dict:
    """How the token counts of successful requests were made, and whether the server counted what latbench asked.

    ``usage_vs_counted`` compares, where both exist, the server's ``usage.prompt_tokens`` with latbench's own
    count (``input_tokens + added_tokens``): equal when the server tokenizes as latbench's tokenizer does."""
    sources = {}
    for col in ("prompt_tokens_source", "output_tokens_source"):
        vc = ok[col].value_counts()
        sources[col] = {s: int(vc.get(s, 0)) for s in TOKEN_SOURCES + ("",) if vc.get(s, 0)}
    added = ok.loc[ok["added_tokens"] >= 0, "added_tokens"].to_numpy()
    both = ok[(ok["prompt_tokens_source"] == "usage") & (ok["input_tokens"] >= 0) & (ok["added_tokens"] >= 0)]
    diff = (both["prompt_tokens"] - both["input_tokens"] - both["added_tokens"]).to_numpy()
    return {
        **sources,
        "input_tokens_mean": json_num(float(ok.loc[ok["input_tokens"] >= 0, "input_tokens"].mean()))
        if (ok["input_tokens"] >= 0).any() else None,
        "added_tokens": ({"min": int(added.min()), "mean": float(added.mean()), "max": int(added.max())}
                         if added.size else None),
        "usage_vs_counted": ({"n": int(diff.size), "equal": int((diff == 0).sum()), "min_diff": int(diff.min()),
                              "max_diff": int(diff.max())} if diff.size else None),
    }


def _list_array(column: pd.Series, value_type: pa.DataType) -> pa.Array:
    """A list column of a records frame as one Arrow list array: as :func:`records_frame` keeps it, or from a
    column of arrays (a frame built by hand)."""
    if isinstance(column.dtype, pd.ArrowDtype):
        arr = pa.array(column.array)
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    return pa.array([None if v is None else np.asarray(v) for v in column], type=pa.list_(value_type))


def _flat(lists: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, each value's row, each row's length) of a list array; a null list is an empty one."""
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = lists.flatten().to_numpy(zero_copy_only=False)
    return values, np.repeat(np.arange(len(lengths)), lengths), lengths


def chunk_gap_samples(df: pd.DataFrame) -> np.ndarray:
    """Gaps between consecutive token chunks of each stream (seconds), whatever each chunk carried."""
    t, row, _ = _flat(_list_array(df["token_times"], pa.float32()))
    t = t.astype(np.float64)
    return np.diff(t)[row[1:] == row[:-1]]


def itl_samples(df: pd.DataFrame) -> np.ndarray:
    """Per-token inter-token latency (seconds): a chunk that carried n tokens after a gap g is n samples of g / n.

    The tokens of one chunk were produced during the gap before it, so this is the time per token a decode
    step took, right when chunks carry several tokens; with one token a chunk it equals :func:`chunk_gap_samples`.
    A chunk counted as zero tokens (per-chunk usage that did not move) adds its gap to the next chunk's.
    A stream whose chunk counts are missing or do not match its chunks counts one token a chunk. One vectorised
    pass over all streams, in row order (the samples a loop over the streams would give, in its order).
    """
    t, row, lengths = _flat(_list_array(df["token_times"], pa.float32()))
    t = t.astype(np.float64)
    n = np.ones(t.size, dtype=np.int64)
    counts, crow, clengths = _flat(_list_array(df["chunk_tokens"], pa.int16()))
    valid = clengths == lengths  # per row: a count for each chunk
    if valid.any():
        n[valid[row]] = counts[valid[crow]]  # the same rows, in the same order, the same lengths
    keep = (lengths >= 2)[row] & (n > 0)
    t, n, row = t[keep], n[keep], row[keep]
    same = row[1:] == row[:-1]  # a gap within one stream (a row's first kept chunk starts no gap)
    per = n[1:][same]
    return np.repeat(np.diff(t)[same] / per, per)


def metric_samples(df: pd.DataFrame, metric: str) -> np.ndarray:
    """The samples of one distribution metric from the rows given (the caller picks them: successful ones,
    or all for send_lag): one per request, or one per gap for the stream metrics."""
    if metric == "itl":
        return itl_samples(df)
    if metric == "chunk_gap":
        return chunk_gap_samples(df)
    return df[metric].to_numpy(dtype=np.float64)


def reasoning_stats(ok: pd.DataFrame) -> dict:
    """Reasoning tokens of successful requests: how many requests reasoned, tokens in total and per such request."""
    r = ok["reasoning_tokens"].to_numpy()
    n = int((r > 0).sum())
    return {"requests": n, "tokens": int(r[r > 0].sum()), "tokens_mean": float(r[r > 0].mean()) if n else None}


def chunk_stats(df: pd.DataFrame) -> dict:
    """How many tokens the token chunks of successful streams carried, and how that is known.

    ``tokens_per_chunk``: tokens / chunks after each stream's first chunk (the first holds what the prefill
    gave); ``multi_token_fraction``: the share of those chunks that carried more than one token; ``sources``:
    streams per ``chunk_tokens_source``. None where no stream had a second chunk."""
    counts, row, _ = _flat(_list_array(df["chunk_tokens"], pa.int16()))
    allc = counts[1:][row[1:] == row[:-1]]  # every chunk but each stream's first
    sources = {str(k): int(v) for k, v in df["chunk_tokens_source"].value_counts().items() if k}
    if not allc.size:
        return {"tokens_per_chunk": None, "multi_token_fraction": None, "sources": sources}
    return {"tokens_per_chunk": float(allc.mean()), "multi_token_fraction": float((allc > 1).mean()),
            "sources": sources}


def _scope_stats(df: pd.DataFrame, start: float, end: float, target_qps: float, extra_pcts) -> Scope:
    duration = max(end - start, 1e-9)
    ok = rows(df, df["ok"])
    count = len(df)
    errors = {c: int(v) for c, v in df.loc[df["failed"], "error"].value_counts().items()}
    n_err = int(df["failed"].sum())
    n_aborted = int(df["aborted"].sum())
    ok_done = ok["done"].to_numpy()
    in_window = (ok_done >= start) & (ok_done < end)  # successful requests that completed inside the window
    metrics = {}
    pcts = tuple(sorted(set(PERCENTILES) | set(extra_pcts)))
    for m in map(metric_registry.metric, metric_registry.distributions()):
        if m.needs is not None and not (m.needs in df and (df[m.needs] > 0).any()):
            continue  # a workload feature this scope's requests did not have (tool calls...)
        metrics[m.name] = describe(metric_samples(df if m.of_all else ok, m.name), pcts)
    judged = ~df["aborted"].to_numpy()
    lat_inf = np.where(df["ok"].to_numpy()[judged], df["latency"].to_numpy()[judged], np.inf)
    good = df["good"].to_numpy()
    judged_good = ~np.isnan(good)
    done = df["done"].to_numpy()
    n_good_in_window = int(((good == 1) & (done >= start) & (done < end)).sum())
    features = {k: v for k, v in (("images", image_block(df, ok)), ("tool_calls", tool_call_block(df, ok)),
                                  ("media_cache", media_cache_block(ok)))
                if v is not None}  # only where the scope's requests had them (loadgen.analysis.features)
    if "tool_calls" in features:
        features["tool_call_rate"] = features["tool_calls"]["tool_call_rate"]
    structured = structured_block(ok)
    if structured is not None:
        features.update(structured=structured, json_valid_rate=structured["json_valid_rate"],
                        schema_valid_rate=structured["schema_valid_rate"])
    return Scope(
        start=start,
        end=end,
        duration_s=end - start,
        count=count,
        ok=int(len(ok)),
        errors=errors,
        error_rate=(n_err / count) if count else None,
        aborted=n_aborted,
        aborted_rate=(n_aborted / count) if count else None,
        target_qps=target_qps,
        sent_qps=int((df["error"] != "dropped").sum()) / duration,
        achieved_qps=int(in_window.sum()) / duration,
        input_tokens_per_s=float(np.nansum(ok["prompt_tokens"].to_numpy()[in_window].clip(min=0))) / duration,
        output_tokens_per_s=float(np.nansum(ok["output_tokens"].to_numpy()[in_window])) / duration,
        goodput=float(good[judged_good].sum() / judged_good.sum()) if judged_good.any() else None,
        goodput_qps=n_good_in_window / duration if judged_good.any() else None,
        chunks=chunk_stats(ok),
        reasoning=reasoning_stats(ok),
        output_tokens_per_s_per_user=describe(ok["output_tokens_per_s_per_user"].to_numpy(), USER_TPS_PERCENTILES),
        tokens=token_counts(ok),
        metrics=metrics,
        latency_errors_inf=describe(lat_inf, pcts)["percentiles"],
        **features,
    )


def _chunk_note(chunks: Chunks) -> list[str]:
    """A note when streams carried more than one token per chunk (empty otherwise)."""
    frac = chunks.multi_token_fraction
    if not frac:
        return []
    sources = ", ".join(f"{k} ({v})" for k, v in sorted(chunks.sources.items()))
    return [f"streams carried {chunks.tokens_per_chunk:.2f} tokens per chunk after the first "
            f"({frac:.0%} of chunks more than one; counted from: {sources}): itl is per token, "
            "chunk_gap the gap between chunks"]


def window_stats(df: pd.DataFrame, start: float, end: float, slos: list[SLO],
                 goodput_bounds: dict[str, float] | None = None) -> Scope:
    """The statistics of the records of one stretch ``[start, end)`` (run seconds), as summary.json holds them
    per phase, with the percentiles ``slos`` need: what a sliding window is judged on. ``goodput_bounds``: the
    per-request bounds of the scenario's goodput: block that apply here (metric -> s); None: no goodput."""
    extra = [percentile_of(s.stat) for s in slos if s.stat and percentile_of(s.stat)]
    df = df.assign(good=good_within(df, goodput_bounds))
    return _scope_stats(df, start, end, None, extra)


def send_lag_limited(scope: Scope, threshold: float) -> bool:
    """Whether the generator's lag makes a scope's numbers describe the generator (seconds; a scope's stats).

    Lagging when the p99 is clearly over the threshold: its 95% interval's lower bound is (one hiccup in
    a short run moves the p99 of 20 samples, not that bound), and the lag is large enough to matter: a
    latency counts from the intended send time, so a lag can distort it by at most its own size, and a
    lag under a tenth of the median latency is reported but cannot change what the run concludes."""
    ci = scope.metrics["send_lag"].pct("p99").ci
    lat_p50 = scope.metrics["latency"].stat("p50")
    lag_low = ci[0] if ci and ci[0] is not None else None
    return bool(lag_low is not None and lag_low > threshold and (lat_p50 is None or lag_low > 0.1 * lat_p50))


RECOVERY_WINDOW_S = 2.0
RECOVERY_STEP_S = 0.5  # the windows slide by this much: the resolution of a recovery time


def recovery(df: pd.DataFrame, plans: list[PhasePlan], slos: list[SLO]) -> list[Recovery]:
    """After each spike (an open-loop phase whose rate is above the next one's), how long until the
    rolling p99 latency (2 s windows by scheduled time sliding by 0.5 s, failed requests as infinitely
    slow) is back under the latency.p99 objective of the phase after it, and stays there. ``seconds`` None:
    did not recover. ``window_requests``: the median count of requests in a window (a window's p99 is its
    maximum below 100 requests: how coarse the rule is); ``windows``: each window's start and p99;
    ``measured``: whether any request was sent in the phase after (a run that stopped before it has none)."""
    out = []
    for cur, nxt in zip(plans, plans[1:]):
        if cur.closed or nxt.closed or 0.5 * (cur.rate_start + cur.rate_end) <= 0.5 * (nxt.rate_start + nxt.rate_end):
            continue
        limits = [s.threshold for s in slos if s.metric == "latency" and s.stat == "p99" and s.op in ("<", "<=")
                  and s.scope_parts()[1] in (None, nxt.name)]
        if not limits:
            continue
        limit = min(limits)
        sel = df[(df["scheduled"] >= nxt.start) & (df["scheduled"] < nxt.end) & ~df["aborted"]]
        lat = np.where(sel["ok"], sel["latency"], np.inf)
        sched = sel["scheduled"].to_numpy()
        ends = np.arange(nxt.start + RECOVERY_WINDOW_S, nxt.end + 1e-9, RECOVERY_STEP_S)
        good, sizes, p99s = [], [], []
        for e in ends:
            w = lat[(sched >= e - RECOVERY_WINDOW_S) & (sched < e)]
            p99s.append(nearest_rank_unsorted(w, 99) if w.size else math.nan)
            good.append(w.size == 0 or p99s[-1] < limit)
            sizes.append(w.size)
        seconds = None
        for i in range(len(good)):
            if all(good[i:]) and any(sizes[i:]):  # empty windows alone (the run stopped) show no recovery
                seconds = float(ends[i] - RECOVERY_WINDOW_S - nxt.start)  # the first good window's start
                break
        out.append(Recovery(spike=cur.name, phase=nxt.name, threshold=limit, window_s=RECOVERY_WINDOW_S,
                            step_s=RECOVERY_STEP_S, window_requests=float(np.median(sizes)) if sizes else 0.0,
                            seconds=seconds, recovered=seconds is not None, measured=bool(len(sel)),
                            windows=RecoveryWindows(start=[float(e - RECOVERY_WINDOW_S) for e in ends],
                                                    p99=[json_num(v) for v in p99s])))
    return out


def timeseries(df: pd.DataFrame, plans: list[PhasePlan], duration: float, step: float = 1.0) -> Timeseries:
    """Per-second series over the whole run (all phases, recorded or not); ``in_flight``: requests in flight at the
    end of each second (sent, not done), ``in_flight_peak``: the most in flight at any moment of it (the chart's and
    the headline's peaks)."""
    nb = max(1, int(math.ceil(duration / step)))
    edges = np.arange(nb + 1) * step
    done = df["done"].to_numpy()
    sent = df["sent"].to_numpy()
    okm = df["ok"].to_numpy()
    lat = df["latency"].to_numpy()
    b = np.clip((done // step).astype(np.int64), 0, nb - 1)
    p50 = np.full(nb, np.nan)
    p99 = np.full(nb, np.nan)
    okb = b[okm]
    order = np.argsort(okb, kind="stable")  # records arrive nearly in done order: timsort's runs, not a full sort
    bs, ls = okb[order], lat[okm][order]
    bounds = np.searchsorted(bs, np.arange(nb + 1))
    for i in range(nb):
        seg = ls[bounds[i] : bounds[i + 1]]
        if seg.size:  # the two nearest ranks by partial sort (a bin's latencies sorted cost a 6 s run 0.08 CPU-s)
            k50, k99 = rank(seg.size, 50) - 1, rank(seg.size, 99) - 1
            part = np.partition(seg, (k50, k99))
            p50[i], p99[i] = part[k50], part[k99]
    sent_sorted = np.sort(sent[~np.isnan(sent)])
    done_sent = np.sort(done[~np.isnan(sent)])
    in_flight = np.searchsorted(sent_sorted, edges[1:], "right") - np.searchsorted(done_sent, edges[1:], "right")
    mid = edges[:-1] + step / 2
    target = [sum(p.rate_at(t) for p in plans) for t in mid]
    errs = {}
    for cls in sorted(set(df.loc[df["failed"], "error"])):
        sel = df["error"].to_numpy() == cls
        errs[cls] = np.bincount(b[sel], minlength=nb).tolist()
    return Timeseries(
        t=edges[:-1].tolist(),
        step_s=step,
        completed=np.bincount(b, minlength=nb).tolist(),
        ok=np.bincount(b[okm], minlength=nb).tolist(),
        sent=np.bincount(np.clip((sent_sorted // step).astype(np.int64), 0, nb - 1), minlength=nb).tolist(),
        errors=errs,
        latency_p50=[json_num(v) for v in p50],
        latency_p99=[json_num(v) for v in p99],
        in_flight=in_flight.tolist(),
        target_qps=target,
        in_flight_peak=in_flight_peaks(df, edges).tolist(),  # each bin's peak: the headline's peaks are the chart's
    )


def summarize(table: pa.Table, plans: list[PhasePlan], slos: list[SLO], duration: float, **kw) -> dict:
    """:func:`build_summary` as the JSON it writes (a plain dict: what a recomputed summary.json holds, and what
    tests compare against); the same arguments."""
    return build_summary(table, plans, slos, duration, **kw).to_json()


def build_summary(table: pa.Table, plans: list[PhasePlan], slos: list[SLO], duration: float, *,
                  target: str = "target", scenario: str = "", complete: bool = True, notes: list[str] | None = None,
                  send_lag_threshold: float = 0.005, cpu_seconds: float | None = None, processes: int = 1,
                  failed_fast: str | None = None, expected_qps: float | None = None,
                  capacity: CapacityRef | None = None,
                  timeseries_step: float = 1.0, goodput: list[GoodputObjectives] | None = None,
                  tokens: dict | None = None) -> Summary:
    """The summary.json of one target, as its model: per phase and overall, the time series, and its SLO
    verdicts; with
    the headline numbers of :mod:`loadgen.analysis.headline` (``burst``, ``headroom``: ``expected_qps`` is
    the scenario's, ``capacity`` the fields of a capacity search of the same target).

    ``failed_fast``: the objective --fail-fast stopped the run on (kept as a field: the verdict reads it).
    ``timeseries_step``: seconds per time-series bin (a watch that ran for days takes coarser ones).
    ``goodput``: the scenario's per-request objectives (:mod:`loadgen.analysis.goodput`); None: no goodput.
    ``tokens``: how token counts were made (the tokenizer or the approximation, the special tokens it adds),
    kept as ``summary["tokens"]``."""
    df = records_frame(table)
    df["good"] = good_column(df, plans, goodput, target)
    extra = [percentile_of(s.stat) for s in slos if s.stat and percentile_of(s.stat)]
    phases = {}
    for p in plans:
        sel = rows(df, df["phase"] == p.index)
        tq = 0.5 * (p.rate_start + p.rate_end) if not p.closed else None
        end = min(p.end, max(duration, p.start))
        st = _scope_stats(sel, p.start, end, tq, extra)
        st.recorded, st.concurrency = p.recorded, p.concurrency
        st.closed_loop = closed_loop_stats(sel, p, end) if p.closed else None
        phases[p.name] = st
    rec_plans = [p for p in plans if p.recorded]
    rec = rows(df, df["recorded"])
    if rec_plans:
        start, end = min(p.start for p in rec_plans), min(max(p.end for p in rec_plans), max(duration, 0))
        span = sum(p.duration for p in rec_plans)
        tq = ((sum(0.5 * (p.rate_start + p.rate_end) * p.duration for p in rec_plans if not p.closed) / span)
              if span else 0)
    else:
        start, end, tq = 0.0, duration, 0.0
    overall = _scope_stats(rec, start, max(end, start + 1e-9), tq, extra)
    lag_p99 = overall.metrics["send_lag"].stat("p99")
    cpu_util = (cpu_seconds / duration / processes) if (cpu_seconds is not None and duration > 0) else None
    lagging = send_lag_limited(overall, send_lag_threshold)
    if not lagging and lag_p99 is not None and lag_p99 > send_lag_threshold:
        notes = list(notes or []) + [f"send lag p99 {lag_p99 * 1e3:.1f} ms is above the "
                                     f"{send_lag_threshold * 1e3:g} ms "
                                     "threshold, but small against the latencies measured"]
    saturated = cpu_util is not None and cpu_util > 0.9
    short = [ShortPhase(phase=name, asked=cl.asked, held=cl.held, fraction=cl.fraction, measure=cl.measure)
             for name, cl in ((name, ph.closed_loop) for name, ph in phases.items()) if cl and cl.limited]
    notes = list(notes or []) + _chunk_note(overall.chunks)
    recovered = recovery(df, plans, slos)
    slo_results = evaluate_slos(overall, phases, slos, target)
    generator = Generator(send_lag_p99=lag_p99, send_lag_threshold=send_lag_threshold, cpu_utilization=cpu_util,
                          lagging=lagging, cpu_saturated=saturated, closed_loop_short=short)
    return Summary(
        schema_version=SCHEMA_VERSION, scenario=scenario, target=target, complete=complete, failed_fast=failed_fast,
        notes=list(notes or []), duration_s=duration, generator=generator,
        generator_limited=bool(lagging or saturated or short), error_classes=list(ERROR_CLASSES), tokens=tokens,
        overall=overall, phases=phases, timeseries=timeseries(df, plans, duration, timeseries_step),
        recovery=recovered, conversations=conversation_stats(df), slo=slo_results,
        passed=all(r.passed for r in slo_results if r.applies),
        burst=burst_effects(df, plans, phases, recovered),
        headroom=headroom(plans, phases, slo_results, expected_qps, capacity))


def slo_value(scope: Scope, slo: SLO):
    """(value, ci) of an objective within one scope's statistics."""
    if slo.stat is None:
        return scope.value(slo.metric), None
    desc = scope.metric(slo.metric)
    if desc is None:  # a metric of a workload feature the scope's requests did not have (ttftc without tool calls)
        return None, None
    return desc.stat(slo.stat), desc.pct(slo.stat).ci if slo.stat.startswith("p") else None


def evaluate_slos(overall: Scope, phases: dict[str, Scope], slos: list[SLO], target: str) -> list[SloResult]:
    """One result per objective, judged on the ``overall`` scope or on the phase it names; an objective scoped to
    another target does not apply here."""
    out = []
    for s in slos:
        tgt, name = s.scope_parts()
        applies, scope = True, overall
        if tgt is not None and tgt != target:
            applies = False
        elif name is not None:
            if name in phases:
                scope = phases[name]
            elif tgt is None and name == target:
                scope = overall
            elif tgt is None:
                applies = False  # scoped to another target's name
            else:
                scope = None
        if not applies:
            out.append(SloResult(expr=s.expr, applies=False, passed=True, value=None, ci=None))
            continue
        if scope is None:
            out.append(SloResult(expr=s.expr, applies=True, passed=False, value=None, ci=None,
                                 reason=f"no phase named {name!r}"))
            continue
        value, ci = slo_value(scope, s)
        out.append(SloResult(expr=s.expr, metric=s.metric, stat=s.stat, op=s.op, threshold=s.threshold,
                             scope=s.scope, applies=True, value=value, ci=ci, passed=s.check(value),
                             **({"upper": s.upper} if s.upper is not None else {})))
    return out
