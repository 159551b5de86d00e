"""Per-phase CPU waits from synthetic host samples (loadgen.analysis.host): the wait share, which phases are
contended, the trees not judged (too idle, an unrecorded phase), and the lines summary.md prints."""

import numpy as np
import pandas as pd
import pytest

from loadgen.analysis.host import (
    MIN_BUSY,
    WAIT_PER_RUN_LIMIT_MS,
    WAIT_SHARE_LIMIT,
    host_summary,
    notable_lines,
    wait_share_series,
)
from loadgen.analysis.verdict import host_contended_text
from loadgen.records.results import HostSummary
from loadgen.schedule.arrivals import PhasePlan

PLANS = [PhasePlan(0, "warm", 0.0, 2.0, 5, 5, recorded=False), PhasePlan(1, "calm", 2.0, 6.0, 10, 10),
         PhasePlan(2, "spike", 6.0, 10.0, 50, 50)]
LABELS = {"server": "the reference server", "latbench": "latbench"}


def frame(rates: dict[str, list[tuple[float, float]]], steal_share: float = 0.0, step: float = 0.5) -> pd.DataFrame:
    """Samples every ``step`` s from -0.5 s to 10.5 s of cumulative counters growing at the given (cpu, wait)
    CPUs per phase of PLANS, per source."""
    t = np.arange(-0.5, 10.51, step)  # on the phase boundaries: the counters there are exact
    rows = []
    for src, per_phase in rates.items():
        cpu = wait = 0.0
        prev = t[0]
        for x in t:
            for p, (c, w) in zip(PLANS, per_phase):  # the part of (prev, x] in each phase
                end, start = (p.end if p is not PLANS[-1] else x), (p.start if p is not PLANS[0] else prev)
                part = max(0.0, min(x, end) - max(prev, start))  # the first and last phase: to the samples' ends
                cpu, wait = cpu + c * part, wait + w * part
            prev = x
            rows += [(x, src, "cpu_s", cpu), (x, src, "wait_s", wait), (x, src, "slices", x * 100),
                     (x, src, "threads", 4), (x, src, "cpus", 2)]
    for x in t:
        rows += [(x, "host", "steal_s", 2 * (x + 0.5) * steal_share), (x, "host", "host_cpu_s", 2 * (x + 0.5)),
                 (x, "host", "load1", 1.5), (x, "host", "runnable", 3)]
    return pd.DataFrame(rows, columns=["time", "source", "metric", "value"])


def test_wait_share_is_wait_over_the_time_it_had_work_per_phase():
    f = frame({"server": [(0.5, 0.5), (0.5, 0.1), (1.0, 1.0)], "latbench": [(0.1, 0.0)] * 3}, steal_share=0.05)
    h = host_summary(f, PLANS, 10.0, "server", LABELS).to_json()  # the block as summary.json holds it
    calm, spike = h["phases"]["calm"]["processes"]["server"], h["phases"]["spike"]["processes"]["server"]
    assert calm["cpu_s"] == pytest.approx(2.0) and calm["wait_s"] == pytest.approx(0.4)
    assert calm["wait_share"] == pytest.approx(0.4 / 2.4) and calm["busy"] == pytest.approx(0.5)
    assert spike["wait_share"] == pytest.approx(0.5) and spike["busy"] == pytest.approx(1.0)
    assert spike["wait_per_run_ms"] == pytest.approx(4.0 / 400 * 1e3)  # 100 runs a second
    assert h["phases"]["spike"]["steal_share"] == pytest.approx(0.05) and h["phases"]["calm"]["load1_max"] == 1.5
    # warm waited as long, but is not recorded: only spike is over the limit
    assert [(c["phase"], c["label"]) for c in h["contended"]] == [("spike", "the reference server")]
    assert h["contended"][0]["wait_share"] == pytest.approx(0.5) and h["wait_share_limit"] == WAIT_SHARE_LIMIT


@pytest.mark.parametrize("rates, judged, contended", [
    ({"server": [(0.5, 0.0), (0.5, 0.2), (0.5, 0.24)]}, "server", []),  # 0.24 / 0.74 = 32%: under a third
    ({"server": [(0.5, 0.0), (0.5, 0.2), (0.5, 0.26)]}, "server", ["spike"]),  # 34%
    # latbench waits two thirds of the little it does (0.02 CPUs < MIN_BUSY), 0.4 ms each of its 100 wake-ups a
    # second: the wake-up delays of a quiet host, not judged by the share
    ({"server": [(0.5, 0.0)] * 3, "latbench": [(0.02, 0.04)] * 3}, "latbench", []),
    # as idle, but 9 ms each time it woke: its timestamps are late by that, judged by the wait per run
    ({"server": [(0.5, 0.0)] * 3, "latbench": [(0.1, 0.9)] * 3}, "latbench", ["calm", "spike"]),
    ({"server": [(0.05, 0.9)] * 3}, "server", ["calm", "spike"]),  # a nearly idle managed server too
    ({"server": [(0.5, 0.0)] * 3, "latbench": [(MIN_BUSY, 0.9)] * 3}, "latbench", ["calm", "spike"]),  # external
    ({"server": [(0.5, 0.0)] * 3, "latbench": [(0.5, 0.9)] * 3}, "server", []),  # managed: the server judges it
])
def test_which_phases_are_contended(rates, judged, contended):
    h = host_summary(frame(rates), PLANS, 10.0, judged, LABELS)
    assert [c.phase for c in h.contended] == contended


