"""Repeated runs, table-driven: the t distribution, between-run intervals with known values, objectives judged
over runs (@median / @upper), the order runs are made in, and the verdict over a repeated run."""

import json
import math

import pytest

from benchmarks.report_speed import synthetic_repeated_rundir
from loadgen.analysis.repeated import (
    RepeatRun,
    between,
    group_slo,
    repeat_groups,
    repeats_summary,
    run_value,
    scale_for,
)
from loadgen.analysis.tdist import t_cdf, t_ppf, t_sf
from loadgen.analysis.verdict import Kind, TargetOutcome, judge
from loadgen.errors import ScenarioError
from loadgen.records.results import Meta, RepeatSlo, SloResult, Summary
from loadgen.records.rundir import REPEATS, SUMMARY
from loadgen.run.repeated import plan_runs
from loadgen.scenario.loader import load_scenario, scenario_schema
from loadgen.scenario.model import Target
from loadgen.scenario.slo import parse_slo

# ---- Student's t ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("df, q, expected", [
    (1, 0.975, 12.7062), (2, 0.975, 4.3027), (3, 0.975, 3.1824), (4, 0.975, 2.7764), (10, 0.975, 2.2281),
    (2, 0.95, 2.9200), (4, 0.95, 2.1318), (8, 0.95, 1.8595), (30, 0.95, 1.6973), (1e6, 0.975, 1.9600),
    (3, 0.05, -2.3534),
])
def test_t_quantiles_match_the_printed_tables(df, q, expected):
    assert t_ppf(q, df) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("t", [-5.0, -1.0, 0.0, 0.3, 1.732, 4.0, 30.0])
def test_t_cdf_matches_the_closed_forms_of_one_and_two_degrees_of_freedom(t):
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_sf(t, 2.5) == pytest.approx(1 - t_cdf(t, 2.5), abs=1e-12)


# ---- between-run intervals -----------------------------------------------------------------------------------

T2 = 4.302652729911275  # t(0.975, 2)


@pytest.mark.parametrize("values, scale, median, centre, ci", [
    # logs 0, ln2, ln4: mean ln2, sd ln2 -> geometric mean 2, interval 2 * exp(-+ t * ln2 / sqrt 3)
    ([0.001, 0.002, 0.004], "log", 0.002, 0.002,
     [0.002 * math.exp(-T2 * math.log(2) / math.sqrt(3)), 0.002 * math.exp(T2 * math.log(2) / math.sqrt(3))]),
    ([0.0, 0.01, 0.02], "linear", 0.01, 0.01, [0.0, 0.01 + T2 * 0.01 / math.sqrt(3)]),  # clipped at 0
    ([0.05, None, 0.05, 0.05], "log", 0.05, 0.05, [0.05, 0.05]),  # a run without a value is left out
    ([0.2], "log", 0.2, None, None),  # one run: no interval
    ([0.1, 0.3], "log", 0.2, math.sqrt(0.03), [math.sqrt(0.03) * math.exp(-12.7062 * math.log(3) / 2),
                                              math.sqrt(0.03) * math.exp(12.7062 * math.log(3) / 2)]),
    ([math.inf, 0.1, 0.1], "linear", 0.1, None, None),  # an infinite value: the median only
])
def test_between_run_interval(values, scale, median, centre, ci):
    b = between(values, scale)
    assert b.values == values and b.n == sum(v is not None for v in values) and b.scale == scale
    assert b.median == pytest.approx(median)
    if centre is None:
        assert b.centre is None and b.ci is None
    else:
        assert b.centre == pytest.approx(centre) and b.ci == pytest.approx(ci, rel=1e-4)


@pytest.mark.parametrize("scale", ["log", "linear"])
def test_equal_values_give_exactly_that_value_and_interval(scale):
    v = 47.56828460010884  # exp(log(v)) != v: a log-scale interval of equal runs must not exclude the value
    b = between([v, v], scale)
    assert b.centre == v and b.ci == [v, v] and b.ci[0] <= b.median <= b.ci[1]


@pytest.mark.parametrize("metric, values, scale", [
    ("latency", [0.1, 0.2], "log"), ("achieved_qps", [10.0, 11.0], "log"), ("error_rate", [0.1, 0.2], "linear"),
    ("goodput", [0.9, 1.0], "linear"), ("latency", [0.0, 0.2], "linear"), ("latency", [math.inf, 0.2], "linear"),
])
def test_times_and_rates_on_a_log_scale_fractions_on_their_own(metric, values, scale):
    assert scale_for(metric, values) == scale


# ---- objectives over runs ------------------------------------------------------------------------------------

