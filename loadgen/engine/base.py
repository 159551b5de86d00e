"""The engine contract: what every engine is given, what it returns, and how a running one is steered.

Three engines implement :class:`Engine` (one asyncio process, several processes, Locust's runners).
Each gets a :class:`MeasuredTarget` (the one target being measured, with everything resolved) and
returns one :class:`EngineResult`; while it runs, the display and the signal handler see it as a
:class:`RunControl`.

One idea at several stages, each stage's contract, so one file name: :mod:`loadgen.protocols.base` (what a protocol
gives a transport), :mod:`loadgen.transports.base` (what a transport gives an engine).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from loadgen.engine.failfast import FailFast
from loadgen.engine.live import LiveStats
from loadgen.records.workers import LostWorker
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.model import Cancel, Target
from loadgen.schedule.arrivals import PhasePlan

try:  # a faster event loop, when installed (not on Windows)
    import uvloop
except ImportError:  # pragma: no cover - platform without uvloop
    uvloop = None


def run_async(coro):
    """Run a coroutine on a fresh event loop: uvloop's when it is installed."""
    if uvloop is None:  # pragma: no cover
        return asyncio.run(coro)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    uvloop.install()  # pragma: no cover - Python 3.10
    return asyncio.run(coro)


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], None]) -> None:
    """``fn()`` on ``loop`` when it is running (thread- and signal-safe), else at once."""
    if loop is not None and loop.is_running():
        loop.call_soon_threadsafe(fn)
    else:
        fn()


@dataclass(frozen=True)
class MeasuredTarget:
    """One target being measured: what every engine needs, resolved once by the run layer.

    ``target`` already carries the resolved ``url``; ``index`` is its position in the scenario (the Locust
    master re-reads the scenario file by it); ``tdir`` is its folder in the RunDir.
    """

    loaded: LoadedScenario
    target: Target
    url: str
    model: str
    tdir: Path
    index: int = 0

    @property
    def name(self) -> str:
        return self.target.name


@dataclass
class EngineSettings:
    plans: list[PhasePlan]
    timeout: float = 60.0
    max_in_flight: int = 10_000
    seed: int = 0
    burstiness: float = 1.0
    grace: float = 5.0
    worker: int = 0
    failfast: FailFast | None = None  # stop as soon as an objective can no longer be met
    cancel: Cancel | None = None  # workload.cancel: requests the client aborts on purpose
    label: str = ""  # the target's name, for the log of failed requests


@dataclass
class EngineResult:
    t0: float  # perf_counter at the run's start
    wall_start: float  # time.time() at t0, for humans
    duration: float  # seconds from t0 until the last record
    requests: int
    interrupted: bool
    cpu_seconds: float  # CPU time the generator used during the run (all its processes)
    notes: list[str] = field(default_factory=list)
    failed_fast: str | None = None  # the objective that stopped the run early (--fail-fast)
    processes: int = 1  # generator processes that sent the load
    error_example: dict | None = None  # the first failed request: error class, status, what it said (redact it)
    lost_workers: list[LostWorker] = field(default_factory=list)  # workers that died before finishing their share


class RunControl(Protocol):
    """A running engine as the live display and the signal handler see it."""

    live: LiveStats
    t0: float

    def now(self) -> float:
        """Seconds since the run's start."""

    def request_stop(self) -> None:
        """Stop sending; requests in flight get the grace period."""

    def abort(self) -> None:
        """Stop at once; requests in flight are recorded as ``cancelled``."""

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the engine's event loop (safe from a signal handler or another thread)."""


OnEngine = Callable[[RunControl], None]


class Engine(Protocol):
    """Sends one target's load and writes its records to ``mt.tdir``.

    ``fail_fast``: None, or the slack of the early-stop rule (stop once breaches exceed that many times
    what an objective allows). ``on_engine`` is called with the :class:`RunControl` once sending starts.
    """

    name: str

    def run(self, mt: MeasuredTarget, on_engine: OnEngine | None = None,
            fail_fast: float | None = None) -> EngineResult:
        """Run every phase of ``mt``'s scenario against it; the records are in ``mt.tdir``."""
