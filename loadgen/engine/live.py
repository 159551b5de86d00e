"""Live counters of a running engine, read by the one-line status display.

Cheap to keep up, so it holds a fixed-size ring of the most recent completions and a few integers
(the native engine adds its records in bulk, every ``LIVE_EVERY_S``); everything else is computed when the
display asks (a few times a second).
"""

from __future__ import annotations

import math

import numpy as np

RING = 1 << 15


class LiveStats:
    def __init__(self, total_duration: float):
        self.total_duration = total_duration
        self.phase = ""
        self.target_rate = 0.0
        self.sent = 0
        self.completed = 0
        self.errors = 0
        self.in_flight = 0
        self._t = np.full(RING, -math.inf)
        self._lat = np.zeros(RING)
        self._ok = np.zeros(RING, dtype=bool)
        self._i = 0

    def add(self, done: float, latency: float, ok: bool) -> None:
        """One finished request: ``done`` in run seconds, ``latency`` in seconds."""
        i = self._i & (RING - 1)
        self._t[i] = done
        self._lat[i] = latency
        self._ok[i] = ok
        self._i += 1
        self.completed += 1
        if not ok:
            self.errors += 1

    def add_many(self, done: np.ndarray, latency: np.ndarray, ok: np.ndarray) -> None:
        """Finished requests in bulk (arrays as :meth:`add` takes one by one)."""
        n = len(done)
        if not n:
            return
        k = min(n, RING)
        idx = (self._i + n - k + np.arange(k)) & (RING - 1)
        self._t[idx], self._lat[idx], self._ok[idx] = done[-k:], latency[-k:], ok[-k:]
        self._i += n
        self.completed += n
        self.errors += n - int(np.count_nonzero(ok))

    def snapshot(self, last: int, limit: int) -> tuple[dict, int]:
        """Counters and up to ``limit`` completions newer than mark ``last``; returns (snapshot, new mark).

        What a child process of a multi-process run sends its parent (see ``merge_snapshot`` there)."""
        i = self._i
        new = min(i - last, limit, RING)
        idx = np.arange(i - new, i) & (RING - 1)
        snap = {"sent": self.sent, "completed": self.completed, "errors": self.errors, "in_flight": self.in_flight,
                "phase": self.phase, "target_rate": self.target_rate,
                "t": self._t[idx].copy(), "lat": self._lat[idx].copy(), "ok": self._ok[idx].copy()}
        return snap, i

    def window(self, now: float, span: float = 5.0) -> dict:
        """Completions in the last ``span`` seconds: rate, p50 and p99 of successful latencies."""
        sel = self._t > now - span
        n = int(sel.sum())
        lat = self._lat[sel & self._ok]
        eff = min(span, max(now, 1e-9))
        out = {"qps": n / eff, "p50": math.nan, "p99": math.nan}
        if lat.size:
            out["p50"], out["p99"] = np.percentile(lat, [50, 99], method="inverted_cdf")
        return out


class GroupLive(LiveStats):
    """A multi-process run's live stats: the children's counters summed; the window from their sampled latest
    completions."""

    def __init__(self, total: float, processes: int):
        super().__init__(total)
        self._snaps: list[dict | None] = [None] * processes
        self._done_at: list[tuple[float, int]] = []  # (latest completion time, completions then)

    def update(self, k: int, snap: dict) -> None:
        self._snaps[k] = snap
        snaps = [s for s in self._snaps if s]
        for name in ("sent", "completed", "errors", "in_flight"):
            setattr(self, name, sum(s[name] for s in snaps))
        self.phase, self.target_rate = snap["phase"], sum(s["target_rate"] for s in snaps)
        n = len(snap["t"])
        i = (self._i + np.arange(n)) & (RING - 1)
        self._t[i], self._lat[i], self._ok[i] = snap["t"], snap["lat"], snap["ok"]
        self._i += n
        self._done_at = self._done_at[-256:] + [(float(snap["t"].max()) if n else -math.inf, self.completed)]

    def window(self, now: float, span: float = 5.0) -> dict:
        out = super().window(now, span)
        hist = [c for t, c in self._done_at if t > now - span]
        eff = min(span, max(now, 1e-9))
        out["qps"] = (self.completed - min(hist)) / eff if hist else 0.0  # counts, not the sample
        return out
