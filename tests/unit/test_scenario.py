"""Scenario validation: every mistake at once, each with file, line, column and field path."""

import json

import pytest

from loadgen.errors import ScenarioError
from loadgen.scenario.loader import load_scenario, scenario_schema
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import plan_phases
from tests.helpers import write_scenario

GOOD = """\
name: burst
target:
  url: http://127.0.0.1:8000/v1
  headers: {Authorization: "Bearer ${TEST_API_KEY}", X-Team: latency}
load:
  expected_qps: 100
  phases:
    - {name: warmup, duration: 500ms, qps: 20, record: false}
    - {name: baseline, duration: 30s, qps: 120%}
    - {name: ramp, duration: 2m, qps: {from: 10, to: 200}}
    - {name: closed, duration: 10s, concurrency: 8}
slo:
  - latency.p99 < 300ms
  - "baseline: error_rate < 0.1%"
"""


def test_a_good_scenario_resolves_durations_rates_and_env(tmp_path):
    loaded = load_scenario(write_scenario(tmp_path, GOOD), env={"TEST_API_KEY": "sk-secret"})
    sc = loaded.scenario
    assert sc.target.headers["Authorization"] == "Bearer sk-secret"
    plans = plan_phases(sc.load)
    assert [(p.start, p.end) for p in plans] == [(0, 0.5), (0.5, 30.5), (30.5, 150.5), (150.5, 160.5)]
    assert (plans[1].rate_start, plans[2].rate_start, plans[2].rate_end) == (120.0, 10.0, 200.0)
    assert plans[3].concurrency == 8 and not plans[0].recorded
    assert sc.slo[0].threshold == 0.3 and sc.slo[1].threshold == pytest.approx(0.001)
    # the copy written to the RunDir keeps the reference, never the value
    assert loaded.redacted()["target"]["headers"]["Authorization"] == "Bearer ${TEST_API_KEY}"
    assert loaded.secrets == ["sk-secret"]


def test_three_mistakes_are_reported_together_with_their_lines(tmp_path):
    text = GOOD.replace("qps: 120%", "qps: fast").replace("record: false", "record: false, colour: red")
    text = text.replace("latency.p99 < 300ms", "latncy.p99 < 300ms")
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, text), env={"TEST_API_KEY": "x"})
    errs = e.value.errors
    assert len(errs) == 3
    f = str(tmp_path / "s.yaml")
    assert errs[0].startswith(f"{f}:8:") and "load.phases[0].colour: unknown field" in errs[0]
    assert (errs[1].startswith(f"{f}:9:")
            and "load.phases[1].qps: expected a number or a percentage, got 'fast'" in errs[1])
    assert errs[2].startswith(f"{f}:13:") and "unknown metric 'latncy'" in errs[2]


@pytest.mark.parametrize(
    "change,expected",
    [
        (("api: openai-chat", "api: grpc"), "'kserve-v2' or 'triton-generate', got 'grpc'"),
        (("qps: 20,", "qps: -5,"), "non-negative"),
        (("qps: 20,", "qps: 1e12,"), "at most 1,000,000 requests per second"),
        (("qps: 20,", "qps: .nan,"), "finite"),
        (("duration: 500ms", "duration: soon"), "expected a duration"),
        (("expected_qps: 100", "expected_qps: 100\n  mode: openn"), "'open', 'closed' or 'trace'"),
        (("expected_qps: 100", "expected_qps: 100\n  mode: open"), "phases[3] ('closed'): load.mode is open, so every "
                                                                    "phase gives qps"),
        (("expected_qps: 100", "expected_qps: 100\n  mode: closed"), "phases[0] ('warmup'): load.mode is closed"),
        (("latency.p99 < 300ms", "latency.p42x < 300ms"), "unknown statistic"),
    ],
)
def test_each_kind_of_mistake_says_what_was_expected(tmp_path, change, expected):
    text = GOOD.replace("url: http://127.0.0.1:8000/v1", "url: http://127.0.0.1:8000/v1\n  api: openai-chat")
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, text.replace(*change)), env={"TEST_API_KEY": "x"})
    assert expected in str(e.value)
    assert str(e.value).startswith(str(tmp_path / "s.yaml") + ":")


