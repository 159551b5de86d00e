"""The multi-process native engine: one seeded schedule split between P processes, records merged exactly.

Process k of P sends arrivals k, k+P, k+2P, ... of every open-loop phase (the same seeded schedule
the single-process engine follows) and runs its share of every closed-loop phase's workers and
``max_requests``. Each process has its own event loop, transport and :class:`RecordWriter` (a part
file); all of them measure from one shared ``t0``, an absolute ``perf_counter`` value chosen by the
parent once every child is ready (CLOCK_MONOTONIC is one clock for all processes of a Linux host).

The parts are merged into one ``requests.parquet`` sorted by (phase, key) and numbered 0..N-1, so
every ``seq`` appears exactly once. For open-loop phases the key is the arrival's index in the
schedule, so a complete open-loop run has the very ``seq`` values (and prompts) of a single-process
run; closed-loop requests are numbered by (phase, request k of process p -> k*P + p). ``max_in_flight``
is split between the processes, as are closed-loop concurrency and budgets.

Control: children ignore SIGINT; the parent's handler (``run.signals.install_signal_handlers`` given the
:class:`ProcessGroup` through ``on_engine``) tells every child "stop" or "abort" over its pipe, and
a child's fail-fast verdict is relayed to the others.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.engine.base import EngineResult, EngineSettings, MeasuredTarget, OnEngine, call_on_loop, run_async
from loadgen.engine.live import GroupLive
from loadgen.engine.logs import configure_logging
from loadgen.engine.native import NativeEngine
from loadgen.engine.single import TransportFactory, build_sender
from loadgen.records.rundir import REQUESTS
from loadgen.records.schema import (
    PARQUET_OPTIONS,
    RecordWriter,
    merge_tables,
    part_path,
    partial_path,
    read_records,
    records_exist,
)
from loadgen.redact import RedactingStream
from loadgen.schedule.arrivals import PhasePlan, plan_phases
from loadgen.schedule.sharding import open_counts, seq_bases, shard_arrivals, share
from loadgen.transports.factory import make_transport

__all__ = ["MultiProcess", "ProcessGroup", "ShardEngine", "merge_parts", "run_processes"]

clock = time.perf_counter
START_MARGIN = 0.05  # seconds between "all ready" and the shared t0: time to deliver t0 to every child
LIVE_EVERY = 0.5  # seconds between a child's live snapshots
LIVE_SAMPLE = 1024  # latest completions per snapshot, for the display's p50/p99


class ShardEngine(NativeEngine):
    """A :class:`NativeEngine` that sends only share ``shard`` of ``shards``, timed from a shared ``t0``."""

    def __init__(self, settings: EngineSettings, protocol, prompts, transport, writer: RecordWriter,
                 shard: int, shards: int, t0: float):
        super().__init__(settings, protocol, prompts, transport, writer)
        self.t0 = self._shared_t0 = t0
        self.shard, self.shards = shard, shards
        self._offsets = seq_bases(open_counts(settings.plans, settings.seed, settings.burstiness))

    def _start_time(self) -> float:
        return self._shared_t0

    def _schedule(self, plan: PhasePlan):
        """Arrivals k, k+P, k+2P, ... of the phase, numbered by their index in the whole schedule."""
        s = self.s
        for times, first, stride in shard_arrivals(plan, self.shard, self.shards, s.seed, s.burstiness,
                                                   self._offsets[plan.index]):
            yield times.tolist(), first, stride

    def _closed_share(self, plan: PhasePlan) -> tuple[int, float]:
        k, p = self.shard, self.shards
        return share(plan.concurrency, k, p), (share(plan.max_requests, k, p) if plan.max_requests else math.inf)

    def _closed_seq(self, state) -> int:
        """Request n of this process in the phase is number ``offset + n * P + k``."""
        return self._offsets[state.plan.index] + state.n * self.shards + self.shard

    def stop_sending(self) -> None:
        """Send no more, without marking the run interrupted (another process's fail-fast verdict)."""
        self._stopping = True


# --- the child ---------------------------------------------------------------------------------------


def _on_message(conn, handler) -> None:
    """Call ``handler(message)`` on the running loop for each message on ``conn`` (EOF: ``handler(None)``).

    A daemon thread does the blocking reads: the loop's own ``add_reader`` would make the pipe
    non-blocking (libuv does), and a large message read half-arrived then fails.
    """
    loop = asyncio.get_running_loop()

    def pump() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = None
            try:
                loop.call_soon_threadsafe(handler, msg)
            except RuntimeError:  # the loop has closed: nobody is listening any more
                return
            if msg is None:
                return

    threading.Thread(target=pump, name="latbench-pipe", daemon=True).start()


async def _child_main(k: int, p: int, mt: MeasuredTarget, part: str, conn, factory: TransportFactory,
                      fail_fast: float | None) -> None:
    settings, protocol, prompts, transport = build_sender(mt, fail_fast, k, p, factory)
    failfast = settings.failfast  # this process's breaches alone exceed what the whole run may have: sound, if late
    await transport.start()
    pa.array(np.zeros(1))  # pyarrow imports pandas at its first conversion (0.2 s): before t0, not at the first flush
    loop = asyncio.get_running_loop()
    got_t0: asyncio.Future = loop.create_future()
    engine: ShardEngine | None = None

    def command(msg) -> None:
        if not got_t0.done():
            got_t0.set_result(msg)
        elif msg == "stop" or msg is None:
            engine.request_stop()
        elif msg == "abort":
            engine.abort()
        elif msg == "failfast":
            engine.stop_sending()

    try:
        _on_message(conn, command)
        conn.send(("ready", None))
        t0 = await got_t0
        if t0 is None:
            return
        engine = ShardEngine(settings, protocol, prompts, transport, RecordWriter(part), k, p, t0)
        loop.add_signal_handler(signal.SIGTERM, engine.request_stop)

        async def report() -> None:
            last, told = 0, False
            while True:
                await asyncio.sleep(LIVE_EVERY)
                snap, last = engine.live.snapshot(last, LIVE_SAMPLE)
                conn.send(("live", snap))
                if failfast is not None and failfast.breached and not told:
                    told = True
                    conn.send(("breached", failfast.breached))

        reporter = asyncio.ensure_future(report())
        try:
            result = await engine.run()
        finally:
            reporter.cancel()
    finally:
        await transport.close()
    conn.send(("done", dataclasses.asdict(result)))


def _child(k, p, mt, part, conn, factory, fail_fast) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides, and tells every process
    for name in ("stdout", "stderr"):  # what this process prints (a traceback) is redacted as the parent's output is
        setattr(sys, name, RedactingStream(getattr(sys, name), mt.loaded.redactor))
    configure_logging()  # as the parent logs (-v: failed requests), through the wrapped stderr
    try:
        run_async(_child_main(k, p, mt, part, conn, factory, fail_fast))
    except BaseException as exc:
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
        raise


# --- the parent --------------------------------------------------------------------------------------


class ProcessGroup:
    """What ``on_engine`` receives for a multi-process run: the engine's control surface, for P processes."""

    def __init__(self, pipes: list, t0: float, total: float):
        self.pipes, self.t0 = pipes, t0
        self.live = GroupLive(total, len(pipes))
        self.interrupted = False
        self.failed_fast: str | None = None
        self._loop = asyncio.get_running_loop()

    def now(self) -> float:
        return clock() - self.t0

    def call_soon(self, fn) -> None:
        """Run ``fn`` on this engine's loop: from a signal handler or another thread, safely."""
        call_on_loop(self._loop, fn)

    def _tell(self, msg: str, but: int | None = None) -> None:
        for k, c in enumerate(self.pipes):
            if k != but:
                try:
                    c.send(msg)
                except OSError:
                    pass  # that process has already ended

    def request_stop(self) -> None:
        """Every process stops sending; in-flight requests get the grace period."""
        self.interrupted = True
        self._tell("stop")

    def abort(self) -> None:
        """Every process stops at once; in-flight requests are recorded as ``cancelled``."""
        self.interrupted = True
        self._tell("abort")

    def collect(self, k: int) -> asyncio.Future:
        """A future for process k's result (a dict), or why there is none (a str); live snapshots on the way."""
        fut = self._loop.create_future()
        conn = self.pipes[k]

        def handle(msg) -> None:
            kind, payload = msg if msg is not None else ("error", "the process exited")
            if kind == "live":
                self.live.update(k, payload)
            elif kind == "breached":
                if self.failed_fast is None:
                    self.failed_fast = payload
                    self._tell("failfast", but=k)
            elif not fut.done():
                fut.set_result(payload if kind == "done" else str(payload))

        _on_message(conn, handle)
        return fut


def merge_parts(parts: list[Path], dest: Path) -> int:
    """Merge part files into ``dest`` sorted by (phase, key), ``seq`` renumbered 0..N-1 (:func:`merge_tables`);
    returns N. ``dest`` appears whole (written aside, then renamed) before any part is removed, so a kill at any
    moment leaves either the parts or the merged file for :func:`read_records`."""
    table = merge_tables([read_records(p) for p in parts if records_exist(p)])
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        pq.write_table(table, tmp, **PARQUET_OPTIONS)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the parts stay: they are the records
        raise
    for p in parts:
        for f in (p, Path(partial_path(p))):
            if f.exists():
                f.unlink()
    return table.num_rows


async def run_processes(mt: MeasuredTarget, on_engine: OnEngine | None, fail_fast: float | None = None, *,
                        processes: int, transport_factory: TransportFactory = make_transport) -> EngineResult:
    """Run one target on ``processes`` engine processes.

    ``on_engine`` gets a :class:`ProcessGroup` (a :class:`~loadgen.engine.base.RunControl`).
    ``transport_factory(target)`` (a picklable, module-level callable) makes each child's transport. The
    result's ``cpu_seconds`` is the children's CPU time summed, ``requests`` their sum, ``duration`` the
    longest; records are merged into ``mt.tdir/requests.parquet``.
    """
    loaded, tdir = mt.loaded, Path(mt.tdir)
    plans = plan_phases(loaded.scenario.load)
    tdir = Path(tdir)
    tdir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")  # not fork: the parent has a running loop and threads
    parts = [Path(part_path(tdir / REQUESTS, k)) for k in range(processes)]
    pipes, procs = [], []
    loop = asyncio.get_running_loop()
    try:
        for k in range(processes):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_child, name=f"latbench-engine-{k}", daemon=True,
                               args=(k, processes, mt, str(parts[k]), theirs, transport_factory, fail_fast))
            proc.start()
            theirs.close()
            pipes.append(mine)
            procs.append(proc)
        for k, c in enumerate(pipes):
            kind, detail = await loop.run_in_executor(None, _recv, c)
            if kind != "ready":
                raise RuntimeError(f"engine process {k} did not start: {detail}")
        t0 = clock() + START_MARGIN
        wall0 = time.time() + START_MARGIN
        for c in pipes:
            c.send(t0)
        group = ProcessGroup(pipes, t0, max((p.end for p in plans), default=0.0))
        if on_engine:
            on_engine(group)
        results = await asyncio.gather(*(group.collect(k) for k in range(processes)))
    finally:
        for c in pipes:
            try:
                c.send("abort")  # only matters when we got here by an exception
            except OSError:
                pass
        for proc in procs:
            await loop.run_in_executor(None, proc.join, 10)
            if proc.is_alive():
                proc.kill()
        for c in pipes:
            c.close()
    merge_parts(parts, tdir / REQUESTS)
    notes = [f"process {k}: {n}" for k, r in enumerate(results) if isinstance(r, dict) for n in r["notes"]]
    notes += [f"engine process {k} ended without a result ({r}); its records up to its last flush are kept"
              for k, r in enumerate(results) if isinstance(r, str)]
    done = [r for r in results if isinstance(r, dict)]
    failed_fast = group.failed_fast or next((r["failed_fast"] for r in done if r.get("failed_fast")), None)
    result = EngineResult(t0, wall0, max((r["duration"] for r in done), default=0.0), sum(r["requests"] for r in done),
                          group.interrupted or any(r["interrupted"] for r in done) or len(done) < len(results),
                          sum(r["cpu_seconds"] for r in done), notes, failed_fast, processes)
    return result


class MultiProcess:
    """The :class:`~loadgen.engine.base.Engine` of ``processes`` asyncio processes sharing one schedule."""

    name = "native"

    def __init__(self, processes: int, transport_factory: TransportFactory = make_transport):
        self.processes, self.transport_factory = processes, transport_factory

    def run(self, mt: MeasuredTarget, on_engine: OnEngine | None = None,
            fail_fast: float | None = None) -> EngineResult:
        return run_async(run_processes(mt, on_engine, fail_fast, processes=self.processes,
                                       transport_factory=self.transport_factory))


def _recv(conn):
    try:
        return conn.recv()
    except (EOFError, OSError):
        return ("error", "the process exited")
