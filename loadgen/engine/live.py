"""Live counters of a running engine, read by the one-line status display.

Cheap to keep up, so it holds a fixed-size ring of the most recent completions and a few integers
(the native engine adds its records in bulk, every ``LIVE_EVERY_S``); everything else is computed when the
display asks (a few times a second). The achieved rate comes from the completion counter, not from the ring
(a ring of 32,768 completions over a 5 s window would cap it at 6,553.6 req/s); the percentiles come from the
ring (the latest completions).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

RING = 1 << 15


class LiveStats:
    def __init__(self, total_duration: float):
        self.total_duration = total_duration
        self.phase = ""
        self.draining = False  # after the last phase: waiting out the grace for requests still in flight
        self.target_rate = 0.0  # open-loop phase: the arrival rate asked for (req/s)
        self.concurrency = 0  # closed-loop phase: its workers (0 in an open-loop phase)
        self.sent = 0
        self.completed = 0
        self.errors = 0
        self.in_flight = 0
        self._t = np.full(RING, -math.inf)
        self._lat = np.zeros(RING)
        self._ok = np.zeros(RING, dtype=bool)
        self._i = 0
        self._marks: deque[tuple[float, int]] = deque(maxlen=4096)  # (a completion time, completions by then)

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
        if not self._marks or done - self._marks[-1][0] >= 0.05:
            self._marks.append((done, self.completed))

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
        self._marks.append((float(done.max()), self.completed))

    def snapshot(self, last: int, limit: int) -> tuple[dict, int]:
        """Counters and up to ``limit`` completions newer than mark ``last``; returns (snapshot, new mark).

        What a child process of a multi-process run sends its parent (see ``merge_snapshot`` there)."""
        i = self._i
        new = min(i - last, limit, RING)
        idx = np.arange(i - new, i) & (RING - 1)
        snap = {"sent": self.sent, "completed": self.completed, "errors": self.errors, "in_flight": self.in_flight,
                "phase": self.phase, "draining": self.draining, "target_rate": self.target_rate,
                "concurrency": self.concurrency,
                "t": self._t[idx].copy(), "lat": self._lat[idx].copy(), "ok": self._ok[idx].copy()}
        return snap, i

    def window(self, now: float, span: float = 5.0) -> dict:
        """The last ``span`` seconds: the achieved rate (completions per second, from the counter), and p50 and
        p99 of the successful latencies among the latest completions."""
        sel = self._t > now - span
        lat = self._lat[sel & self._ok]
        out = {"qps": self._rate(now, span), "p50": math.nan, "p99": math.nan}
        if lat.size:
            out["p50"], out["p99"] = np.percentile(lat, [50, 99], method="inverted_cdf")
        return out

    def _rate(self, now: float, span: float) -> float:
        """Completions per second over the last ``span`` seconds: the counter now minus the counter at the window's
        start (the last mark before it; 0 at the run's start)."""
        start = now - span
        before = [c for t, c in self._marks if t <= start]
        if before:
            base = before[-1]
        elif now <= span:
            base = 0
        else:  # marks of the window's start are gone (a very long gap): the oldest mark in it
            inside = [c for t, c in self._marks if t > start]
            base = min(inside) if inside else self.completed
        return (self.completed - base) / min(span, max(now, 1e-9))


class GroupLive(LiveStats):
    """A multi-process run's live stats: the children's counters summed; the window from their sampled latest
    completions."""

    def __init__(self, total: float, processes: int):
        super().__init__(total)
        self._snaps: list[dict | None] = [None] * processes

    def update(self, k: int, snap: dict) -> None:
        self._snaps[k] = snap
        snaps = [s for s in self._snaps if s]
        for name in ("sent", "completed", "errors", "in_flight", "concurrency"):
            setattr(self, name, sum(s.get(name, 0) for s in snaps))
        self.phase, self.target_rate = snap["phase"], sum(s["target_rate"] for s in snaps)
        self.draining = all(s.get("draining") for s in snaps)
        n = len(snap["t"])
        i = (self._i + np.arange(n)) & (RING - 1)
        self._t[i], self._lat[i], self._ok[i] = snap["t"], snap["lat"], snap["ok"]
        self._i += n
        if n:
            self._marks.append((float(snap["t"].max()), self.completed))