def test_slo_scopes_must_name_a_phase_or_target(tmp_path):
    text = GOOD.replace('"baseline: error_rate < 0.1%"', '"basline: error_rate < 0.1%"')
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, text), env={"TEST_API_KEY": "x"})
    (err,) = e.value.errors
    assert ":14:5: slo[1]:" in err and "unknown scope 'basline'" in err and "baseline, closed, ramp, warmup" in err


def test_missing_environment_variable_is_named(tmp_path):
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, GOOD), env={})
    assert "s.yaml:4:" in str(e.value) and "TEST_API_KEY is not set" in str(e.value)


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, "name: x\nload: [\n  phases: {\n"), env={})
    assert "invalid YAML" in str(e.value) and "s.yaml:" in str(e.value)


def test_target_needs_exactly_one_kind(tmp_path):
    text = GOOD.replace("  url: http://127.0.0.1:8000/v1", "  url: http://x/v1\n  reference: {arch: naive}")
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, text), env={"TEST_API_KEY": "x"})
    assert "exactly one of url, reference, command" in str(e.value)


def test_json_schema_is_complete_enough_for_editors():
    schema = scenario_schema()
    json.dumps(schema)
    assert {"name", "target", "targets", "load", "slo", "workload"} <= set(schema["properties"])
    assert "Phase" in schema["$defs"] and "qps" in schema["$defs"]["Phase"]["properties"]


@pytest.mark.parametrize(
    "text,metric,stat,op,threshold,scope",
    [("latency.p99 < 300ms", "latency", "p99", "<", 0.3, None),
     ("burst: ttft.p50 <= 1s", "ttft", "p50", "<=", 1.0, "burst"),
     ("naive/burst: itl.p99.9 < 20ms", "itl", "p99.9", "<", 0.02, "naive/burst"),
     ("error_rate < 0.1%", "error_rate", None, "<", 0.001, None),
     ("goodput >= 0.99", "goodput", None, ">=", 0.99, None),
     ("achieved_qps > 95", "achieved_qps", None, ">", 95.0, None)],
)
def test_slo_lines_parse(text, metric, stat, op, threshold, scope):
    s = parse_slo(text)
    assert (s.metric, s.stat, s.op, s.scope) == (metric, stat, op, scope)
    assert s.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("text", ["latency < 1s", "latency.p99 = 1s", "qps.p99 < 1s", "error_rate < lots",
                                  "latency.p99 < fast"])
def test_bad_slo_lines_are_refused(text):
    with pytest.raises(ValueError):
        parse_slo(text)


DATASET = """\
name: d
target: {url: http://127.0.0.1:8000/v1}
workload:
  dataset: DATA
load:
  phases: [{name: main, duration: 1s, qps: 1}]
"""


