"""``--fail-fast``: stop a run as soon as an objective can no longer be met (as k6's abortOnFail).

Only objectives whose breach is certain from counts are watched: ``metric.pNN < X`` (or ``<=``) on
latency, ttft or service_time, and ``error_rate < X``, over the whole run or one phase. An objective
``latency.p99 < 300ms`` over a phase expected to hold N requests is lost for good once more than
(1 - 0.99) * N of them were slower than 300 ms (or failed: failed requests have no latency, and the
percentile is taken over successes, so they are counted conservatively only for error_rate).
"""

from __future__ import annotations

import math

from loadgen.scenario.slo import SLO, percentile_of
from loadgen.schedule.arrivals import PhasePlan

FAIL_FAST_SLACK = 1.1  # stop once breaches exceed 110% of the allowance (+3): arrival counts are noisy


class _Watch:
    __slots__ = ("slo", "phase", "budget", "bad")

    def __init__(self, slo: SLO, phase: int | None, budget: float):
        self.slo, self.phase, self.budget, self.bad = slo, phase, budget, 0


class FailFast:
    """Counts breaches per watched objective; ``breached`` names the first one that is certain."""

    def __init__(self, slos: list[SLO], plans: list[PhasePlan], target: str, slack: float = FAIL_FAST_SLACK):
        self.watches: list[_Watch] = []
        self.slack = slack
        self.breached: str | None = None
        by_name = {p.name: p for p in plans}
        for s in slos:
            tgt, name = s.scope_parts()
            if tgt is not None and tgt != target:
                continue
            if name is not None and name not in by_name:
                continue  # scoped to another target
            scope = [by_name[name]] if name else [p for p in plans if p.recorded]
            expected = sum(p.expected_count() for p in scope)
            if not expected or math.isnan(expected) or s.op not in ("<", "<="):
                continue  # closed-loop phases: the total is unknown in advance
            phase = scope[0].index if name else None
            if s.metric == "error_rate":
                self.watches.append(_Watch(s, phase, s.threshold * expected))
            elif s.metric in ("latency", "ttft", "service_time") and s.stat and percentile_of(s.stat):
                self.watches.append(_Watch(s, phase, (1.0 - percentile_of(s.stat) / 100.0) * expected))

    def observe(self, phase: int, recorded: bool, ok: bool, latency: float, ttft: float, service: float) -> bool:
        """Account one finished request; True once some objective can no longer be met."""
        if not recorded or self.breached:
            return bool(self.breached)
        for w in self.watches:
            if w.phase is not None and w.phase != phase:
                continue
            m = w.slo.metric
            if m == "error_rate":
                bad = not ok
            else:
                value = latency if m == "latency" else ttft if m == "ttft" else service
                bad = ok and not math.isnan(value) and not w.slo.check(value)
            if bad:
                w.bad += 1
                # a margin (and 3 requests) for arrival-count noise: stop only when it is certain
                if w.bad > w.budget * self.slack + 3:
                    self.breached = w.slo.expr
                    return True
        return False
