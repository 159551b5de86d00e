"""The verdict, table-driven: which reasons make a run invalid (exit 3), failed (exit 1) or passed (exit 0),
and that it survives the trip through meta.json."""

import pytest

from loadgen.analysis.verdict import Kind, Reason, TargetOutcome, Verdict, generator_limited_text, judge
from loadgen.records.results import Summary

SERVER = "the reference server"


def summary(**kw) -> Summary:
    """summary.json's model, as the verdict reads it (:func:`summary_json`'s)."""
    return Summary.model_validate(summary_json(**kw))


def summary_json(*, ok=100, count=100, errors=None, slos=(), limited=False, lagging=True, saturated=False,
                 contended=()) -> dict:
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
    # every request failed: the service's own failures fail the run; a set-up's (a 404, a 401) make it invalid
    ([TargetOutcome("a", summary(ok=0, errors={"http_5xx": 100}))], {}, "failed", 1, [Kind.ALL_FAILED]),
    ([TargetOutcome("a", summary(ok=0, errors={"http_4xx": 100}))], {}, "invalid", 3, [Kind.SETUP]),
    ([TargetOutcome("a", summary(ok=0, errors={"bad_response": 100}))], {}, "invalid", 3, [Kind.SETUP]),
    ([TargetOutcome("a", summary(ok=40, errors={"http_5xx": 60}))], {}, "passed", 0, []),  # a warning only
    ([TargetOutcome("a", error="404", error_kind=Kind.PREFLIGHT)], {}, "invalid", 3, [Kind.PREFLIGHT]),
    ([TargetOutcome("a", summary(limited=True, slos=[MISSED]))], {}, "invalid", 3, [Kind.GENERATOR_LIMITED, Kind.SLO]),
    ([TargetOutcome("a", summary(contended=[("burst", 0.38)], slos=[MISSED]))], {}, "invalid", 3,
     [Kind.HOST_CONTENDED, Kind.SLO]),
    ([TargetOutcome("a", Summary.model_validate({**summary_json(), "host": {"measured": False, "note": "no /proc"}}))],
     {}, "passed", 0, []),
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
    assert generator_limited_text(summary(lagging=lagging, saturated=saturated).generator) == text


def test_invalid_reasons_come_before_failed_ones():
    v = judge([TargetOutcome("a", summary(limited=True, slos=[MISSED]))])
    assert [r.kind for r in v.reasons] == [Kind.GENERATOR_LIMITED, Kind.SLO]
    assert all(r.kind.invalid for r in v.reasons[:1]) and not v.reasons[1].kind.invalid


def test_a_run_that_mostly_failed_without_an_error_objective_passes_with_a_warning():
    v = judge([TargetOutcome("a", summary(ok=40, errors={"http_5xx": 60}))])
    assert v.outcome == "passed" and [w.kind for w in v.warnings] == [Kind.MOSTLY_FAILED]
    assert "60 of 100 requests failed" in v.warnings[0].text and v.texts()[-1].startswith("warning: ")
    assert Verdict.from_json(v.to_json()) == v


def test_every_request_failed_names_the_commonest_failure_and_an_example():
    s = summary_json(ok=0, errors={"http_4xx": 100})
    s["failures"] = {"count": 100, "by_status": [{"error": "http_4xx", "status": 404, "count": 100}],
                     "example": {"error": "http_4xx", "status": 404, "detail": "Not Found\x1b]0;pwned\x07"}}
    (r,) = judge([TargetOutcome("a", Summary.model_validate(s))]).reasons
    assert r.kind == Kind.SETUP and "http_4xx (HTTP 404) on 100 of 100" in r.text and "Not Found" in r.text
    assert "\x1b" not in r.text and "\x07" not in r.text


def test_a_lost_worker_is_named_in_an_interrupted_reason_of_its_target():
    """Issue 27, item 20: which worker made the run incomplete is in the verdict, for its target."""
    from loadgen.records.workers import LostWorker

    lost = [LostWorker("local-1", "run", index=1, exit_code=-9, at=2.14, records=40),
            LostWorker("hostb:77", "run", index=2, host="hostb", pid=77, at=3.0, records=5),
            LostWorker("local-0", "start-up", pid=4242, exit_code=1)]
    s = Summary.model_validate({**summary_json(), "lost_workers": [w.to_json() for w in lost]})
    assert [LostWorker.from_json(w) for w in s.lost_workers] == lost
    v = judge([TargetOutcome("a", s)], interrupted=True)
    assert v.outcome == "invalid"
    assert [r.text for r in v.reasons if r.kind is Kind.INTERRUPTED and r.target == "a"] == [
        "a: Locust worker local-1 (index 1) died mid-run at 2.1 s (killed by SIGKILL); its 40 records received are "
        "kept, its later ones are missing",
        "a: Locust worker hostb:77 (index 2) died mid-run at 3.0 s (its heartbeat stopped); its 5 records received "
        "are kept, its later ones are missing",
        "a: Locust worker local-0 (pid 4242) exited during start-up (exit code 1); nothing was sent"]


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


@pytest.mark.parametrize("name, expr, slo, text", [
    ("naive", "latency.p99 < 1s", {}, "naive: latency.p99 < 1s (measured 400.0 ms)"),
    # scoped to the target already: its name once, not 'optimized: optimized: ...'
    ("optimized", "optimized: latency.p99 < 1s", {"scope": "optimized"}, "optimized: latency.p99 < 1s (measured"),
    ("naive", "naive/first: latency.max < 1s", {"scope": "naive/first"}, "naive/first: latency.max < 1s (measured"),
    ("opt", "optimized: latency.p99 < 1s", {"scope": "optimized"}, "opt: optimized: latency.p99 < 1s (measured"),
    # no value: what is missing and why, not 'measured no value'
    ("a", "recovery: latency.p99 < 1s", {"scope": "recovery", "value": None},
     "a: recovery: latency.p99 < 1s (not measured: the run stopped before recovery, so no request was recorded in it)"),
    ("a", "latency.p99 < 1s", {"value": None}, "a: latency.p99 < 1s (not measured: no request succeeded)"),
])
def test_a_missed_objective_names_its_target_once_and_says_why_it_has_no_value(name, expr, slo, text):
    s = summary_json(slos=[(expr, True, False)])
    s["slo"][0].update(slo)
    s["phases"] = {"recovery": {"count": 0}}
    s["complete"] = False
    (reason,) = [r for r in judge([TargetOutcome(name, Summary.model_validate(s))]).reasons if r.kind is Kind.SLO]
    assert reason.text.startswith(text), reason.text


def test_a_fresh_start_is_named_under_its_architecture_in_every_reason():
    """A cold-start study's targets are its starts (folders naive-start1, naive-start2): the verdict names a start
    as junit.xml and summary.md group it, 'naive (start 2)', never by its folder."""
    s = summary(contended=[("first_requests", 0.5)], slos=[("naive/first_requests: latency.max < 10s", True, False)])
    v = judge([TargetOutcome("naive-start2", s, group="naive", start=2)])
    assert [r.target for r in v.reasons] == ["naive-start2", "naive-start2"]  # the reasons still say which run
    assert v.texts()[0].startswith("naive (start 2): host contended: the reference server waited")
    assert v.texts()[1].startswith("naive/first_requests: latency.max < 10s (start 2: measured")
    assert not any("naive-start2" in t for t in v.texts())
