"""A Locust worker process: ``python -m loadgen.engine.locust.worker --master HOST[:PORT]``.

It joins a master (Locust's ``WorkerRunner``), proves it knows the run's secret (``--secret-file``,
``$LATBENCH_WORKER_SECRET_FILE`` or ``$LATBENCH_WORKER_SECRET``; :mod:`loadgen.engine.locust.auth`; a worker
the master refuses exits with code 2), receives the run in an ``lb_start`` message, and runs
ONE Locust user, :class:`LatbenchUser` (a ``FastHttpUser``), spawned by the master through Locust's
own dispatcher. That user is the worker's pacer: it sends the worker's share of the run (see
:mod:`loadgen.schedule.sharding`), each request in its own greenlet at its intended time, and
records it exactly as the native engine does (Outcome -> RecordBuffer). Every second the buffer goes
to the master as one ``lb_records`` message; a last one and ``lb_done`` close the run.

Clock: the master sends the run's start as wall time (``t0_wall``). On arrival the worker maps it
onto its own ``perf_counter`` (``t0 = perf_counter() + t0_wall - time.time()``) and takes every time
from ``perf_counter`` after that, so record times are seconds from one shared start. On one host
that is exact to microseconds; across hosts it is as good as their NTP sync (typically < 1 ms to a
few ms), which shifts a worker's times as a whole, never the durations within a request.

Run only as its own process: importing this module imports locust, which monkey-patches the standard
library through gevent (the master, also a Locust process, imports it too; the native engine never does).

One idea at several stages, a Locust worker, so one file name: :mod:`loadgen.cli.worker` (the command).
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import time

import gevent
import gevent.pool
from locust import FastHttpUser, constant, task
from locust.env import Environment
from locust.stats import RequestStats

from loadgen.engine.locust.auth import SECRET_ENV, SECRET_FILE_ENV, read_secret
from loadgen.engine.locust.handshake import ProvingWorker
from loadgen.engine.locust.transport import Cancelled, fire_request_event, send
from loadgen.engine.logs import configure_logging, log_failure, logging_failures
from loadgen.errors import EXIT_USAGE, UsageError
from loadgen.protocols.conversation import Sessions
from loadgen.protocols.workload import make_workload
from loadgen.records.schema import Outcome, RecordBuffer
from loadgen.records.wire import batch_from_bytes, batch_to_bytes
from loadgen.scenario.model import Target, Trace, Workload
from loadgen.schedule.pacing import FLUSH_EVERY_S, sleep_for
from loadgen.schedule.sharding import closed_seq, plans_from_wire, shard_arrivals, share

DEFAULT_PORT = 5557
clock = time.perf_counter


def parse_master(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``HOST[:PORT]`` -> (host, port). IPv6 literals go in brackets: ``[::1]:5557``."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text, default_port
    return host, int(port)


class WorkerRun:
    """Worker ``k`` of ``n``: paces its share of the run, records every request, ships the records."""

    def __init__(self, cfg: dict, send_message, events):


        self.cfg = cfg
        self.k, self.n = cfg["k"], cfg["n"]
        self.t0 = clock() + (cfg["t0_wall"] - time.time())
        self.plans = plans_from_wire(cfg["plans"])
        target = Target.model_validate(cfg["target"])
        workload = Workload.model_validate(cfg["workload"])
        trace = Trace.model_validate(cfg["trace"]) if cfg.get("trace") else None
        self.protocol, self.prompts = make_workload(target, workload, cfg["model"], cfg["url"], cfg["seed"],
                                                    cfg["base_dir"], trace=trace)
        # workload.conversations: each session stays on this worker, its turns in one greenlet
        self.sessions: Sessions | None = self.prompts if isinstance(self.prompts, Sessions) else None
        self.cap = max(1, share(cfg["max_in_flight"], self.k, self.n))
        self.timeout = cfg["timeout"]
        self.send_message = send_message
        self.events = events
        self.buffer = RecordBuffer()
        self.group = gevent.pool.Group()
        self.in_flight = 0
        self.launched = 0
        self.rows = 0
        self.errors = 0
        self.stopping = False
        self.interrupted = False
        self.notes: list[str] = []
        self.name = self.protocol.name
        self.name_of_target = cfg["target"].get("name") or ""
        self.log_failures = logging_failures()

    # -- control (from the master's messages) ---------------------------------------------------
    def request_stop(self) -> None:
        self.stopping = True
        self.interrupted = True

    def abort(self) -> None:

        self.request_stop()
        self.group.kill(Cancelled, block=False)

    def now(self) -> float:
        return clock() - self.t0

    # -- requests -------------------------------------------------------------------------------
    def _record(self, seq: int, plan, sched: float, out: Outcome) -> None:
        self.buffer.append(seq, plan.index, plan.recorded, sched, out, self.t0, self.k)
        if out.error:
            self.errors += 1
            if self.log_failures:
                log_failure(self.name_of_target, plan.name, seq, out)

    def _one(self, session, seq: int, plan, sched: float, conv=None, user: int = -1) -> Outcome:
        """Send and record request ``seq`` (a turn of the conversation session ``conv``, if any; sent by closed-loop
        ``user``, -1 none)."""
        out = Outcome(user=user)
        wall = time.time()
        req = None
        try:
            if conv is not None:
                out.session, out.turn = conv.id, conv.turn
                req = self.sessions.request(conv)
            else:
                req = self.protocol.build(seq, self.prompts.get(seq))
            out.counts = req.counts
            send(session, req, self.protocol.handler(), out, self.timeout, self.name)
        except (Cancelled, gevent.GreenletExit):
            out.error, out.done = "cancelled", clock()
        except Exception as exc:  # a bug in a protocol must not lose the record
            out.error, out.done = "other", clock()
            out.error_detail = f"{type(exc).__name__}: {exc}"
        finally:
            self.in_flight -= 1
            if math.isnan(out.done):
                out.done = clock()
            self._record(seq, plan, sched, out)
            if req is not None:
                fire_request_event(self.events, req, self.name, out, wall)
        return out

    def _plan_at(self, t: float):
        return next((p for p in self.plans if p.start <= t < p.end), None)

    def _conversation(self, session, conv, plan, sched: float, closed_plan=None, budget=None, user: int = -1) -> None:
        """One session's turns, in this greenlet: each due at the last one's end plus the think time (see
        :mod:`loadgen.protocols.conversation`); its first turn is already counted in flight by the caller."""
        while True:
            out = self._one(session, conv.seq, plan, sched, conv, user)
            think = self.sessions.answered(conv, out)
            if think is None:
                return
            sched = out.done - self.t0 + think
            plan = closed_plan or self._plan_at(sched)
            if (self.stopping or plan is None or sched >= plan.end
                    or (budget is not None and budget[0] <= 0) or not self._sleep_until(sched)):
                self.sessions.cut += 1
                return
            self.launched += 1
            if budget is not None:
                budget[0] -= 1
            elif self.in_flight >= self.cap:
                drop = Outcome(error="dropped", done=clock())
                drop.session, drop.turn = conv.id, conv.turn
                self._record(conv.seq, plan, sched, drop)
                return
            self.in_flight += 1

    def _launch(self, session, seq: int, plan, sched: float) -> None:
        self.launched += 1
        conv = self.sessions.start(seq) if self.sessions is not None else None
        if self.in_flight >= self.cap:
            out = Outcome(error="dropped", done=clock())
            if conv is not None:
                out.session, out.turn = conv.id, conv.turn
            self._record(seq, plan, sched, out)
            return
        self.in_flight += 1
        if conv is not None:
            self.group.spawn(self._conversation, session, conv, plan, sched)
        else:
            self.group.spawn(self._one, session, seq, plan, sched)

    def _sleep_until(self, t: float) -> bool:
        """Sleep until run time ``t`` (a timer, then yielding for the last stretch); False on stop."""

        while not self.stopping:
            wait = sleep_for(t - self.now())
            if wait is None:
                return True
            gevent.sleep(wait)
        return False

    def _open_phase(self, session, plan) -> None:

        cfg = self.cfg
        base = cfg["bases"][plan.index]
        for times, first, stride in shard_arrivals(plan, self.k, self.n, cfg["seed"], cfg["burstiness"], base):
            n, i = len(times), 0
            while i < n:
                if not self._sleep_until(times[i]):
                    return
                now = self.now()
                j = i + 1
                while j < n and times[j] <= now:
                    j += 1
                for m in range(i, j):
                    self._launch(session, first + m * stride, plan, float(times[m]))
                i = j
        self._sleep_until(plan.end)

    def _closed_phase(self, session, plan) -> None:


        if not self._sleep_until(plan.start):
            return
        users = share(plan.concurrency, self.k, self.n)
        budget = [share(plan.max_requests, self.k, self.n) if plan.max_requests else math.inf]
        count = [0]


        def user(u: int) -> None:
            try:
                while not self.stopping and self.now() < plan.end and budget[0] > 0:
                    budget[0] -= 1
                    seq = closed_seq(plan.index, count[0], self.k, self.n)
                    count[0] += 1
                    self.launched += 1
                    self.in_flight += 1
                    if self.sessions is None:
                        self._one(session, seq, plan, self.now(), user=u)
                    else:
                        self._conversation(session, self.sessions.start(seq), plan, self.now(), plan, budget, u)
            except (Cancelled, gevent.GreenletExit):
                pass  # between two requests: nothing in flight to record

        for u in range(users):
            self.group.spawn(user, u)
        self._sleep_until(plan.end)

    # -- shipping -------------------------------------------------------------------------------
    def _flush(self) -> None:

        batch = self.buffer.drain()
        data = batch_to_bytes(batch) if batch is not None else b""
        rows = batch.num_rows if batch is not None else 0
        self.rows += rows
        self.send_message("lb_records", {"k": self.k, "rows": rows, "data": data, "sent": self.launched,
                                         "in_flight": self.in_flight, "errors": self.errors})

    def _flush_loop(self) -> None:

        while True:
            gevent.sleep(FLUSH_EVERY_S)
            self._flush()

    # -- the run --------------------------------------------------------------------------------
    def drive(self, session) -> None:
        """Run this worker's part of every phase, then the grace period; report ``lb_done``."""


        cpu0 = time.process_time()
        flusher = gevent.spawn(self._flush_loop)
        try:
            for plan in self.plans:
                if self.stopping:
                    break
                (self._closed_phase if plan.closed else self._open_phase)(session, plan)
            self.stopping = True  # closed-loop users: no new requests after the last phase
            grace = self.cfg["grace"]
            if not self.group.join(timeout=grace):
                pending = len(self.group)
                if pending:
                    self.notes.append(f"worker {self.k}: {pending} requests still in flight after the "
                                      f"{grace:g} s grace were cancelled")
                self.group.kill(Cancelled, block=True, timeout=5)
        finally:
            flusher.kill(block=True)
            end = self.now()
            self._flush()
            if self.sessions is not None and self.sessions.cut:
                self.notes.append(f"worker {self.k}: {self.sessions.cut} conversation turns were not sent: due "
                                  "after the last phase, after a stop, or past max_requests")
            self.send_message("lb_done", {"k": self.k, "requests": self.launched, "rows": self.rows,
                                          "cpu": time.process_time() - cpu0, "end": end, "notes": self.notes,
                                          "interrupted": self.interrupted})