def row(value, applies=True) -> SloResult:
    return SloResult(expr="x", applies=applies, passed=True, value=value)


@pytest.mark.parametrize("line, judge, values, passed, judged", [
    ("latency.p99 < 300ms", "median", [0.25, 0.29, 0.40], True, 0.29),  # the median run meets it
    ("latency.p99 < 300ms", "upper", [0.25, 0.29, 0.40], False, None),  # the interval's upper bound does not
    ("latency.p99 < 300ms @upper", "median", [0.25, 0.29, 0.40], False, None),  # the line's own judgement wins
    ("latency.p99 < 300ms @median", "upper", [0.25, 0.29, 0.40], True, 0.29),
    ("latency.p99 < 300ms", "upper", [0.20, 0.201, 0.202], True, None),  # tight runs: the bound is close
    ("achieved_qps > 95 @upper", "median", [100.0, 101.0, 99.0], True, None),  # '>': the lower bound is judged
    ("achieved_qps > 95 @upper", "median", [100.0, 130.0, 80.0], False, None),
    ("latency.p99 < 300ms", "median", [0.25, None, 0.2], False, None),  # a run without a value fails it
])
def test_objectives_judged_over_runs(line, judge, values, passed, judged):
    slo = parse_slo(line)
    r = group_slo(slo, [row(v) for v in values], judge)
    assert r.applies and r.passed is passed, r
    assert r.judge == (slo.judge or judge)
    assert r.values == values
    if judged is not None:
        assert r.value == pytest.approx(judged)
    if None in values:
        assert r.value is None and "run 2" in r.reason
    elif r.judge == "upper":
        assert r.value == pytest.approx(r.ci[1] if slo.op == "<" else r.ci[0])
        assert "bound of the between-run 95% interval over 3 runs" in r.basis


def test_an_objective_for_another_target_does_not_apply():
    r = group_slo(parse_slo("b: latency.p99 < 300ms"), [row(None, applies=False)] * 3, "median")
    assert not r.applies and r.passed


@pytest.mark.parametrize("text, judge", [("latency.p99 < 300ms @upper", "upper"),
                                         ("latency.p99<300ms@median", "median"),
                                         ("burst: error_rate < 1% @upper", "upper"), ("ttft.p50 < 1s", None)])
def test_slo_lines_take_a_judgement_suffix(text, judge):
    assert parse_slo(text).judge == judge


@pytest.mark.parametrize("text, match", [("latency.p99 < 300ms @max", "expected one of @median, @upper"),
                                         ("latency.p99 < 300ms @", "expected one of @median, @upper"),
                                         ("latency.p99 < 300ms @ upper x", "expected an objective such as")])
def test_an_unknown_judgement_is_an_error_naming_the_choices(text, match):
    with pytest.raises(ValueError, match=match):
        parse_slo(text)


# ---- repeats.json from real RunDir files ---------------------------------------------------------------------

def test_repeats_json_holds_each_runs_summary_values(tmp_path):
    root = synthetic_repeated_rundir(tmp_path / "r", {"a": [0.05, 0.06, 0.055], "b": [0.1, 0.12, 0.11]}, rows=600)
    rep = json.loads((root / REPEATS).read_text())
    assert rep["order"] == ["a-rep1", "b-rep1", "a-rep2", "b-rep2", "a-rep3", "b-rep3"]
    assert rep["runs"] == 3 and set(rep["targets"]) == {"a", "b"}
    for group, g in rep["targets"].items():
        sums = [Summary.model_validate_json((root / f"{group}-rep{k}" / SUMMARY).read_text()) for k in (1, 2, 3)]
        for key, stat in g["stats"].items():
            assert stat["values"] == [run_value(s, key) for s in sums], key
            assert stat["median"] == pytest.approx(sorted(stat["values"])[1])
        p99 = g["stats"]["latency.p99"]
        assert p99["ci"][0] < p99["centre"] < p99["ci"][1] and p99["scale"] == "log"
        (lat, err) = g["slo"]
        assert lat["values"] == [s.slo[0].value for s in sums] and lat["value"] == pytest.approx(p99["median"])
    groups = repeat_groups(Meta.model_validate_json((root / "meta.json").read_text()).targets)
    assert [e.dir for e in groups["a"]] == ["a-rep1", "a-rep2", "a-rep3"]


