"""What the live line and the verdict say about a closed loop (issue 13, item 14).

Against a fast server with ``concurrency: 32`` the live line said ``qps 6553.6 (target 0)`` while the run achieved
98,000 req/s (the rate came from a ring of 32,768 completions over 5 s, and a closed phase has no target rate),
and the verdict said "send lag p99 0.0 ms > 5 ms" of a run whose only limit was its CPU.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.analysis.closedloop import closed_loop_stats, held_share
from loadgen.analysis.metrics import records_frame, summarize
from loadgen.analysis.verdict import TargetOutcome, generator_limited_text, target_reasons
from loadgen.cli.display import status_line
from loadgen.engine.live import GroupLive, LiveStats
from loadgen.records.results import Generator, Summary
from loadgen.records.schema import SCHEMA, Outcome, RecordBuffer, read_records
from loadgen.schedule.arrivals import PhasePlan


class _Engine:
    def __init__(self, live, now):
        self.live, self.t0, self._now = live, 1.0, now

    def now(self):
        return self._now


def _feed(live: LiveStats, rate: float, seconds: float, batch: float = 0.1) -> None:
    """Completions at ``rate`` per second for ``seconds``, added in bulk every ``batch`` s (as the engine does)."""
    t = 0.0
    while t < seconds - 1e-9:
        n = int(rate * batch)
        done = t + np.linspace(0, batch, n, endpoint=False)
        live.add_many(done, np.full(n, 0.002), np.ones(n, dtype=bool))
        t += batch


def test_the_live_rate_is_the_achieved_rate_however_high():
    live = LiveStats(10.0)
    live.concurrency, live.phase = 32, "closed"
    _feed(live, 98_000, 6.0)
    w = live.window(6.0)
    assert abs(w["qps"] - 98_000) / 98_000 < 0.03, w["qps"]
    line = status_line(_Engine(live, 6.0))
    assert "(concurrency 32)" in line and "target" not in line, line
    assert "98" in line.split("qps")[1].split("(")[0], line


def test_an_open_phase_shows_its_target_and_a_slow_one_its_rate():
    live = LiveStats(10.0)
    live.target_rate = 50.0
    _feed(live, 50, 3.0)
    assert abs(live.window(3.0)["qps"] - 50) < 2
    assert "(target 50)" in status_line(_Engine(live, 3.0))


def test_after_the_last_phase_the_line_says_draining_not_a_phase_past_its_end():
    """During the grace after the last phase the line said '24.6/22s  phase recovery': a phase past its length."""
    live = LiveStats(22.0)
    live.phase, live.target_rate, live.in_flight = "recovery", 10.0, 3
    assert "phase recovery" in status_line(_Engine(live, 21.0))
    live.draining = True
    line = status_line(_Engine(live, 24.6))
    assert line.lstrip().startswith("24.6s  draining") and "recovery" not in line and "/22s" not in line, line
    assert "in-flight     3" in line and "target" not in line, line
    group = GroupLive(22.0, 2)
    for k in range(2):
        child = LiveStats(22.0)
        child.draining = k == 1
        group.update(k, child.snapshot(0, 10)[0])
    assert not group.draining  # draining once every process is
    group.update(0, live.snapshot(0, 10)[0])
    assert group.draining


def test_the_group_of_processes_sums_rates_and_workers():
    group = GroupLive(10.0, 2)
    children, marks = [LiveStats(10.0), LiveStats(10.0)], [0, 0]
    for child in children:
        child.concurrency = 16
    for step in range(12):  # each child reports every 0.5 s, as in a run
        for k, child in enumerate(children):
            t0 = step * 0.5
            n = 10_000
            child.add_many(t0 + np.linspace(0, 0.5, n, endpoint=False), np.full(n, 0.002), np.ones(n, dtype=bool))
            snap, marks[k] = child.snapshot(marks[k], 1024)
            group.update(k, snap)
    assert group.concurrency == 32
    assert abs(group.window(6.0)["qps"] - 40_000) / 40_000 < 0.05


def test_the_verdict_of_a_cpu_bound_closed_loop_names_only_the_cpu():
    g = {"send_lag_p99": 0.00002, "send_lag_threshold": 0.005, "cpu_utilization": 0.97, "lagging": False,
         "cpu_saturated": True}
    assert generator_limited_text(Generator.model_validate(g)) == "generator-limited (generator CPU saturated)"
    old = {k: v for k, v in g.items() if k != "lagging"}  # a summary written before 'lagging' existed
    assert generator_limited_text(Generator.model_validate(old)) == "generator-limited (generator CPU saturated)"
    lagging = {**old, "send_lag_p99": 0.020, "cpu_saturated": False}
    text = "generator-limited (send lag p99 20.0 ms > 5 ms)"
    assert generator_limited_text(Generator.model_validate(lagging)) == text
    summary = {"overall": {"count": 10, "ok": 10, "errors": {}}, "generator_limited": True, "generator": g, "slo": []}
    (reason,) = target_reasons(TargetOutcome("t", Summary.model_validate(summary)))
    assert "send lag" not in reason.text and "CPU saturated" in reason.text


def _records(rows, path=None):
    """A records table of closed-loop requests: (user, sent, done[, session, turn, scheduled]) each, phase 0."""
    buf = RecordBuffer()
    for seq, (user, sent, done, *conv) in enumerate(rows):
        session, turn, sched = conv if conv else (-1, -1, sent)
        buf.append(seq, 0, True, sched, Outcome(sent=sent, done=done, session=session, turn=turn, user=user), 0.0)
    return pa.Table.from_batches([buf.drain()])


def test_a_closed_loop_that_did_not_hold_its_concurrency_says_how_many_it_held():
    """Held: the time-average of requests in flight, from the moment every user has sent (0.5 s) to the phase's
    end (4 s): user 0 in flight 2.5 s of it, user 1 3.5 s: 6 / 3.5 = 1.71 of 2, below 95%: generator-limited."""
    table = _records([(0, 0.0, 1.0), (0, 1.5, 2.5), (0, 3.0, 4.2), (1, 0.5, 4.5)])
    plan = PhasePlan(index=0, name="steady", start=0.0, end=4.0, concurrency=2)
    s = summarize(table, [plan], [], 4.5)
    cl = s["phases"]["steady"]["closed_loop"]
    assert cl["window"] == [0.5, 4.0] and cl["held"] == pytest.approx(6 / 3.5) == cl["requests_in_flight"]
    assert cl["fraction"] == pytest.approx(6 / 7) and cl["limited"] and cl["measure"] == "requests"
    assert cl["gap"] == {"n": 2, "p50": pytest.approx(0.5), "p99": pytest.approx(0.5)}  # user 0's two waits
    assert s["generator_limited"] and not s["generator"]["lagging"] and not s["generator"]["cpu_saturated"]
    (reason,) = target_reasons(TargetOutcome("t", Summary.model_validate(s)))
    assert reason.text == "t: generator-limited (closed loop held 1.7 of 2 in flight (86%) in phase steady)"
    assert held_share(0.949) == "94.9%"  # just below the threshold: never shown as 95%
    unrecorded = PhasePlan(index=0, name="warm", start=0.0, end=4.0, concurrency=2, recorded=False)
    assert not summarize(table, [unrecorded], [], 4.5)["generator_limited"]  # a warm-up is not judged


def test_a_closed_loop_of_conversations_holds_sessions_think_time_included():
    """One user: session 0 (two turns, 0.5 s of think time between) in progress 0-2.5 s, session 1 2.6-4.5 s: 3.9
    of the 4 s held (98%), though a request was in flight only 3.4 s (85%). The second turn's gap counts from its
    due time (1.5 s), the next session's from the answer before it."""
    table = _records([(0, 0.0, 1.0, 0, 0, 0.0), (0, 1.52, 2.5, 0, 1, 1.5), (0, 2.6, 4.5, 2, 0, 2.6)])
    plan = PhasePlan(index=0, name="chat", start=0.0, end=4.0, concurrency=1)
    s = summarize(table, [plan], [], 4.5)
    cl = s["phases"]["chat"]["closed_loop"]
    assert cl["measure"] == "sessions" and cl["held"] == pytest.approx(3.9 / 4) == cl["sessions_in_progress"]
    assert cl["requests_in_flight"] == pytest.approx(3.38 / 4) and not cl["limited"] and not s["generator_limited"]
    assert cl["gap"]["n"] == 2 and cl["gap"]["p50"] == pytest.approx(0.02) and cl["gap"]["p99"] == pytest.approx(0.1)


def test_records_written_before_the_user_column_still_give_the_concurrency_held(tmp_path):
    table = _records([(0, 0.0, 1.0), (0, 1.5, 2.5), (0, 3.0, 4.2), (1, 0.5, 4.5)])
    pq.write_table(table.drop_columns(["user"]), tmp_path / "old.parquet")
    old = read_records(tmp_path / "old.parquet")
    assert old.schema == SCHEMA and old.column("user").to_pylist() == [-1] * 4
    cl = closed_loop_stats(records_frame(old), PhasePlan(index=0, name="c", start=0.0, end=4.0, concurrency=2), 4.0)
    assert cl.window == [0.5, 4.0] and cl.held == pytest.approx(6 / 3.5)  # from the second send
    assert cl.gap is None  # which request followed which is not known
