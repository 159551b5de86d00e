"""The native engine: one asyncio loop, an absolute timetable, every request recorded.

Open loop: request i is due at ``t0 + scheduled_i``; at each wake-up every due request is launched,
whether or not earlier ones have returned. Nothing waits in a client pool: past ``max_in_flight`` a
request is recorded as ``dropped``, never delayed. Closed loop: N workers, each sending when its last
answer is complete. Latency is measured from ``scheduled`` (coordinated omission corrected).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from loadgen.failfast import FailFast
from loadgen.live import LiveStats
from loadgen.protocol import ApiProtocol
from loadgen.records import Outcome, RecordBuffer, RecordWriter
from loadgen.schedule import PhasePlan, arrivals

clock = time.perf_counter
FLUSH_EVERY_S = 1.0
FLUSH_ROWS = 10_000
_MAX_SLEEP = 0.05  # wake at least this often to notice a stop request
_SPIN = 0.0015  # the last stretch before a due time is spent yielding, not in a timer

def run_async(coro):
    """Run a coroutine on a fresh event loop: uvloop's when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    uvloop.install()  # pragma: no cover - Python 3.10
    return asyncio.run(coro)


def _uncancel(task) -> None:
    """Forget a cancellation that was handled (Python 3.11+ counts them; 3.10 does not)."""
    if hasattr(task, "uncancel"):
        task.uncancel()


@dataclass
class EngineSettings:
    plans: list[PhasePlan]
    timeout: float = 60.0
    max_in_flight: int = 10_000
    seed: int = 0
    burstiness: float = 1.0
    grace: float = 5.0
    worker: int = 0
    failfast: "FailFast | None" = None  # stop as soon as an objective can no longer be met


@dataclass
class EngineResult:
    t0: float  # perf_counter at the run's start
    wall_start: float  # time.time() at t0, for humans
    duration: float  # seconds from t0 until the last record
    requests: int
    interrupted: bool
    cpu_seconds: float  # process CPU time used during the run
    notes: list[str] = field(default_factory=list)
    failed_fast: str | None = None  # the objective that stopped the run early (--fail-fast)