def test_not_measured_and_a_run_shorter_than_its_phases():
    assert host_summary(None, PLANS, 10.0, "server", LABELS, note="host not measured: no /proc here").to_json() == {
        "measured": False, "note": "host not measured: no /proc here"}
    h = host_summary(frame({"server": [(0.5, 0.5)] * 3}), PLANS, 7.0, "server", LABELS)  # interrupted at 7 s
    assert h.phases["spike"].end == 7.0 and h.phases["spike"].processes["server"].cpu_s == pytest.approx(0.5)


def test_notable_lines_name_the_process_share_and_steal():
    h = host_summary(frame({"server": [(0.5, 0.0), (0.5, 0.05), (1.0, 1.0)]}, steal_share=0.03), PLANS, 10.0,
                     "server", LABELS)
    assert notable_lines(h) == [
        "phase warm: CPU steal 3.0%", "phase calm: CPU steal 3.0%",
        "phase spike: the reference server waited for a CPU 50% of the time it had work (1.00 CPUs busy; limit 33%); "
        "CPU steal 3.0%"]
    assert notable_lines(HostSummary(measured=False, note="x")) == [] and notable_lines(None) == []


def test_wait_share_series_per_sample_interval_blank_where_idle():
    t, share = wait_share_series(frame({"server": [(0.1, 0.1), (0.5, 0.5), (1.0, 0.0)]}), "server")
    assert t[0] == pytest.approx(-0.25) and len(t) == len(share) == 22  # mid-interval times
    assert np.isnan(share[t < 2]).all()  # warm: 0.1 CPUs
    assert share[t > 6] == pytest.approx(0.0) and share[(t > 2) & (t < 6)] == pytest.approx(0.5)


def test_the_scenario_limit_replaces_the_default_and_one_never_judges():
    f = frame({"server": [(0.5, 0.0), (0.5, 0.2), (0.5, 4.0)]})  # 29% in calm, 89% in spike
    assert [c.phase for c in host_summary(f, PLANS, 10.0, "server", LABELS, limit=0.25).contended] == ["calm", "spike"]
    h = host_summary(f, PLANS, 10.0, "server", LABELS, limit=1.0)
    assert h.contended == [] and h.wait_share_limit == 1.0


def test_a_nearly_idle_tree_is_judged_by_its_wait_each_time_it_woke():
    """Under MIN_BUSY the wait share is made of wake-up delays (half of a quiet host's latbench at 0.05 CPUs); what
    bends its timestamps is how long each wake-up waited: over WAIT_PER_RUN_LIMIT_MS (1 ms), invalid."""
    just_under = WAIT_PER_RUN_LIMIT_MS * 0.9 * 100 / 1e3  # wait seconds a second at 100 runs a second
    just_over = WAIT_PER_RUN_LIMIT_MS * 1.1 * 100 / 1e3
    for wait, contended in ((just_under, []), (just_over, ["calm", "spike"])):
        h = host_summary(frame({"latbench": [(0.05, wait)] * 3}), PLANS, 10.0, "latbench", LABELS)
        assert [c.phase for c in h.contended] == contended and h.wait_per_run_limit_ms == WAIT_PER_RUN_LIMIT_MS
    c = h.contended[0]
    assert c.wait_per_run_ms == pytest.approx(WAIT_PER_RUN_LIMIT_MS * 1.1) and c.busy == pytest.approx(0.05)
    assert host_contended_text(h.contended) == ("host contended: latbench waited 1.1 ms for a CPU each time it woke "
                                                "in phase calm (and over the limit in 1 more phase)")
    # a busy phase's share is named before an idle phase's wait: the share says how much longer the work took
    mixed = host_summary(frame({"latbench": [(0.05, 0.0), (0.05, 0.5), (0.5, 0.5)]}), PLANS, 10.0, "latbench", LABELS)
    assert host_contended_text(mixed.contended).startswith("host contended: latbench waited for a CPU 50% of the time")
    # load.host_wait_limit: 1 judges neither
    never = host_summary(frame({"latbench": [(0.05, 0.9)] * 3}), PLANS, 10.0, "latbench", LABELS, limit=1.0)
    assert never.contended == []