def warm_up() -> None:
    """Take the record path once: pyarrow imports pandas lazily on first use, a second of blocking."""

    buf = RecordBuffer()
    buf.append(0, 0, True, 0.0, Outcome(sent=0.0, done=0.0, token_times=[0.0]), 0.0)
    batch_from_bytes(batch_to_bytes(buf.drain()))


def make_user_class(state: dict):
    """The Locust user class of a worker. ``state['run']`` is set by ``lb_start`` before it spawns."""

    class LatbenchUser(FastHttpUser):
        """One per worker: the pacer of the worker's share of the run (see the module docstring)."""

        wait_time = constant(0)
        host = "http://127.0.0.1"  # replaced by the master's host; requests use absolute URLs

        @task
        def drive(self) -> None:
            run = state.get("run")
            # Locust may rebalance users when a worker dies; a second user on this worker must not
            # send the run twice, so only the first one claims it.
            if run is not None and not state.get("claimed"):
                state["claimed"] = True
                run.drive(self.client)
            while True:
                gevent.sleep(3600)

    return LatbenchUser


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="latbench worker", description="join a latbench Locust master")
    ap.add_argument("--master", required=True, help="HOST[:PORT] of the master (port default 5557)")
    ap.add_argument("--label", default=None, help="name of this worker in notes (default host:pid)")
    ap.add_argument("--secret-file", default=None,
                    help=f"a file holding the run's worker secret (default: ${SECRET_FILE_ENV}, else ${SECRET_ENV})")
    a = ap.parse_args(argv)
    configure_logging()
    try:
        secret = read_secret(a.secret_file)
    except UsageError as exc:
        print(f"latbench worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if secret is None:
        print(f"latbench worker: the master only accepts workers that know the run's secret: set {SECRET_ENV} "
              f"(or {SECRET_FILE_ENV}, a file holding it), or give --secret-file, as for the run", file=sys.stderr)
        return EXIT_USAGE
    host, port = parse_master(a.master)
    # Everything a run needs was imported with this module: an import inside a message handler would
    # block the worker's only thread (and so its pacing) for as long as it takes.
    warm_up()
    state: dict = {}
    user_cls = make_user_class(state)
    env = Environment(user_classes=[user_cls])
    env.stats = RequestStats(use_response_times_cache=False)  # as Environment.create_worker_runner does
    runner = ProvingWorker(env, host, port, secret)
    if runner.refused:
        print(f"latbench worker: the master at {a.master} refused this worker: {runner.refused} (is the secret "
              "the run's?)", file=sys.stderr)
        runner.quit()
        return EXIT_USAGE
    label = a.label or f"{socket.gethostname()}:{os.getpid()}"

    def on_start(environment, msg, **kw) -> None:
        cfg = msg.data
        cap = max(1, cfg["max_in_flight"] // cfg["n"] + 1)
        user_cls.concurrency = cap  # the connection pool never makes a request wait
        user_cls.network_timeout = user_cls.connection_timeout = float(cfg["timeout"])
        user_cls.insecure = not cfg["target"].get("verify", True)
        state["run"] = WorkerRun(cfg, runner.send_message, environment.events)

    def on_stop(environment, msg, **kw) -> None:
        if state.get("run"):
            state["run"].request_stop()

    def on_abort(environment, msg, **kw) -> None:
        if state.get("run"):
            state["run"].abort()

    runner.register_message("lb_start", on_start)
    runner.register_message("lb_stop", on_stop)
    runner.register_message("lb_abort", on_abort)
    runner.send_message("lb_hello", {"label": label, "host": socket.gethostname(), "pid": os.getpid()})
    try:
        runner.greenlet.join()
    except KeyboardInterrupt:
        runner.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
