"""Requests in flight: the two ways a request travels, its timeout, its cancellation (a mixin of NativeEngine).

- **Callbacks** (a transport with ``submit``, the lean one): no asyncio Task, no future per request. The
  engine hands the transport the request and :meth:`InFlight._on_done`; the transport's protocol drives the
  request and calls back once. A closed-loop phase is a chain: each finished request starts the next.
- **A Task per request** (any other transport's ``send``): :meth:`InFlight._one`; closed-loop workers are
  Tasks that await one request after another.

Either way one sweeper (:meth:`InFlight._timeout_loop`) enforces every timeout: deadlines are in send order
(one timeout for all), so it looks at the oldest requests only. A timed-out request is recorded as
``timeout``, one still in flight at the run's end or at an abort as ``cancelled``; every request has a record.
A request the client aborts on purpose (``workload.cancel``, :mod:`loadgen.engine.cancel`) is recorded as
``aborted``: a loop timer ``after`` seconds from its launch, or its handler once ``after_tokens`` chunks came.

The engine provides ``s`` (settings), ``t0``, ``live``, ``protocol``, ``transport``, ``_requests``,
``_record``, ``_live_tick``, ``_stopping``, ``_seq``, ``count`` and ``_loop``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque

from loadgen.engine.cancel import AbortAfterTokens, chosen
from loadgen.protocols.shared import counted_by_server
from loadgen.records.schema import ABORTED, Outcome
from loadgen.schedule.arrivals import PhasePlan
from loadgen.schedule.pacing import SPIN_S, sleep_for
from loadgen.transports.base import Transport

clock = time.perf_counter
LIVE_EVERY_S = 0.1  # seconds between updates of the live stats from the buffered records


def _uncancel(task) -> None:
    """Forget a cancellation that was handled (Python 3.11+ counts them; 3.10 does not)."""
    if hasattr(task, "uncancel"):
        task.uncancel()


def _tokens_so_far(out: Outcome) -> None:
    """An aborted request's output tokens: the usage's when it came, else the token chunks received."""
    if not counted_by_server(out):
        out.output_tokens, out.output_tokens_source = len(out.token_times), "chunks"


class ClosedPhase:
    """One closed-loop phase's state on the callback path: each finished request starts the next."""

    __slots__ = ("plan", "budget", "n")

    def __init__(self, plan: PhasePlan, budget: float):
        self.plan, self.budget, self.n = plan, budget, 0