def test_repeats_summary_of_runs_that_did_not_all_run():
    s = Summary.model_validate({"overall": {"metrics": {"latency": {"n": 10, "percentiles": {"p50": {"value": 0.1}},
                                                                     "mean": 0.1}},
                                            "error_rate": 0.0, "achieved_qps": 9.0}, "slo": [row(0.1).to_json()]})
    rep = repeats_summary([RepeatRun("a", 1, "a-rep1", s), RepeatRun("a", 2, "a-rep2", None)],
                          [parse_slo("latency.p50 < 1s")], "median")
    g = rep["targets"]["a"]
    assert [r["ran"] for r in g["runs"]] == [True, False]
    assert g["stats"]["latency.p50"]["values"] == [0.1, None] and g["stats"]["latency.p50"]["ci"] is None
    assert not g["slo"][0]["passed"] and "run 2" in g["slo"][0]["reason"]


# ---- the order of runs ---------------------------------------------------------------------------------------

URL = Target(name="u", url="http://127.0.0.1:1/v1")
REF = Target(name="r", reference={"arch": "naive"})


@pytest.mark.parametrize("targets, starts, repeats, names", [
    ([URL, REF], 1, 1, ["u", "r"]),
    ([URL, REF], 1, 3, ["u-rep1", "r-rep1", "u-rep2", "r-rep2", "u-rep3", "r-rep3"]),  # interleaved
    ([URL, REF], 2, 1, ["u", "r-start1", "r-start2"]),  # a URL has no fresh start to study: it runs once
    ([REF], 3, 1, ["r-start1", "r-start2", "r-start3"]),
])
def test_runs_are_planned_round_by_round(targets, starts, repeats, names):
    plan = plan_runs(targets, starts, repeats)
    assert [s.name for s in plan] == names
    for s in plan:
        assert targets[s.index] is s.target
        if repeats > 1:
            assert s.meta_fields() == {"group": s.target.name, "repetition": int(s.name[-1])}
        elif s.start is not None:
            assert s.meta_fields() == {"group": s.target.name, "start": int(s.name[-1])}
        else:
            assert s.meta_fields() == {}


def test_repeat_and_starts_are_one_model_give_one(tmp_path):
    with pytest.raises(ValueError):
        plan_runs([REF], 2, 2)
    p = tmp_path / "s.yaml"
    p.write_text("name: x\ntarget: {url: 'http://127.0.0.1:1/v1'}\nload:\n  starts: 2\n"
                 "  phases: [{name: m, duration: 1s, qps: 1}]\nrepeat: {runs: 3, pause: 5s, judge: upper}\n")
    with pytest.raises(ScenarioError, match="give one of them"):
        load_scenario(p)
    p.write_text("name: x\ntarget: {url: 'http://127.0.0.1:1/v1'}\nload:\n  phases: [{name: m, duration: 1s, qps: 1}]\n"
                 "repeat: {runs: 3, pause: 5s, judge: highest}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert any(":5:" in line and "repeat.judge" in line for line in e.value.errors), e.value.errors


# ---- the verdict ---------------------------------------------------------------------------------------------

def summary_with(slo_passed: bool) -> Summary:
    return Summary.model_validate(
        {"overall": {"count": 10, "ok": 10, "errors": {}}, "generator_limited": False, "generator": {},
         "slo": [{"expr": "latency.p99 < 300ms", "applies": True, "passed": slo_passed, "value": 0.4,
                  "stat": "p99", "metric": "latency"}]})


@pytest.mark.parametrize("runs_pass, group_pass, outcome", [
    ([False, True, True], True, "passed"),  # one run missed it, the median run did not: judged over the runs
    ([True, True, True], False, "failed"),
    ([False, False, False], True, "passed"),  # the group's judgement is the verdict's, whatever each run says
])
def test_a_repeated_run_is_judged_on_its_groups(runs_pass, group_pass, outcome):
    runs = [TargetOutcome(f"a-rep{k}", summary_with(p), slo=[]) for k, p in enumerate(runs_pass, 1)]
    group = TargetOutcome("a", slo=[RepeatSlo(expr="latency.p99 < 300ms", applies=True, passed=group_pass,
                                              value=0.31, stat="p99", metric="latency",
                                              basis="the median of 3 runs")])
    v = judge(runs, groups=[group], expected_targets=3)
    assert v.outcome == outcome
    if outcome == "failed":
        (r,) = v.reasons
        assert r.kind is Kind.SLO and r.target == "a" and "310.0 ms, the median of 3 runs" in r.text


def test_the_schema_describes_repeat():
    schema = scenario_schema()
    rep = schema["$defs"]["Repeat"]["properties"]
    assert "repeat" in schema["properties"] and set(rep) == {"runs", "pause", "judge"}
    assert rep["judge"]["enum"] == ["median", "upper"] and "between-run" in rep["judge"]["description"]
