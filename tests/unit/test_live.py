"""What the live line and the verdict say about a closed loop (issue 13, item 14).

Against a fast server with ``concurrency: 32`` the live line said ``qps 6553.6 (target 0)`` while the run achieved
98,000 req/s (the rate came from a ring of 32,768 completions over 5 s, and a closed phase has no target rate),
and the verdict said "send lag p99 0.0 ms > 5 ms" of a run whose only limit was its CPU.
"""

from __future__ import annotations

import numpy as np

from loadgen.analysis.verdict import TargetOutcome, generator_limited_text, target_reasons
from loadgen.cli.display import status_line
from loadgen.engine.live import GroupLive, LiveStats


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
    assert generator_limited_text(g) == "generator-limited (generator CPU saturated)"
    old = {k: v for k, v in g.items() if k != "lagging"}  # a summary written before 'lagging' existed
    assert generator_limited_text(old) == "generator-limited (generator CPU saturated)"
    lagging = {**old, "send_lag_p99": 0.020, "cpu_saturated": False}
    assert generator_limited_text(lagging) == "generator-limited (send lag p99 20.0 ms > 5 ms)"
    summary = {"overall": {"count": 10, "ok": 10, "errors": {}}, "generator_limited": True, "generator": g, "slo": []}
    (reason,) = target_reasons(TargetOutcome("t", summary))
    assert "send lag" not in reason.text and "CPU saturated" in reason.text