class NativeEngine:
    """Runs the phases of one target. ``transport`` is started and closed by the caller."""

    def __init__(self, settings: EngineSettings, protocol: ApiProtocol, prompts, transport, writer: RecordWriter):
        self.s = settings
        self.protocol = protocol
        self.prompts = prompts
        self.transport = transport
        self.writer = writer
        self.buffer = RecordBuffer()
        total = max((p.end for p in settings.plans), default=0.0)
        self.live = LiveStats(total)
        self.t0 = 0.0
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._flush_now = asyncio.Event()
        self.interrupted = False
        self.write_error: OSError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Requests in flight, oldest first: seq -> (deadline, task). One sweeper enforces every timeout;
        # a timer per request (asyncio.timeout) costs ~5 us of a ~25 us request.
        self._deadlines: OrderedDict[int, tuple[float, asyncio.Task]] = OrderedDict()
        self._timed_out: set[int] = set()

    # -- control -------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop sending; in-flight requests get the grace period to finish."""
        self._stopping = True
        self.interrupted = True

    def abort(self) -> None:
        """Stop at once: in-flight requests are recorded as ``cancelled``."""
        self.request_stop()
        for t in list(self._tasks):
            t.cancel()

    def now(self) -> float:
        return clock() - self.t0

    # -- recording -----------------------------------------------------------------------------
    def _record(self, seq: int, plan: PhasePlan, sched: float, out: Outcome) -> None:
        self.buffer.append(seq, plan.index, plan.recorded, sched, out, self.t0, self.s.worker)
        done = out.done - self.t0
        ok = not out.error
        self.live.add(done, done - sched, ok)
        ff = self.s.failfast
        if ff is not None and not self._stopping and ff.observe(
                plan.index, plan.recorded, ok, done - sched, out.first_token - self.t0 - sched, out.done - out.sent):
            self._stopping = True  # not an interruption: the verdict is already known
        if len(self.buffer) >= FLUSH_ROWS:
            self._flush_now.set()

    async def _flush_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._flush_now.wait(), FLUSH_EVERY_S)
            except asyncio.TimeoutError:
                pass
            self._flush_now.clear()
            batch = self.buffer.drain()
            if batch is not None:
                try:
                    await asyncio.to_thread(self.writer.write, batch)
                except OSError as exc:  # RunDirWriteError (disk full): stop sending what can no longer be recorded
                    self.write_error = exc
                    self.request_stop()
                    return

    async def _timeout_loop(self) -> None:
        """Cancel every request past its deadline. Deadlines are in send order (one timeout for all),
        so only the oldest requests are looked at; a timeout fires at most ``tick`` late."""
        tick = min(0.01, self.s.timeout / 20)
        pending = self._deadlines
        while True:
            await asyncio.sleep(tick)
            now = clock()
            while pending:
                seq, (deadline, task) = next(iter(pending.items()))
                if deadline > now:
                    break
                del pending[seq]
                self._timed_out.add(seq)
                task.cancel()

    # -- requests ------------------------------------------------------------------------------
    async def _one(self, seq: int, plan: PhasePlan, sched: float) -> None:
        out = Outcome()
        pending = self._deadlines
        try:
            req = self.protocol.build(seq, self.prompts.get(seq))
            handler = self.protocol.handler()
            self.live.sent += 1
            pending[seq] = (clock() + self.s.timeout, asyncio.current_task())
            await self.transport.send(req, handler, out)
        except asyncio.CancelledError:
            if seq in self._timed_out:
                self._timed_out.discard(seq)
                out.error, out.done = "timeout", clock()
                _uncancel(asyncio.current_task())  # a closed-loop worker goes on with its next request
            else:
                out.error, out.done = "cancelled", clock()
        except Exception as exc:  # a bug in a protocol or transport must not lose the record
            out.error, out.done = "other", clock()
            out.error_detail = f"{type(exc).__name__}: {exc}"
        finally:
            pending.pop(seq, None)
            self.live.in_flight -= 1
            if math.isnan(out.done):
                out.done = clock()
            self._record(seq, plan, sched, out)

    def _launch(self, plan: PhasePlan, sched: float) -> None:
        seq = self._seq
        self._seq += 1
        if self.live.in_flight >= self.s.max_in_flight:
            out = Outcome(error="dropped", done=clock())
            self._record(seq, plan, sched, out)
            return
        self.live.in_flight += 1
        task = self._loop.create_task(self._one(seq, plan, sched))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sleep_until(self, t: float) -> bool:
        """Sleep until run time ``t``; False when a stop was requested meanwhile.

        Event-loop timers fire up to a millisecond late (epoll's resolution), which would show up as
        send lag; so the timer is set ``_SPIN`` early and the rest is spent yielding to the loop.
        """
        while not self._stopping:
            delay = t - self.now()
            if delay <= 0:
                return True
            if delay > _SPIN:
                await asyncio.sleep(min(delay - _SPIN, _MAX_SLEEP))
            else:
                await asyncio.sleep(0)
        return False

    async def _open_phase(self, plan: PhasePlan) -> None:
        for times in arrivals(plan, self.s.seed, self.s.burstiness):
            n, i = len(times), 0
            while i < n:
                if not await self._sleep_until(times[i]):
                    return
                now = self.now()
                j = i + 1
                while j < n and times[j] <= now:
                    j += 1
                for k in range(i, j):
                    self._launch(plan, float(times[k]))
                i = j
        await self._sleep_until(plan.end)

    async def _closed_phase(self, plan: PhasePlan) -> None:
        if not await self._sleep_until(plan.start):
            return
        budget = [plan.max_requests if plan.max_requests else math.inf]

        async def worker() -> None:
            while not self._stopping and self.now() < plan.end and budget[0] > 0:
                budget[0] -= 1
                seq = self._seq
                self._seq += 1
                self.live.in_flight += 1
                await self._one(seq, plan, self.now())

        workers = [asyncio.ensure_future(worker()) for _ in range(plan.concurrency)]
        for w in workers:
            self._tasks.add(w)
            w.add_done_callback(self._tasks.discard)
        await self._sleep_until(plan.end)  # workers still busy finish their last request on their own

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> EngineResult:
        self._loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        cpu0 = time.process_time()
        wall0 = time.time()
        self.t0 = clock()
        flusher = asyncio.ensure_future(self._flush_loop())
        sweeper = asyncio.ensure_future(self._timeout_loop())
        notes: list[str] = []
        try:
            for plan in self.s.plans:
                if self._stopping:
                    break
                self.live.phase = plan.name
                if plan.closed:
                    await self._closed_phase(plan)
                else:
                    self.live.target_rate = plan.rate_start
                    await self._open_phase(plan)
            self._stopping = True  # closed-loop workers: no new requests after the last phase
            if self._tasks:
                _, pending = await asyncio.wait(set(self._tasks), timeout=self.s.grace)
                if pending:
                    notes.append(f"{len(pending)} requests still in flight after the {self.s.grace:g} s grace were cancelled")
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
        except asyncio.CancelledError:
            self.interrupted = True
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            flusher.cancel()
            sweeper.cancel()
            await asyncio.gather(flusher, sweeper, return_exceptions=True)
            end = self.now()
            try:
                self.writer.write(self.buffer.drain())
            except OSError as exc:
                self.write_error = self.write_error or exc
            self.writer.close()
        if self.write_error is not None:
            raise self.write_error
        ff = self.s.failfast.breached if self.s.failfast else None
        if ff:
            notes.append(f"stopped early (--fail-fast): {ff} can no longer be met")
        return EngineResult(self.t0, wall0, end, self._seq, self.interrupted, time.process_time() - cpu0, notes, ff)
