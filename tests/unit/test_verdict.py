"""The verdict, table-driven: which reasons make a run invalid (exit 3), failed (exit 1) or passed (exit 0),
and that it survives the trip through meta.json."""

import pytest

from loadgen.analysis.verdict import Kind, Reason, TargetOutcome, Verdict, generator_limited_text, judge

SERVER = "the reference server"


def summary(*, ok=100, count=100, errors=None, slos=(), limited=False, lagging=True, saturated=False, contended=()):
    return {"overall": {"count": count, "ok": ok, "errors": errors or {}},
            "host": {"measured": True, "contended": [{"phase": ph, "source": "server", "label": SERVER,
                                                      "wait_share": share, "busy": 0.8} for ph, share in contended]},
            "generator_limited": limited,
            "generator": {"send_lag_p99": 0.012, "send_lag_threshold": 0.005, "lagging": lagging,
                          "cpu_saturated": saturated},
            "slo": [{"expr": e, "applies": a, "passed": p, "value": 0.4, "stat": "p99", "metric": "latency"}
                    for e, a, p in slos]}


MISSED = ("latency.p99 < 300ms", True, False)
MET = ("latency.p50 < 300ms", True, True)
ELSEWHERE = ("other: latency.p99 < 1ms", False, False)


@pytest.mark.parametrize("targets, kw, outcome, code, kinds", [
    ([TargetOutcome("a", summary(slos=[MET]))], {}, "passed", 0, []),
    ([TargetOutcome("a", summary(slos=[MET, ELSEWHERE]))], {}, "passed", 0, []),  # not applying: not judged
    ([TargetOutcome("a", summary(slos=[MISSED]))], {}, "failed", 1, [Kind.SLO]),
    ([TargetOutcome("a", summary(slos=[MISSED]), failed_fast="latency.p99 < 300ms")], {}, "failed", 1,
     [Kind.FAILED_FAST, Kind.SLO]),
    ([TargetOutcome("a", summary(ok=0, errors={"connect": 100}))], {}, "invalid", 3, [Kind.UNREACHABLE]),
    ([TargetOutcome("a", summary(ok=0, errors={"http_5xx": 100}))], {}, "passed", 0, []),  # reachable, just failing
    ([TargetOutcome("a", summary(limited=True, slos=[MISSED]))], {}, "invalid", 3, [Kind.GENERATOR_LIMITED, Kind.SLO]),
    ([TargetOutcome("a", summary(contended=[("burst", 0.38)], slos=[MISSED]))], {}, "invalid", 3,
     [Kind.HOST_CONTENDED, Kind.SLO]),
    ([TargetOutcome("a", {**summary(), "host": {"measured": False, "note": "no /proc"}})], {}, "passed", 0, []),
    ([TargetOutcome("a", error="the reference server exited")], {}, "invalid", 3, [Kind.TARGET_ERROR]),
    ([TargetOutcome("a", summary())], {"interrupted": True}, "invalid", 3, [Kind.INTERRUPTED]),
    ([TargetOutcome("a", summary())], {"expected_targets": 2}, "invalid", 3, [Kind.MISSING_TARGETS]),
    ([TargetOutcome("a", summary(), failed_fast="x")], {"expected_targets": 2}, "failed", 1, [Kind.FAILED_FAST]),
    ([TargetOutcome("a", summary())], {"regressions": [Reason(Kind.REGRESSION, "a", "a: latency.p50 regressed")]},
     "failed", 1, [Kind.REGRESSION]),
])
def test_verdicts(targets, kw, outcome, code, kinds):
    v = judge(targets, **kw)
    assert (v.outcome, v.exit_code) == (outcome, code)
    assert sorted(r.kind.value for r in v.reasons) == sorted(k.value for k in kinds)
    assert Verdict.from_json(v.to_json()) == v


@pytest.mark.parametrize("lagging, saturated, text", [
    (True, False, "generator-limited (send lag p99 12.0 ms > 5 ms)"),
    (False, True, "generator-limited (generator CPU saturated)"),  # only what held
    (True, True, "generator-limited (send lag p99 12.0 ms > 5 ms, generator CPU saturated)"),
])
def test_generator_limited_states_only_what_held(lagging, saturated, text):
    assert generator_limited_text(summary(lagging=lagging, saturated=saturated)["generator"]) == text


def test_invalid_reasons_come_before_failed_ones():
    v = judge([TargetOutcome("a", summary(limited=True, slos=[MISSED]))])
    assert [r.kind for r in v.reasons] == [Kind.GENERATOR_LIMITED, Kind.SLO]
    assert all(r.kind.invalid for r in v.reasons[:1]) and not v.reasons[1].kind.invalid


@pytest.mark.parametrize("contended, text", [
    ([("burst", 0.38)], "a: host contended: the reference server waited for a CPU 38% of the time it had work in "
                        "phase burst"),
    ([("baseline", 0.41), ("burst", 0.58), ("recovery", 0.39)],  # the worst phase, and how many more
     "a: host contended: the reference server waited for a CPU 58% of the time it had work in phase burst "
     "(and over the limit in 2 more phases)"),
])
def test_host_contended_names_the_process_its_share_and_the_phase(contended, text):
    v = judge([TargetOutcome("a", summary(contended=contended))])
    assert v.outcome == "invalid" and v.texts() == [text] and v.reasons[0].kind.invalid
