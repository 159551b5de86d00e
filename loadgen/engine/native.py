"""The native engine: one asyncio loop, an absolute timetable, every request recorded.

Open loop: request i is due at ``t0 + scheduled_i``; at each wake-up every due request is launched,
whether or not earlier ones have returned. Nothing waits in a client pool: past ``max_in_flight`` a
request is recorded as ``dropped``, never delayed. Closed loop: N workers, each sending when its last
answer is complete. Latency is measured from ``scheduled`` (coordinated omission corrected).
"""

from __future__ import annotations

import asyncio
import gc
import math
import time

from loadgen.engine.base import EngineResult, EngineSettings, call_on_loop
from loadgen.engine.inflight import ClosedPhase, InFlight
from loadgen.engine.live import LiveStats
from loadgen.engine.logs import log_failure, logging_failures
from loadgen.protocols.base import ApiProtocol
from loadgen.protocols.conversation import Sessions
from loadgen.protocols.reqcache import RequestCache
from loadgen.records.schema import ABORTED, ABORTED_CODE, Outcome, RecordBuffer, RecordSink
from loadgen.schedule.arrivals import PhasePlan, arrivals
from loadgen.schedule.pacing import FLUSH_EVERY_S, sleep_for

clock = time.perf_counter
FLUSH_ROWS = 10_000
GC_GEN0 = 100_000  # the first generation's collection threshold during a run (Python's default: 700)


