"""The RunDir's one time-series format: ``time, source, metric, value``, one row a value.

``time``: seconds since the run's t0 on ``time.perf_counter`` (the records' clock); ``source``: what was measured
(host.csv: a process tree, ``latbench`` / ``server`` / ``host``; telemetry.csv: the engine's or GPU's own metric name
a value was read from); ``metric``: what the value is (``cpu_s``; ``server.queue_waiting``). Written by
:mod:`loadgen.engine.host` (host.csv) and :mod:`loadgen.analysis.telemetry` (telemetry.csv), read by their analyses
and the reports.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

HEADER = ("time", "source", "metric", "value")


def write_series(path: Path, rows: Iterable[tuple[float, str, str, float]]) -> Path:
    """Write ``rows`` (time in seconds since t0, source, metric, value) as a time-series file."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows((f"{t:.4f}", src, metric, repr(float(v))) for t, src, metric, v in rows)
    return path


def read_series(path: Path) -> pd.DataFrame | None:
    """A time-series file as a frame (time, source, metric, value), or None when it is absent, empty or unreadable."""
    try:
        f = pd.read_csv(path, dtype={"source": str, "metric": str})
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    return f if set(f.columns) >= set(HEADER) and len(f) else None