class InFlight:
    """The request paths of :class:`~loadgen.engine.native.NativeEngine`; see the module's docstring."""

    def _init_in_flight(self, transport: Transport) -> None:
        # The Task path: requests in flight, oldest first: seq -> (deadline, task). One sweeper enforces every
        # timeout; a timer per request (asyncio.timeout) costs ~5 us of a ~25 us request.
        self._tasks: set[asyncio.Task] = set()
        self._deadlines: OrderedDict[int, tuple[float, asyncio.Task]] = OrderedDict()
        self._timed_out: set[int] = set()
        # The callback path: calls in send order (so in deadline order); finished ones are skipped.
        self._submit = transport.submit
        self._done = self._on_done  # one bound method, not one per request
        self._cancel = self.s.cancel
        self._calls: deque = deque()
        self._idle: asyncio.Future | None = None  # set when the last call in flight ends, once stopping
        self._aborting: set[int] = set()  # Task path: requests being aborted on purpose (workload.cancel)

    async def _timeout_loop(self) -> None:
        """Time out every request past its deadline, and feed the live stats. Deadlines are in send order
        (one timeout for all), so only the oldest requests are looked at; a timeout fires at most ``tick`` late."""
        timeout = self.s.timeout
        tick = max(0.001, min(0.01, timeout / 20))  # a tick of 0 would spin the CPU
        pending = self._deadlines
        last_live = 0.0
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
            calls = self._calls
            while calls:
                call = calls[0]
                if call.finished:
                    calls.popleft()
                elif call.out.sent + timeout <= now:
                    calls.popleft()
                    self._abandon(call, "timeout")
                else:
                    break
            if len(calls) > 2 * self.live.in_flight + 4096:  # a slow oldest request holds finished ones behind it
                self._calls = deque(c for c in calls if not c.finished)
            if now - last_live >= LIVE_EVERY_S:
                last_live = now
                self._live_tick()

    # -- requests: the callback path -----------------------------------------------------------
    def _request(self, seq: int, session, out: Outcome):
        """The Request of ``seq`` (a conversation's turn when ``session`` is given: ``out`` says which), its
        prompt's counts copied into ``out``."""
        if session is not None:
            out.session, out.turn = session.id, session.turn
            req = self.sessions.request(session)
        else:
            req = self._requests.get(seq)
        out.counts = req.counts
        return req

    def _start(self, seq: int, plan: PhasePlan, sched: float, closed: "ClosedPhase | None", session=None,
               user: int = -1) -> None:
        """Hand request ``seq`` (a turn of ``session``, with conversations; sent by closed-loop ``user``, -1 none) to
        the transport (counted in flight by the caller); ``_on_done`` records it."""
        out = Outcome()
        out.user = user  # not Outcome(user=user): a keyword among 24 parameters costs more than the object
        try:
            if session is None:  # _request's common case, inline
                req = self._requests.get(seq)
                out.counts = req.counts
            else:
                req = self._request(seq, session, out)
            self.live.sent += 1
            handler = self.protocol.handler()
            cancel = self._cancel
            if cancel is not None and not chosen(seq, cancel, self.s.seed):
                cancel = None
            if cancel is not None and cancel.after_tokens:
                ref: list = []
                handler = AbortAfterTokens(handler, cancel.after_tokens,
                                           lambda: self._loop.call_soon(lambda: self._abort_call(ref[0])))
            call = self._submit(req, handler, out, self._done, (seq, plan, sched, closed, session, user))
            if cancel is not None:
                if cancel.after_tokens:
                    ref.append(call)
                else:
                    self._loop.call_later(cancel.after, self._abort_call, call)
        except Exception as exc:  # a bug in a protocol or transport must not lose the record
            out.error, out.done = "other", clock()
            out.error_detail = f"{type(exc).__name__}: {exc}"
            self.live.in_flight -= 1
            self._record(seq, plan, sched, out)
            if closed is not None:  # not from here: a failure at every request would never yield to the loop
                self._loop.call_soon(self._closed_next, closed, user)
            return
        self._calls.append(call)

    def _on_done(self, call) -> None:
        """A request ended (the transport's callback, or a timeout/cancellation): record it; closed loop: next;
        a conversation's turn: its session's next turn."""
        seq, plan, sched, closed, session, user = call.ctx
        self.live.in_flight -= 1
        self._record(seq, plan, sched, call.out)
        if session is not None and self._next_turn(session, call.out, closed, user):
            return
        if closed is not None:
            self._closed_next(closed, user)
        elif self._idle is not None and self.live.in_flight == 0 and not self._idle.done():
            self._idle.set_result(None)

    # -- conversations: a session's next turn (loadgen.protocols.conversation) -----------------
    def _plan_at(self, t: float) -> PhasePlan | None:
        """The phase whose time span holds run time ``t`` (None past the last one)."""
        for p in self.s.plans:
            if p.start <= t < p.end:
                return p
        return None

    def _next_turn(self, session, out: Outcome, closed: "ClosedPhase | None", user: int = -1) -> bool:
        """After a turn ended: time the session's next turn (due at this one's end plus the think time). True
        when one was timed; False when the session is over or its next turn is cut (not sent: due after the
        last phase, or its closed-loop phase, or after a stop)."""
        think = self.sessions.answered(session, out)
        if think is None:
            return False
        due = out.done - self.t0 + think
        plan = closed.plan if closed is not None else self._plan_at(due)
        if (self._stopping or plan is None or due >= plan.end
                or (closed is not None and closed.budget <= 0)):
            self.sessions.cut += 1
            return False
        self._loop.call_later(max(0.0, due - self.now() - SPIN_S), self._turn_due, session, plan, due, closed, user)
        return True

    def _turn_due(self, session, plan: PhasePlan, due: float, closed: "ClosedPhase | None", user: int = -1) -> None:
        """A turn's timer fired (a little early, as timers may fire late): yield until it is due, then send it."""
        if self._stopping:
            self.sessions.cut += 1
            if closed is not None:
                self._check_idle()
            return
        wait = sleep_for(due - self.now())
        if wait is not None:
            self._loop.call_later(wait, self._turn_due, session, plan, due, closed, user)
            return
        if closed is None:
            self._launch(plan, session.seq, due, session)
            return
        if closed.budget <= 0:
            self.sessions.cut += 1
            self._check_idle()
            return
        closed.budget -= 1
        closed.n += 1
        self.count += 1
        self.live.in_flight += 1
        self._start(session.seq, plan, due, closed, session, user)

    def _abandon(self, call, error: str) -> None:
        """End a call in flight as ``timeout`` or ``cancelled`` (its connection is dropped)."""
        call.cancel()
        out = call.out
        out.error, out.done = error, clock()
        self._on_done(call)

    def _abort_call(self, call) -> None:
        """The client aborts a call still in flight on purpose (workload.cancel)."""
        if not call.finished:
            _tokens_so_far(call.out)
            self._abandon(call, ABORTED)

    def _abort_task(self, seq: int, task: asyncio.Task) -> None:
        """The client aborts request ``seq`` of ``task``, if it is still in flight (a closed-loop worker's task
        may be on a later request by now: then nothing happens)."""
        if seq in self._deadlines and not task.done():
            self._aborting.add(seq)
            task.cancel()

    def _cancel_calls(self) -> int:
        calls, self._calls = self._calls, deque()
        n = 0
        for call in calls:
            if not call.finished:
                n += 1
                self._abandon(call, "cancelled")
        return n

    def _closed_seq(self, state: ClosedPhase) -> int:
        """The number of a closed-loop phase's next request."""
        seq = self._seq
        self._seq += 1
        return seq

    def _closed_next(self, state: ClosedPhase, user: int) -> None:
        """Start closed-loop ``user``'s next request of the phase, unless stopping, past its end or out of budget."""
        if self._stopping or state.budget <= 0:
            self._check_idle()
            return
        now = clock() - self.t0
        plan = state.plan
        if now >= plan.end:
            self._check_idle()
            return
        state.budget -= 1
        seq = self._closed_seq(state)
        state.n += 1
        self.count += 1
        self.live.in_flight += 1
        sessions = self.sessions
        self._start(seq, plan, now, state, None if sessions is None else sessions.start(seq), user)

    def _check_idle(self) -> None:
        if self._idle is not None and self.live.in_flight == 0 and not self._idle.done():
            self._idle.set_result(None)

    # -- requests: the Task path ---------------------------------------------------------------
    async def _one(self, seq: int, plan: PhasePlan, sched: float, session=None, follow: bool = True,
                   user: int = -1) -> Outcome:
        """Send and record request ``seq`` (a turn of ``session``, with conversations; ``follow``: time the session's
        next turn, as the open loop does; a closed-loop worker times it itself; ``user``: that worker, -1 none)."""
        out = Outcome(user=user)
        pending = self._deadlines
        timer = None
        try:
            req = self._request(seq, session, out)
            handler = self.protocol.handler()
            self.live.sent += 1
            task = asyncio.current_task()
            cancel = self._cancel
            if cancel is not None and not chosen(seq, cancel, self.s.seed):
                cancel = None
            if cancel is not None:
                if cancel.after_tokens:
                    handler = AbortAfterTokens(handler, cancel.after_tokens,
                                               lambda: self._loop.call_soon(self._abort_task, seq, task))
                else:
                    timer = self._loop.call_later(cancel.after, self._abort_task, seq, task)
            pending[seq] = (clock() + self.s.timeout, task)
            await self.transport.send(req, handler, out)
        except asyncio.CancelledError:
            if seq in self._timed_out:
                self._timed_out.discard(seq)
                out.error, out.done = "timeout", clock()
                _uncancel(asyncio.current_task())  # a closed-loop worker goes on with its next request
            elif seq in self._aborting:
                self._aborting.discard(seq)
                _tokens_so_far(out)
                out.error, out.done = ABORTED, clock()
                _uncancel(asyncio.current_task())
            else:
                out.error, out.done = "cancelled", clock()
        except Exception as exc:  # a bug in a protocol or transport must not lose the record
            out.error, out.done = "other", clock()
            out.error_detail = f"{type(exc).__name__}: {exc}"
        finally:
            if timer is not None:
                timer.cancel()
            pending.pop(seq, None)
            self.live.in_flight -= 1
            if math.isnan(out.done):
                out.done = clock()
            self._record(seq, plan, sched, out)
            if session is not None and follow:
                self._next_turn(session, out, None)
        return out

