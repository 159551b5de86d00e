"""A cold-start study summed up (cold_start.json): several fresh starts of each managed target, grouped
under the target (the architecture) they are starts of.

:func:`cold_start_summary` reads the RunDir of such a study alone (meta.json's target entries, each start's
records and scraped server metrics): per architecture, each start's time to listen and to ready, model
load time (the server's own ``model_load_seconds`` gauge), first-request latency and TTFT, steady latency
and the first-request penalty over it, and whether the start was cold (the page-cache check the run made
before it, :mod:`loadgen.run.coldstart`); and over the starts, the median and range of each: the numbers
a report's headline quotes. With five starts the range is a 94% interval of the median:
P(min <= median <= max) = 1 - 2 / 2^5. Seconds throughout.

One idea at several stages, cold-start studies, so one file name: :mod:`loadgen.run.coldstart` (making each start cold).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen.analysis.metrics import records_frame
from loadgen.records.results import (
    ColdRules,
    Meta,
    MetaTarget,
    ServerInfo,
    StartGroup,
    StartRow,
    StartSpread,
    WeightsFile,
)
from loadgen.records.rundir import REQUESTS, SERVER_METRICS
from loadgen.records.schema import read_records, records_exist

COLD_RESIDENT_MAX = 0.01  # a start is cold when at most this share of its weights file was in the page cache
STEADY_WITHIN = 0.10  # "warm": latency within this fraction of the start's steady latency
_LOAD_GAUGE = "refserver:model_load_seconds"


def _spread(values: list) -> StartSpread:
    """Median, min and max of the finite values (seconds or counts); n counts them."""
    v = np.asarray([x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))], dtype=float)
    if v.size == 0:
        return StartSpread(n=0, median=None, min=None, max=None)
    return StartSpread(n=int(v.size), median=float(np.median(v)), min=float(v.min()), max=float(v.max()))


def start_stats(latencies: np.ndarray, ttft_first: float | None) -> dict:
    """One start's first request, steady state and warm-up, from its latencies in send order (s; a failed
    request is +inf). Steady latency: the median of the second half, never counting the first request
    (a start that made one request has none). ``first_steady_request``: the 1-based index of the first
    request within STEADY_WITHIN of it."""
    lat = np.asarray(latencies, dtype=float)
    if lat.size == 0:
        return {"first_latency_s": None, "first_ttft_s": None, "steady_latency_s": None, "penalty_s": None,
                "first_steady_request": None}
    steady = float(np.median(lat[max(1, lat.size // 2):])) if lat.size > 1 else math.nan
    within = np.nonzero(lat <= (1.0 + STEADY_WITHIN) * steady)[0] if math.isfinite(steady) else np.empty(0)
    return {"first_latency_s": float(lat[0]), "first_ttft_s": ttft_first,
            "steady_latency_s": steady if math.isfinite(steady) else None,
            "penalty_s": float(lat[0] - steady) if math.isfinite(steady) else None,
            "first_steady_request": int(within[0]) + 1 if within.size else None}


def model_load_seconds(tdir: Path) -> float | None:
    """The server's own model load time, from the scraped ``model_load_seconds`` gauge (its largest value:
    a lazy server sets it after its first request)."""
    p = tdir / SERVER_METRICS
    if not p.exists():
        return None
    try:
        df = pd.read_csv(p, dtype={"metric": str}, keep_default_na=False)
        v = pd.to_numeric(df.loc[df["metric"] == _LOAD_GAUGE, "value"], errors="coerce").dropna()
    except (ValueError, KeyError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    return float(v.max()) if len(v) and v.max() > 0 else None


HEADLINE_FIELDS = ("ready_s", "listen_s", "model_load_s", "first_latency_s", "first_ttft_s", "steady_latency_s",
                   "penalty_s", "first_steady_request")


def cold_start_summary(root: Path, meta: Meta) -> dict[str, StartGroup]:
    """cold_start.json's groups of the RunDir at ``root``, from its files alone (meta.json's target entries, each
    start's records and scraped server metrics): per group (architecture), each start and the spread over
    starts. Also what the loader runs for a RunDir left without cold_start.json."""
    groups: dict[str, list[MetaTarget]] = {}
    for entry in meta.targets:
        if entry.group is not None:
            groups.setdefault(entry.group, []).append(entry)
    out = {}
    for group, entries in groups.items():
        per_start, curves = [], []
        for e in entries:
            tdir = Path(root) / e.dir
            server = e.server or ServerInfo()
            lat = np.empty(0)
            ttft0 = None
            if records_exist(tdir / REQUESTS):  # also a killed run's partial stream or parts
                df = records_frame(read_records(tdir / REQUESTS)).sort_values("scheduled")
                lat = np.where(df["ok"], df["latency"], np.inf)
                if len(df) and not math.isnan(df["ttft"].iloc[0]):
                    ttft0 = float(df["ttft"].iloc[0])
            per_start.append(StartRow(start=e.start, target=e.name, listen_s=server.listen_s, ready_s=server.ready_s,
                                      model_load_s=model_load_seconds(tdir), cold=e.cold.cold if e.cold else None,
                                      page_cache=e.cold, **start_stats(lat, ttft0), latencies_s=lat.tolist()))
            curves.append(lat)
        n = max((len(c) for c in curves), default=0)
        curve = [float(np.median([c[i] for c in curves if len(c) > i])) for i in range(n)]
        weights = next((e.cold for e in entries if e.cold and e.cold.weights), None)
        out[group] = StartGroup(
            starts=len(entries),
            listen_s=[r.listen_s for r in per_start],
            ready_s=[r.ready_s for r in per_start],
            first_latency_s=[r.first_latency_s for r in per_start if r.first_latency_s is not None],
            first_ttft_s=[r.first_ttft_s for r in per_start if r.first_ttft_s is not None],
            warmup_curve_s=curve,
            steady_latency_s=float(np.median(curve[len(curve) // 2:])) if curve else None,
            per_start=per_start,
            weights=WeightsFile(path=weights.weights, bytes=weights.bytes) if weights else None,
            weights_prepared=entries[0].weights_prepared if entries else None,
            cold_starts=sum(1 for r in per_start if r.cold is True),
            cold_unknown=sum(1 for r in per_start if r.cold is None),
            rules=ColdRules(cold_resident_max=COLD_RESIDENT_MAX, steady_within=STEADY_WITHIN),
            over_starts={f: _spread([getattr(r, f) for r in per_start]) for f in HEADLINE_FIELDS},
        )
    return out
