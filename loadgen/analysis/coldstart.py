"""A cold-start study: several fresh starts of each managed target, summed up per target (cold_start.json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.analysis.metrics import records_frame
from loadgen.records.rundir import REQUESTS
from loadgen.records.schema import read_records


@dataclass
class StartRun:
    """One fresh start of a target: its folder in the RunDir, the server's start-up times, whether it ran."""

    group: str  # the target (architecture) it is a start of
    dir: str
    server: dict  # listen_s, ready_s, ...
    ran: bool


def cold_start_summary(starts: list[StartRun], root: Path) -> dict:
    """Per target over its fresh starts: time to listen, to ready, first-request latency and TTFT, and
    the warm-up curve (median latency of request 1..N across starts). Seconds throughout."""
    groups: dict[str, list[StartRun]] = {}
    for st in starts:
        groups.setdefault(st.group, []).append(st)
    out = {}
    for group, sts in groups.items():
        curves, first_lat, first_ttft = [], [], []
        for st in sts:
            if not st.ran:
                continue
            df = records_frame(read_records(root / st.dir / REQUESTS)).sort_values("scheduled")
            lat = np.where(df["ok"], df["latency"], np.inf)
            curves.append(lat)
            if len(df):
                first_lat.append(float(lat[0]))
                first_ttft.append(float(df["ttft"].iloc[0]))
        n = max((len(c) for c in curves), default=0)
        curve = [float(np.median([c[i] for c in curves if len(c) > i])) for i in range(n)]
        out[group] = {
            "starts": len(sts),
            "listen_s": [st.server.get("listen_s") for st in sts],
            "ready_s": [st.server.get("ready_s") for st in sts],
            "first_latency_s": first_lat,
            "first_ttft_s": first_ttft,
            "warmup_curve_s": curve,
            "steady_latency_s": float(np.median(curve[len(curve) // 2:])) if curve else None,
        }
    return out