class NativeEngine(InFlight):
    """Runs the phases of one target. ``transport`` is started and closed by the caller.

    Two request paths, the same records (:mod:`loadgen.engine.inflight`): a transport with ``submit`` (the lean one)
    is driven by callbacks, no asyncio Task per request; any other transport's ``send`` runs in a Task per
    request.
    """

    def __init__(self, settings: EngineSettings, protocol: ApiProtocol, prompts, transport, writer: RecordSink):
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
        self.count = 0  # requests recorded or to be: started, or dropped at the in-flight cap
        self._stopping = False
        self._flush_now = asyncio.Event()
        self._flush_done = False
        self.interrupted = False
        self.spin_seconds = 0.0  # CPU time spent yielding just before due sends (see _sleep_until)
        self.write_error: OSError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # workload.conversations: the sessions build each turn (:mod:`loadgen.protocols.conversation`)
        self.sessions: Sessions | None = prompts if isinstance(prompts, Sessions) else None
        self._requests = RequestCache(protocol, prompts) if self.sessions is None else None
        self._run_end = total
        self._live_mark = 0  # buffer rows already counted in self.live
        self._log_failures = logging_failures()  # latbench -v: one log line per failed request
        self._worker, self._failfast = settings.worker, settings.failfast  # read per record
        self._init_in_flight(transport)
        self.error_example: dict | None = None

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
        self._cancel_calls()

    def now(self) -> float:
        return clock() - self.t0

    def call_soon(self, fn) -> None:
        """Run ``fn`` on this engine's loop: from a signal handler or another thread, safely."""
        call_on_loop(self._loop, fn)

    def _start_time(self) -> float:
        """The run's ``t0`` (a subclass may share one between processes)."""
        return clock()

    # -- recording -----------------------------------------------------------------------------
    def _record(self, seq: int, plan: PhasePlan, sched: float, out: Outcome) -> None:
        buffer = self.buffer
        buffer.append(seq, plan.index, plan.recorded, sched, out, self.t0, self._worker)
        if out.error:
            if self.error_example is None and out.error != ABORTED:  # what the verdict quotes if every one fails
                self.error_example = {"error": out.error, "status": out.status, "detail": out.error_detail[:200]}
            if self._log_failures:
                log_failure(self.s.label, plan.name, seq, out)
        ff = self._failfast
        if ff is not None and not self._stopping and out.error != ABORTED:  # aborted on purpose: no verdict
            t0 = self.t0
            if ff.observe(plan.index, plan.recorded, not out.error, out.done - t0 - sched,
                          out.first_token - t0 - sched, out.done - out.sent):
                self._stopping = True  # not an interruption: the verdict is already known
        if buffer.n >= FLUSH_ROWS:
            self._flush_now.set()

    def _live_tick(self) -> None:
        """Count the records buffered since the last tick in the live stats (in one go, not per request)."""
        buffer, mark = self.buffer, self._live_mark
        n = len(buffer)
        if n > mark:
            done = buffer.column("done", mark, n)
            err = buffer.column("error", mark, n)
            keep = err != ABORTED_CODE  # aborted on purpose: neither a success nor an error
            self.live.add_many(done[keep], (done - buffer.column("scheduled", mark, n))[keep], err[keep] == 0)
            self._live_mark = n

    def _drain(self):
        self._live_tick()
        self._live_mark = 0
        return self.buffer.drain()

    async def _flush_loop(self) -> None:
        """Write the buffered records every ``FLUSH_EVERY_S`` or ``FLUSH_ROWS``, in a thread, until
        ``_flush_done`` (then once more). Never cancelled: a write cut from its await would still run in its
        thread, perhaps after the writer was closed, and its batch would be lost."""
        while not self._flush_done:
            try:
                await asyncio.wait_for(self._flush_now.wait(), FLUSH_EVERY_S)
            except asyncio.TimeoutError:
                pass
            self._flush_now.clear()
            batch = self._drain()
            if batch is not None:
                try:
                    await asyncio.to_thread(self.writer.write, batch)
                except OSError as exc:  # RunDirWriteError (disk full): stop sending what can no longer be recorded
                    self.write_error = exc
                    self.request_stop()
                    return

    # -- phases --------------------------------------------------------------------------------
    def _launch(self, plan: PhasePlan, seq: int, sched: float, session=None) -> None:
        """Open loop: send request ``seq`` now (it was due at ``sched``), or record it ``dropped`` at the cap.
        With conversations an arrival starts a session (``session`` given: a later turn of one)."""
        self.count += 1
        live = self.live
        if session is None and self.sessions is not None:
            session = self.sessions.start(seq)
        if live.in_flight >= self.s.max_in_flight:
            out = Outcome(error="dropped", done=clock())
            if session is not None:
                out.session, out.turn = session.id, session.turn
            self._record(seq, plan, sched, out)
            return
        live.in_flight += 1
        if self._submit is not None:
            self._start(seq, plan, sched, None, session)
            return
        task = self._loop.create_task(self._one(seq, plan, sched, session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sleep_until(self, t: float) -> bool:
        """Sleep until run time ``t``; False when a stop was requested meanwhile.

        Event-loop timers fire up to a millisecond early or late (uvloop counts whole milliseconds), which
        would show up as send lag; so the timer is set early and the rest is spent yielding (:mod:`pacing`).
        """
        t0 = self.t0
        spin_from = None
        while not self._stopping:
            wait = sleep_for(t - (clock() - t0))
            if wait is None:
                # spinning burns CPU without work: not counted as load below. Its CPU time, not its wall time:
                # on a busy host the spin is preempted, and wall time would exceed the CPU it used (a
                # generator that used 1.2 CPU-s was counted as 0 when two hogs shared its cores)
                if spin_from is not None:
                    self.spin_seconds += time.thread_time() - spin_from
                return True
            if wait == 0.0 and spin_from is None:
                spin_from = time.thread_time()
            await asyncio.sleep(wait)
        return False

    def _schedule(self, plan: PhasePlan):
        """This engine's arrivals of an open-loop phase: ``(times, first seq, seq stride)`` per chunk."""
        for times in arrivals(plan, self.s.seed, self.s.burstiness):
            seq = self._seq
            self._seq += len(times)
            yield times.tolist(), seq, 1

    async def _open_phase(self, plan: PhasePlan) -> None:
        launch, t0 = self._launch, self.t0
        for times, seq0, stride in self._schedule(plan):
            n, i = len(times), 0
            while i < n:
                if not await self._sleep_until(times[i]):
                    return
                now = clock() - t0
                j = i + 1
                while j < n and times[j] <= now:
                    j += 1
                for k in range(i, j):  # every request due by now, in one go
                    launch(plan, seq0 + k * stride, times[k])
                i = j
        await self._phase_end(plan, spent=lambda: True)  # every arrival of the phase has been launched

    def _closed_share(self, plan: PhasePlan) -> tuple[int, float]:
        """Workers and request budget of a closed-loop phase for this engine."""
        return plan.concurrency, (plan.max_requests if plan.max_requests else math.inf)

    async def _closed_phase(self, plan: PhasePlan) -> None:
        if not await self._sleep_until(plan.start):
            return
        workers, budget = self._closed_share(plan)
        state = ClosedPhase(plan, budget)
        if self._submit is not None:
            for user in range(workers):
                self._closed_next(state, user)
        else:
            async def worker(user: int) -> None:
                while not self._stopping and self.now() < plan.end and state.budget > 0:
                    state.budget -= 1
                    seq = self._closed_seq(state)
                    state.n += 1
                    self.count += 1
                    self.live.in_flight += 1
                    if self.sessions is None:
                        await self._one(seq, plan, self.now(), user=user)
                    else:
                        await self._closed_session(state, self.sessions.start(seq), user)

            for user in range(workers):
                w = asyncio.ensure_future(worker(user))
                self._tasks.add(w)
                w.add_done_callback(self._tasks.discard)
        await self._phase_end(plan, spent=lambda: state.budget <= 0)

    async def _phase_end(self, plan: PhasePlan, spent) -> None:
        """Wait out the phase (requests still in flight finish on their own), except that the run's last phase
        ends as soon as its ``max_requests`` are all sent (``spent()``) and answered: nothing is left to measure,
        and the run's duration (the window of every rate) is then the time it really took. A phase followed by
        another keeps its length, so the later phases start at their planned times; so does a phase of
        conversations (a session between turns is not in flight)."""
        if plan.max_requests is None or plan is not self.s.plans[-1] or self.sessions is not None:
            await self._sleep_until(plan.end)
            return
        while not self._stopping and self.now() < plan.end:
            if spent() and self.live.in_flight <= 0:
                return
            await asyncio.sleep(min(0.01, max(0.0, plan.end - self.now())))

    async def _closed_session(self, state: ClosedPhase, session, user: int) -> None:
        """The Task path's closed-loop worker holds one session: turn after turn, each due at the last one's end
        plus the think time (its first turn already counted in flight by the caller)."""
        plan, sched = state.plan, self.now()
        while True:
            out = await self._one(session.seq, plan, sched, session, follow=False, user=user)
            think = self.sessions.answered(session, out)
            if think is None:
                return
            sched = out.done - self.t0 + think
            if sched >= plan.end or state.budget <= 0 or self._stopping:
                self.sessions.cut += 1
                return
            if not await self._sleep_until(sched):
                self.sessions.cut += 1
                return
            state.budget -= 1
            state.n += 1
            self.count += 1
            self.live.in_flight += 1

    # -- the run -------------------------------------------------------------------------------
    async def _finish_in_flight(self, notes: list[str]) -> None:
        """After the last phase: wait up to the grace period for requests in flight, then cancel the rest."""
        self._stopping = True  # closed loop: no new requests after the last phase
        loop = self._loop
        deadline = loop.time() + self.s.grace
        left = 0
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.s.grace)
            if pending:
                left += len(pending)
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        if self.live.in_flight > 0 and self._submit is not None:
            self._idle = loop.create_future()
            try:
                await asyncio.wait_for(self._idle, max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                pass
            left += self._cancel_calls()
        if left:
            notes.append(f"{left} requests still in flight after the {self.s.grace:g} s grace were cancelled")

    async def run(self) -> EngineResult:
        self._loop = asyncio.get_running_loop()
        await asyncio.sleep(0)
        # A full collection walks every object of the process (pyarrow, pandas: ~45 ms here) and would show
        # as a stall in send lag and latency; what exists before the run is set aside for the run's length
        # (gc.freeze is a list splice, not a collection).
        gc.freeze()
        # Collections during the run are the other stall: at thousands of streams in flight every full one walks
        # their objects (a 90 ms send-lag spike at 800 streams/s here). The first generation collects after
        # GC_GEN0 net new objects instead of 700 (garbage freed by reference counting does not count toward it),
        # so cycles are still collected, rarely: send lag p99 at 800 streams/s 18-50 ms -> 5-15 ms, measured.
        gc_threshold = gc.get_threshold()
        gc.set_threshold(max(GC_GEN0, gc_threshold[0]), *gc_threshold[1:])
        cpu0 = time.process_time()
        wall0 = time.time()
        self.t0 = self._start_time()
        flusher = asyncio.ensure_future(self._flush_loop())
        sweeper = asyncio.ensure_future(self._timeout_loop())
        notes: list[str] = []
        try:
            for plan in self.s.plans:
                if self._stopping:
                    break
                self.live.phase = plan.name
                if plan.closed:  # the display shows the achieved rate and the workers, no rate asked for
                    self.live.target_rate, self.live.concurrency = 0.0, self._closed_share(plan)[0]
                    await self._closed_phase(plan)
                else:
                    self.live.target_rate, self.live.concurrency = plan.rate_start, 0
                    await self._open_phase(plan)
            self.live.draining = True
            await self._finish_in_flight(notes)
        except asyncio.CancelledError:
            self.interrupted = True
            for t in list(self._tasks):
                t.cancel()
            self._cancel_calls()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        finally:
            end = self.now()
            self._flush_done = True
            self._flush_now.set()
            sweeper.cancel()
            await asyncio.gather(flusher, sweeper, return_exceptions=True)
            try:
                self.writer.write(self._drain())
            except OSError as exc:
                self.write_error = self.write_error or exc
            # the CPU the run took: closing the files (the parquet file is written then) is not load generation
            cpu1 = time.process_time()
            self.writer.close()
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
        if self.write_error is not None:
            raise self.write_error
        ff = self.s.failfast.breached if self.s.failfast else None
        if ff:
            notes.append(f"stopped early (--fail-fast): {ff} can no longer be met")
        if self.sessions is not None and self.sessions.cut:
            notes.append(f"{self.sessions.cut} conversation turns were not sent: due after the last phase, after a "
                         "stop, or past max_requests")
        # CPU time minus the time spent spinning before due sends: what the generator needed, so that a
        # high rate of precise sends is not mistaken for a saturated generator (send lag tells that).
        cpu = max(0.0, cpu1 - cpu0 - self.spin_seconds)
        return EngineResult(self.t0, wall0, end, self.count, self.interrupted, cpu, notes, ff,
                            error_example=self.error_example)
