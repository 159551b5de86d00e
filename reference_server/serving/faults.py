"""Fault injection, for testing latbench's gates against a server that misbehaves on purpose.

Per-request faults are drawn independently from one seeded RNG: a 500 (``error_rate``), a delay of
``slow_s`` before processing (``slow_rate``), a stream closed mid-way (``cut_stream_rate``; streams only).
Stalls are a schedule, not a draw: from the server's start, every ``stall_every_s`` all processing (model
steps and cached replays) pauses for ``stall_s``.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from ..config import ServerConfig


@dataclass(frozen=True)
class FaultPlan:
    """The faults one request will suffer. ``cut_after`` counts content chunks sent before the cut."""

    error: bool = False
    slow_s: float = 0.0
    cut_after: int | None = None


def stall_remaining(elapsed_s: float, stall_s: float, every_s: float) -> float:
    """Seconds left in the stall window containing ``elapsed_s`` (since start), 0 outside any window.

    Windows are ``[k*every_s, k*every_s + stall_s)`` for k = 1, 2, ... (none before the first period).
    """
    if stall_s <= 0 or every_s <= 0 or elapsed_s < every_s:
        return 0.0
    into = elapsed_s % every_s
    return stall_s - into if into < stall_s else 0.0


class FaultInjector:
    """Draws per-request fault plans; thread-safe."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        c = self.config
        return bool(c.error_rate or c.slow_rate or c.cut_stream_rate)

    def plan(self, stream: bool, max_tokens: int) -> FaultPlan:
        """The faults of one request (three independent draws, always made in the same order)."""
        c = self.config
        if not self.active:
            return FaultPlan()
        with self._lock:
            error = self._rng.random() < c.error_rate
            slow = self._rng.random() < c.slow_rate
            cut = self._rng.random() < c.cut_stream_rate
            cut_after = self._rng.randrange(0, max(1, max_tokens)) if cut and stream else None
        return FaultPlan(error=error, slow_s=c.slow_s if slow else 0.0, cut_after=cut_after)

    def stall_remaining(self, elapsed_s: float) -> float:
        """Seconds of stall left at ``elapsed_s`` since the server started."""
        return stall_remaining(elapsed_s, self.config.stall_s, self.config.stall_every_s)