@pytest.mark.parametrize("content, expect", [
    (None, ["cannot read dataset: No such file"]),
    ("", ["the dataset has no prompts"]),
    ('{"prompt": "a"}\n\n{"prompt": \n{"messages": []}\n', ["data.jsonl:3: expected a JSON object, got invalid JSON",
                                                          "data.jsonl:4: messages: expected a non-empty list"]),
    (b'{"prompt": "a"}\n{"prompt": "\xff"}\n', ["data.jsonl:2: not UTF-8 text"]),
])
def test_dataset_problems_are_scenario_errors_with_file_and_line(tmp_path, content, expect):
    """Issue 13, item 6: a missing, empty or broken dataset passed validation and failed the run with a traceback."""
    if isinstance(content, str):
        (tmp_path / "data.jsonl").write_text(content)
    elif content is not None:
        (tmp_path / "data.jsonl").write_bytes(content)
    path = write_scenario(tmp_path, DATASET.replace("DATA", "data.jsonl"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    errs = e.value.errors
    assert len(errs) == len(expect), errs
    for err, want in zip(errs, expect):
        assert err.startswith(f"{path}:4:12: workload.dataset: {tmp_path / 'data.jsonl'}") and want in err, err


def test_header_values_with_line_breaks_are_refused_without_showing_them(tmp_path):
    """Issue 13, item 9: CR/LF in a header value injected a header (lean transport); a secret with a trailing
    newline failed every request with no diagnostic. A validation error, after ${ENV} expansion, never quoting
    the value."""
    path = write_scenario(tmp_path, """\
name: h
target:
  url: http://127.0.0.1:8000/v1
  headers: {X-A: "v\\r\\nX-Injected: yes", Authorization: "Bearer ${KEY}", "Bad Name": v, X-Ok: "a\\tb"}
load: {phases: [{name: main, duration: 1s, qps: 1}]}
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={"KEY": "sk-secret-value-123\n"})
    (err,) = e.value.errors
    assert err.startswith(f"{path}:4:12: target.headers: ")
    assert "X-A: the value holds a line break" in err and "Authorization: the value holds a line break" in err
    assert "'Bad Name' is not a valid header name" in err and "X-Ok" not in err
    assert "sk-secret" not in err and "Injected" not in err


REF = """\
name: r
target:
  reference: {arch: naive, model: MODEL, backend: numpy, options: OPTIONS}
load: {phases: [{name: main, duration: 1s, qps: 1}]}
"""


@pytest.mark.parametrize("model, options, expect", [
    ("nosuch", "{}", ":3:35: target.reference.model: unknown model 'nosuch'; choose one of tiny"),
    ("tiny", "{no_such_knob: 3}", ":3:81: target.reference.options.no_such_knob: not a setting of the reference"),
    ("tiny", "{max_batch_size: lots}", ":3:83: target.reference.options.max_batch_size: invalid int value: 'lots'"),
    ("tiny", "{error_rate: 2}", ":3:79: target.reference.options.error_rate: must be within [0, 1], got 2.0"),
])
def test_reference_settings_are_checked_at_validation(tmp_path, model, options, expect):
    """Issue 13, item 13: an unknown reference model or option exited 3 at run time, not 2 at validation."""
    from loadgen.cli.checks import load_checked

    path = write_scenario(tmp_path, REF.replace("MODEL", model).replace("OPTIONS", options))
    load_scenario(path, env={})  # the loader alone does not know the server's settings ...
    with pytest.raises(ScenarioError) as e:
        load_checked(str(path), env={})  # ... the CLI asks the server (loadgen never imports it)
    (err,) = e.value.errors
    assert err.startswith(str(path)) and expect in err, err


@pytest.mark.parametrize("line, message", [
    ("goodput <= 500%", "between 0% and 100%"), ("error_rate < -1", "between 0% and 100%"),
    ("error_rate < nan", "expected a fraction"), ("achieved_qps > nan", "finite"), ("achieved_qps > inf", "finite"),
    ("error_rate < 0%", "can never be met"), ("goodput > 100%", "can never be met"),
    ("latency.p99 < 0ms", "can never be met"), ("latency.p99 < inf", "expected a duration"),
])
def test_impossible_or_non_finite_objectives_are_refused(line, message):
    with pytest.raises(ValueError, match=message):
        parse_slo(line)


def test_a_zero_timeout_is_refused_and_odd_phase_names_can_be_scopes(tmp_path):
    path = write_scenario(tmp_path, """\
name: t
target: {url: "http://127.0.0.1:8000/v1", timeout: 0s}
load:
  phases:
    - {name: "ramp (50%)", duration: 1s, qps: 1}
    - {name: "a:b", duration: 1s, qps: 1}
slo: ["ramp (50%): latency.p99 < 1s"]
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    errs = e.value.errors
    assert len(errs) == 2, errs
    assert "target.timeout: expected a duration above 0" in errs[0]
    assert "load.phases[1].name: a name may not hold ':'" in errs[1]
    ok = load_scenario(write_scenario(tmp_path, path.read_text().replace("timeout: 0s", "timeout: 1s")
                                      .replace('"a:b"', '"b"'), "ok.yaml"), env={})
    assert ok.scenario.slo[0].scope == "ramp (50%)"


def test_a_port_out_of_range_or_not_a_number_is_refused_at_validation(tmp_path):
    """Issue 27, item 7: ``http://127.0.0.1:99999/v1`` validated; every request then failed with ValueError and the
    run passed. Refused with the field's line (a target's url and metrics_url, a command's urls, ``--target``),
    never quoting the URL; a command target's '{port}' stays valid."""
    from click.testing import CliRunner

    from loadgen.cli.main import main

    path = write_scenario(tmp_path, """\
name: p
targets:
  - {name: a, url: "http://127.0.0.1:99999/v1"}
  - {name: b, url: "http://127.0.0.1:bad/v1", metrics_url: "http://127.0.0.1:0/metrics"}
  - name: c
    command: {run: [srv, "{port}"], url: "http://127.0.0.1:{port}/v1", ready_url: "http://127.0.0.1:70000/health"}
    metrics_url: "http://127.0.0.1:{port}/metrics"
load: {phases: [{name: main, duration: 1s, qps: 1}]}
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    errs = e.value.errors
    where = [err.split(": ", 2)[:2] for err in errs]
    assert where == [[f"{path}:3:20", "targets[0].url"], [f"{path}:4:20", "targets[1].url"],
                     [f"{path}:4:60", "targets[1].metrics_url"], [f"{path}:6:83", "targets[2].command.ready_url"]]
    assert all("a port from 1 to 65535" in err and "99999" not in err and "bad" not in err for err in errs), errs
    good = write_scenario(tmp_path, """\
name: g
target: {url: "http://127.0.0.1:8000/v1"}
load: {phases: [{name: main, duration: 1s, qps: 1}]}
""", name="g.yaml")
    r = CliRunner().invoke(main, ["run", str(good), "--target", "http://127.0.0.1:99999/v1",
                                  "--out", str(tmp_path / "runs")])
    assert r.exit_code == 2 and "--target: expected a port from 1 to 65535" in r.output, r.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("workload, phase, field, limit", [
    ("{prompts: {distinct: 1000000000000}}", "", "workload.prompts.distinct", "1000000"),
    ("{prompts: {input_tokens: {mean: 5, stddev: 1e9}}}", "", "workload.prompts.input_tokens.stddev", "1000000"),
    ("{prompts: {output_tokens: {mean: 5, min: 2000000}}}", "", "workload.prompts.output_tokens.min", "1000000"),
    ("{max_tokens: 10000000000}", "", "workload.max_tokens", "1000000"),
    ("{cancel: {fraction: 0.5, after_tokens: 1000000001}}", "", "workload.cancel.after_tokens", "1000000"),
    ("{conversations: {turns: {mean: 2, min: 5000}}}", "", "workload.conversations.turns", "at most 1000 turns"),
    ("{}", ", max_requests: 10000000000000", "load.phases[0].max_requests", "1000000000000"),
])
def test_every_count_and_length_has_a_maximum_checked_at_its_line(tmp_path, workload, phase, field, limit):
    """Issue 27, item 11: ``prompts.distinct: 1e12`` validated, then numpy raised ArrayMemoryError (exit 1).
    Every length and count of the model has a documented maximum, refused at validation with its line."""
    path = write_scenario(tmp_path, f"""\
name: m
target: {{url: "http://127.0.0.1:8000/v1"}}
workload: {workload}
load: {{phases: [{{name: main, duration: 1s, qps: 1{phase}}}]}}
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    (err,) = e.value.errors
    line = 4 if field.startswith("load") else 3
    assert err.startswith(f"{path}:{line}:") and f": {field}: " in err and limit in err, err


BOMB = "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))


@pytest.mark.timeout(20)
def test_a_yaml_bomb_or_a_value_holding_itself_anywhere_is_refused_at_its_line(tmp_path):
    """Issue 27, item 8: a 9-level bomb of aliases under extra_body made `latbench validate` run past 60 s at
    0.94 GB (each alias expanded as a copy); an alias inside its own anchor recursed without end. Both refused
    at their line and field, at once."""
    head = "name: b\ntarget:\n  url: http://127.0.0.1:8000/v1\n  extra_body:\n"
    tail = "load: {phases: [{name: main, duration: 1s, qps: 1}]}\n"
    path = write_scenario(tmp_path, head + f"    l0: &l0 [{', '.join(['lol'] * 9)}]\n" + BOMB + tail)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    (err,) = e.value.errors
    assert err.startswith(f"{path}:10:14: target.extra_body.l5[0]: more than 100,000 values with its aliases "
                          "expanded"), err
    path = write_scenario(tmp_path, head + "    tools: &t [{type: function, again: *t}]\n" + tail, "self.yaml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    assert e.value.errors == [f"{path}:5:40: target.extra_body.tools[0].again: the alias *t is inside its own anchor "
                              "(a value that holds itself)"]
    shared = head + "    a: &a {x: [1, 2, 3]}\n    b: *a\n    c: *a\n" + tail  # a few aliases are as before
    assert load_scenario(write_scenario(tmp_path, shared, "ok.yaml"), env={}).scenario.target.extra_body["c"] == {
        "x": [1, 2, 3]}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("nested, where", [
    ("load:\n  " + "- " * 5000 + "x\n", "3:129: load[0][0]: "),
    ("load: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "2:259: load.a.a: "),
])
def test_yaml_nested_thousands_of_levels_is_refused_at_its_line(tmp_path, nested, where):
    """Issue 27, item 12: YAML nested 5,000 levels raised RecursionError (a traceback, exit 1)."""
    path = write_scenario(tmp_path, "name: d\n" + nested)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    assert e.value.errors == [f"{path}:{where}nested more than 64 levels deep (mappings and lists)"]


@pytest.mark.timeout(20)
def test_a_device_a_pipe_or_an_oversized_file_is_refused_naming_it(tmp_path):
    """Issue 27, item 12: a scenario or dataset path of /dev/zero was read without limit (MemoryError, a
    traceback). The scenario, its dataset and its trace are read as regular files only, each up to a size cap:
    otherwise a clear error naming the file, exit 2."""
    import os

    from click.testing import CliRunner

    from loadgen.cli.main import main

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # no writer: reading it would wait for ever
    big = tmp_path / "big.yaml"
    big.write_text(GOOD + "#" * (8 << 20) + "\n")  # past the 8 MiB of a scenario file
    ds = write_scenario(tmp_path, DATASET.replace("DATA", "/dev/zero"), "ds.yaml")
    tr = write_scenario(tmp_path, "name: t\ntarget: {url: http://127.0.0.1:8000/v1}\n"
                                  "load: {mode: trace, file: /dev/zero}\n", "tr.yaml")
    r = CliRunner().invoke(main, ["validate", "/dev/zero", str(fifo), str(big), str(ds), str(tr)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.output.splitlines()
    device = "not a regular file (a device, a pipe or a socket)"
    for want in (f"/dev/zero: cannot read: {device}", f"{fifo}: cannot read: {device}",
                 f"{big}: cannot read: {big.stat().st_size:,} bytes, more than the 8 MiB a file may hold",
                 f"{ds}:4:12: workload.dataset: /dev/zero: cannot read dataset: {device}",
                 f"{tr}:3:27: load.trace.file: /dev/zero: cannot read the trace: {device}"):
        assert any(line.startswith(want) for line in lines), (want, r.output)


def test_control_characters_in_names_are_refused_with_their_line(tmp_path):
    """Issue 27, item 13: a name is written to junit.xml, summary.md and the terminal; a control character in it
    (ESC, BEL, a tab: escapes of a double-quoted YAML string) is refused where it stands."""
    path = write_scenario(tmp_path, """\
name: "run\\e]0;title\\a"
targets:
  - {name: "t\\tb", url: "http://127.0.0.1:8000/v1"}
load:
  phases:
    - {name: "p\\x9b2K", duration: 1s, qps: 1}
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    errs = e.value.errors
    assert len(errs) == 3, errs
    f = str(path)
    assert errs[0].startswith(f"{f}:1:") and "name: a name may not hold a control character" in errs[0]
    assert errs[1].startswith(f"{f}:3:") and "targets[0].name: a name may not hold a control character" in errs[1]
    assert errs[2].startswith(f"{f}:6:") and "load.phases[0].name: a name may not hold a control character" in errs[2]
