"""Which engine sends a target's load, as the ``run`` flags choose it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from loadgen.engine.base import Engine
from loadgen.engine.locust import LocustEngine
from loadgen.engine.locust.launch import worker_secret
from loadgen.engine.multiproc import MultiProcess
from loadgen.engine.single import SingleProcess
from loadgen.scenario.model import Target
from loadgen.scenario.urls import on_loopback


@dataclass
class EngineOptions:
    """The native asyncio engine (one or several processes), or Locust's master/worker runners."""

    engine: str = "native"  # native | locust
    workers: int = 1  # locust: local worker processes
    expect_workers: int | None = None  # locust: workers joining from other hosts
    master_bind: str = "127.0.0.1"
    on_progress: Callable[[dict], None] | None = None  # locust: about once a second
    processes: int = 1  # native: generator processes, each with its own event loop (0: what the machine can spare)
    #: locust: what the workers prove they know (the user's, or a fresh one); resolved here, before anything
    #: starts, so a run that expects remote workers without one is refused at once (UsageError)
    secret: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.engine == "locust" and self.secret is None:
            self.secret = worker_secret(self.expect_workers)

    def processes_for(self, target: Target) -> int:
        """0 means: one process when the target shares this machine (it needs the other cores), else all
        cores but one, at most 8."""
        if self.processes:
            return self.processes
        if target.reference is not None or target.command is not None or on_loopback(target.url or ""):
            return 1
        return max(1, min(8, (os.cpu_count() or 2) - 1))

    def engine_for(self, target: Target) -> Engine:
        if self.engine == "locust":
            return LocustEngine(self.workers, self.expect_workers, self.master_bind, self.on_progress, self.secret)
        procs = self.processes_for(target)
        return MultiProcess(procs) if procs > 1 else SingleProcess()
