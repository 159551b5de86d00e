"""Trace replay without a server: reading traces (Mooncake's JSON lines, latbench's CSV) with located errors, the
slice and its arrival times, sharding them, fitting lengths to a limit, prompts made of shared hash-id blocks
(with a real tokenizer), and the trace generator."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from loadgen.cli.main import main
from loadgen.errors import ScenarioError
from loadgen.scenario.loader import load_scenario, scenario_schema
from loadgen.scenario.model import Load, TokenDist, Trace, Workload
from loadgen.scenario.tokenizer import load_tokenizer
from loadgen.scenario.trace import Limits, TraceError, fit, read_trace
from loadgen.scenario.trace_prompts import make_trace_prompts
from loadgen.schedule.arrivals import arrivals, plan_phases
from loadgen.schedule.sharding import open_counts, plans_from_wire, plans_to_wire, seq_bases, shard_arrivals
from loadgen.schedule.tracegen import generate_trace, write_trace

MOONCAKE = [  # as Mooncake's trace writes them, out of time order on purpose
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [46, 47, 48]},
    {"timestamp": 2500, "input_length": 1000, "output_length": 7, "hash_ids": [46, 47, 49]},
    {"timestamp": 1005, "input_length": 300, "output_length": 3, "hash_ids": [46]},
    {"timestamp": 4000, "input_length": 50, "output_length": 3, "hash_ids": [50]},
    {"timestamp": 2500, "input_length": 700, "output_length": 9, "hash_ids": [51, 47]},
]


def jsonl(tmp_path: Path, rows, name="t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def trace_scenario(tmp_path: Path, load: str, extra: str = "") -> Path:
    """A scenario whose ``load:`` block is ``load`` (lines indented by two spaces)."""
    text = f'name: t\ntarget: {{url: "http://127.0.0.1:9/v1"}}\n{extra}\nload:\n{load}\n'
    text += "slo: [trace: latency.p99 < 1s]\n"  # the trace's one phase is named trace
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


# -- reading ------------------------------------------------------------------------------------------------

def test_mooncake_lines_are_read_as_they_are_in_time_order(tmp_path):
    data = read_trace(jsonl(tmp_path, MOONCAKE))
    assert data.times_ms.tolist() == [0, 1005, 2500, 2500, 4000]
    assert data.lines.tolist() == [1, 3, 2, 5, 4]  # ties keep file order
    assert data.input_tokens.tolist() == [1100, 300, 1000, 700, 50]
    assert data.output_tokens.tolist() == [5, 3, 7, 9, 3]
    assert [data.hash_ids(i).tolist() for i in range(5)] == [[46, 47, 48], [46], [46, 47, 49], [51, 47], [50]]


def test_csv_with_latbench_names_reads_like_the_jsonl(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("\ufefftimestamp,input_tokens,output_tokens,hash_ids\n"
                 "0,1100,5,46 47 48\n1005,300,3,[46]\n\n2500,1000,7,\"46,47,49\"\n4000,50,3,\n")
    data = read_trace(p)
    assert data.times_ms.tolist() == [0, 1005, 2500, 4000]
    assert data.input_tokens.tolist() == [1100, 300, 1000, 50]
    assert [data.hash_ids(i).tolist() for i in range(4)] == [[46, 47, 48], [46], [46, 47, 49], []]


@pytest.mark.parametrize("line,message", [
    ({"timestamp": -1, "input_length": 5, "output_length": 1}, "timestamp: expected a number of milliseconds >= 0"),
    ({"timestamp": "soon", "input_length": 5, "output_length": 1}, "timestamp: expected a number"),
    ({"timestamp": 1, "input_length": 0, "output_length": 1}, "input_length: expected a positive integer, got 0"),
    ({"timestamp": 1, "input_tokens": 2.5, "output_length": 1}, "input_length: expected a positive integer"),
    ({"timestamp": 1, "input_length": 5}, "output_length: required field is missing (or output_tokens)"),
    ({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}, "hash_ids: expected a list"),
    ({"timestamp": 1, "input_length": 5, "input_tokens": 5, "output_length": 1}, "the same field is given twice"),
    ("{not json", "expected a JSON object, got invalid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
])
def test_a_bad_line_is_named_by_file_line_and_field(tmp_path, line, message):
    p = jsonl(tmp_path, [MOONCAKE[0], line])
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert len(e.value.errors) == 1
    assert e.value.errors[0].startswith(f"{p}:2: ") and message in e.value.errors[0]


def test_csv_mistakes_are_located(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_length\n1,2\n")
    with pytest.raises(TraceError, match=r"t.csv:1: output_length: missing from the CSV header"):
        read_trace(p)
    p.write_text("timestamp,input_length,output_length\n1,2,3\n4,five,6\n7,8\n")
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert e.value.errors == [f"{p}:3: input_length: expected a number, got 'five'",
                              f"{p}:4: expected 3 columns as the header names, got 2"]


def test_many_bad_lines_are_listed_up_to_a_limit_then_counted(tmp_path):
    p = jsonl(tmp_path, [{"timestamp": 1, "input_length": 0, "output_length": 1}] * 25)
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert len(e.value.errors) == 21 and e.value.errors[-1].endswith("... and 5 more problems")


def test_an_empty_or_missing_trace_says_so(tmp_path):
    with pytest.raises(TraceError, match="has no requests"):
        read_trace(jsonl(tmp_path, []))
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(tmp_path / "missing.jsonl")


# -- the scenario -------------------------------------------------------------------------------------------

def test_mode_trace_with_file_and_speed_under_load_is_the_trace_block(tmp_path):
    jsonl(tmp_path, MOONCAKE)
    loaded = load_scenario(trace_scenario(tmp_path, "  mode: trace\n  file: t.jsonl\n  speed: 2.0"))
    spec = loaded.scenario.load.trace
    assert spec.speed == 2.0 and spec.block_tokens == 512 and spec.too_long == "clip"
    assert spec.file == str((tmp_path / "t.jsonl").resolve())  # every sender process reads the same file
    assert loaded.raw["load"]["file"] == "t.jsonl"  # the RunDir's copy is as written
    same = load_scenario(trace_scenario(tmp_path, "  trace: {file: t.jsonl, speed: 2.0}")).scenario.load
    assert same.trace == spec and same.phase_names() == ["trace"]


@pytest.mark.parametrize("load,message", [
    ("  mode: trace", "load.mode trace needs a trace"),
    ("  mode: open\n  trace: {file: t.jsonl}", "a trace is given"),
    ("  trace: {file: t.jsonl}\n  phases: [{name: a, duration: 1s, qps: 1}]", "has no phases or sweep"),
    ("  mode: trace\n  file: t.jsonl\n  speed: 0", "load.trace.speed: Input should be greater than 0"),
    ("  trace: {file: t.jsonl, start: soon}", "load.trace.start"),
    ("  file: t.jsonl", "load.file: unknown field"),
])
def test_trace_mistakes_in_the_scenario_are_located(tmp_path, load, message):
    jsonl(tmp_path, MOONCAKE)
    with pytest.raises(ScenarioError) as e:
        load_scenario(trace_scenario(tmp_path, load))
    assert message in str(e.value) and str(e.value).startswith(str(tmp_path / "s.yaml") + ":")


def test_a_bad_trace_line_is_reported_with_the_scenario_line_and_its_own(tmp_path):
    jsonl(tmp_path, [MOONCAKE[0], {"timestamp": 3, "input_length": -4, "output_length": 1}])
    with pytest.raises(ScenarioError) as e:
        load_scenario(trace_scenario(tmp_path, "  mode: trace\n  file: t.jsonl"))
    assert e.value.errors == [f"{tmp_path / 's.yaml'}:6:9: load.trace.file: {tmp_path / 't.jsonl'}:2: "
                              "input_length: expected a positive integer, got -4"]


def test_a_replay_past_seven_days_is_refused_naming_the_first_late_row(tmp_path):
    """Issue 27, item 10: a timestamp of 1e15 ms validated (a run of 31,700 years; a phase lasts at most 7 days).
    The same cap for a replay, at the trace row's line; what start, speed or duration leave within it is valid."""
    rows = [MOONCAKE[0], {"timestamp": 1e15, "input_length": 5, "output_length": 1}, MOONCAKE[1],
            {"timestamp": 2e15, "input_length": 5, "output_length": 1}]
    jsonl(tmp_path, rows)
    with pytest.raises(ScenarioError) as e:
        load_scenario(trace_scenario(tmp_path, "  mode: trace\n  file: t.jsonl"))
    (err,) = e.value.errors
    assert err.startswith(f"{tmp_path / 's.yaml'}:6:9: load.trace.file: {tmp_path / 't.jsonl'}:2: timestamp: 1e+15 "
                          "ms is due 11,574,074.1 days into the replay (and 1 more after it); a replay lasts at most "
                          "7 days"), err
    jsonl(tmp_path, [MOONCAKE[0], {"timestamp": 8 * 86400e3, "input_length": 5, "output_length": 1}])
    with pytest.raises(ScenarioError, match="t.jsonl:2: timestamp: 6.912e"):
        load_scenario(trace_scenario(tmp_path, "  mode: trace\n  file: t.jsonl"))
    for fits in ("  mode: trace\n  file: t.jsonl\n  speed: 2", "  mode: trace\n  file: t.jsonl\n  duration: 1h",
                 "  mode: trace\n  file: t.jsonl\n  start: 48h"):
        load_scenario(trace_scenario(tmp_path, fits))


def test_a_trace_length_past_a_million_tokens_is_refused_at_its_line(tmp_path):
    """Issue 27, item 11: an input_length of 1e10 validated; every request then failed with MemoryError."""
    p = jsonl(tmp_path, [MOONCAKE[0], {"timestamp": 1, "input_length": 1e10, "output_length": 1},
                         {"timestamp": 2, "input_length": 5, "output_tokens": 1_000_001},
                         {"timestamp": 3, "input_length": 1_000_000, "output_length": 1_000_000}])
    with pytest.raises(TraceError) as e:
        read_trace(p)
    assert e.value.errors == [f"{p}:2: input_length: expected at most 1,000,000 tokens, got 10000000000",
                              f"{p}:3: output_length: expected at most 1,000,000 tokens, got 1000001"]


@pytest.mark.parametrize("workload,message", [("{dataset: t.jsonl}", "a trace replay makes its prompts"),
                                              ("{conversations: {turns: 3}}", "sends each of its requests once")])
def test_a_dataset_or_conversations_with_a_trace_are_refused(tmp_path, workload, message):
    jsonl(tmp_path, MOONCAKE)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(trace_scenario(tmp_path, "  mode: trace\n  file: t.jsonl", f"workload: {workload}"))


def test_the_schema_describes_the_trace_fields():
    trace = scenario_schema()["$defs"]["Trace"]["properties"]
    assert {"file", "speed", "start", "duration", "max_requests", "block_tokens", "too_long", "max_model_len",
            "max_input_tokens"} <= set(trace)
    assert all(trace[k].get("description") for k in trace)
    assert "trace" in json.dumps(scenario_schema()["$defs"]["Load"]["properties"]["mode"])


# -- arrivals ------------------------------------------------------------------------------------------------

def plan_of(path: Path, **kw):
    return plan_phases(Load(trace=Trace(file=str(path), **kw)))[0]


@pytest.mark.parametrize("kw,expect_ms,speed,end", [
    ({}, [0, 1005, 2500, 2500, 4000], 1.0, 4.001),
    ({"speed": 2.0}, [0, 1005, 2500, 2500, 4000], 2.0, 2.001),
    ({"start": "first", "speed": 0.5}, [0, 1005, 2500, 2500, 4000], 0.5, 8.001),
    ({"start": 1.0, "duration": 2.0}, [5, 1500, 1500], 1.0, 2.0),  # trace time [1 s, 3 s), from its start
    ({"start": "1s", "max_requests": 2}, [5, 1500], 1.0, 1.501),
])
def test_arrivals_are_the_trace_times_shifted_and_divided_by_speed(tmp_path, kw, expect_ms, speed, end):
    plan = plan_of(jsonl(tmp_path, MOONCAKE), **kw)
    t = np.concatenate(list(arrivals(plan, seed=123)))
    assert plan.name == "trace" and plan.start == 0.0 and math.isclose(plan.end, end)
    assert np.array_equal(t, np.asarray(expect_ms, dtype=float) / (1000.0 * speed))  # exactly: no seed, no noise
    assert math.isclose(plan.expected_count(), len(expect_ms))


def test_a_window_without_requests_is_an_error(tmp_path):
    with pytest.raises(TraceError, match="no request of the trace falls in the replayed window"):
        plan_of(jsonl(tmp_path, MOONCAKE), start="5s")


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_trace_arrivals_are_sharded_like_any_open_loop_schedule(tmp_path, n):
    rows = generate_trace(500, 200.0, input_tokens=TokenDist(mean=10), output_tokens=TokenDist(mean=2), seed=3)
    path = write_trace(rows, tmp_path / "g.jsonl")
    plans = plans_from_wire(json.loads(json.dumps(plans_to_wire([plan_of(path)]))))  # as Locust workers get them
    assert open_counts(plans, 0, 1.0) == [500] and seq_bases([500]) == [0]
    got = {}
    for k in range(n):
        for times, first, stride in shard_arrivals(plans[0], k, n, seed=9, burstiness=1.0, base=0):
            for j, t in enumerate(times.tolist()):
                seq = first + j * stride
                assert seq % n == k and seq not in got
                got[seq] = t
    assert sorted(got) == list(range(500))
    assert [got[i] for i in range(500)] == [r["timestamp"] / 1000.0 for r in sorted(rows, key=lambda r: r["timestamp"])]


# -- fitting to the target -----------------------------------------------------------------------------------

@pytest.mark.parametrize("inp,out,limits,want", [
    (100, 10, Limits(2048), (100, 10)),
    (3000, 50, Limits(2048), (1998, 50)),  # the input gives way to the whole output
    (3000, 50, Limits(2048, added=24), (1974, 50)),  # what the server adds counts
    (10, 5000, Limits(2048), (10, 2038)),  # an output that alone fills the context gives way
    (3000, 5000, Limits(2048), (2047, 1)),
    (600, 10, Limits(None, 512), (512, 10)),
    (600, 10, Limits(560, 512), (512, 10)),
    (600, 100, Limits(560, 512), (460, 100)),
])
def test_lengths_are_clipped_to_fit(inp, out, limits, want):
    i1, o1 = fit(np.array([inp]), np.array([out]), limits)
    assert (int(i1[0]), int(o1[0])) == want


def test_too_long_refuse_stops_validation_naming_each_line(tmp_path):
    jsonl(tmp_path, MOONCAKE)
    load = "  mode: trace\n  file: t.jsonl\n  too_long: refuse\n  max_model_len: 1024"
    with pytest.raises(ScenarioError) as e:
        load_scenario(trace_scenario(tmp_path, load))
    f = tmp_path / "t.jsonl"
    assert [m.split("load.trace.file: ", 1)[1] for m in e.value.errors] == [
        f"{f}:1: input_length 1100 + output_length 5 > max_model_len 1024 (load.trace; too_long: refuse)"]
    load_scenario(trace_scenario(tmp_path, load.replace("refuse", "clip")))  # clipping is fine


# -- prompts -------------------------------------------------------------------------------------------------

def common(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def check_blocks(prompts, data, n, block_tokens):
    """Every prompt is its blocks' texts, the last cut; equal hash ids at a place give the same block there and
    different ones a different block, whose texts differ from their first characters."""
    texts = [prompts.get(i).text for i in range(n)]
    blocks = [prompts.blocks_of(i) for i in range(n)]
    for i in range(n):
        whole = "".join(prompts.block_text(k) for k in blocks[i][:-1])
        assert texts[i].startswith(whole) and prompts.block_text(blocks[i][-1]).startswith(texts[i][len(whole):])
        ids = data.hash_ids(i).tolist()
        assert len(blocks[i]) == math.ceil(data.input_tokens[i] / block_tokens)
        for j in range(i):
            for a, b, ha, hb in zip(blocks[i], blocks[j], ids, data.hash_ids(j).tolist()):
                assert (a == b) == (ha == hb)
    distinct = {k: prompts.block_text(k) for bl in blocks for k in bl}
    assert len(set(distinct.values())) == len(distinct)
    firsts = [t[:20] for t in distinct.values()]
    assert len(set(firsts)) == len(firsts)  # two blocks part at once: no accidental shared prefix
    return texts


def test_prompts_share_exactly_the_blocks_their_hash_ids_share_with_a_real_tokenizer(tmp_path, bpe_dir):
    path = jsonl(tmp_path, MOONCAKE)
    tok = load_tokenizer(str(bpe_dir), Path("."))
    prompts = make_trace_prompts(Trace(file=str(path)), Workload(), 0, Limits(), tok)
    data = read_trace(path)
    texts = check_blocks(prompts, data, 5, 512)
    assert [tok.count(t) for t in texts] == [1100, 300, 1000, 700, 50]  # exactly the trace's lengths
    assert [prompts.get(i).input_tokens for i in range(5)] == [1100, 300, 1000, 700, 50] and prompts.inexact == 0
    assert [prompts.get(i).max_tokens for i in range(5)] == [5, 3, 7, 9, 3]
    assert all(prompts.get(i).counted_by == "tokenizer" for i in range(5))
    b46 = prompts.block_text(prompts.blocks_of(0)[0])
    b47 = prompts.block_text(prompts.blocks_of(0)[1])
    assert tok.count(b46) == tok.count(b47) == 512
    assert texts[0].startswith(b46 + b47) and len(texts[0]) > len(b46 + b47)  # 46, 47, then 48 cut
    assert texts[2].startswith(b46) and b47.startswith(texts[2][len(b46):])  # 46, then 47 cut: a prefix of 0
    assert common(texts[0], texts[2]) == len(texts[2]) and common(texts[0], texts[1]) == len(texts[1])
    assert common(texts[3], texts[0]) < 40  # [51, 47]: the same second block, after a different first one
    assert common(texts[4], texts[0]) < 40


def test_without_a_tokenizer_blocks_are_four_characters_a_token(tmp_path):
    path = jsonl(tmp_path, MOONCAKE)
    prompts = make_trace_prompts(Trace(file=str(path)), Workload(max_tokens=4), 0, Limits())
    texts = check_blocks(prompts, read_trace(path), 5, 512)
    assert [len(t) for t in texts] == [4400, 1200, 4000, 2800, 200]
    assert [prompts.get(i).max_tokens for i in range(5)] == [4] * 5  # workload.max_tokens replaces the trace's
    again = make_trace_prompts(Trace(file=str(path)), Workload(max_tokens=4), 0, Limits())
    assert [again.get(i).text for i in range(5)] == texts  # the same prompts in every sender


def test_clipped_prompts_keep_their_leading_blocks(tmp_path, bpe_dir):
    path = jsonl(tmp_path, MOONCAKE)
    tok = load_tokenizer(str(bpe_dir), Path("."))
    prompts = make_trace_prompts(Trace(file=str(path), block_tokens=256), Workload(), 0, Limits(700, added=3), tok)
    assert [prompts.get(i).input_tokens for i in range(5)] == [692, 300, 690, 688, 50]
    assert [tok.count(prompts.get(i).text) for i in range(5)] == [692, 300, 690, 688, 50]
    assert prompts.clipped == 3 and prompts.get(0).added_tokens == -1


def test_rows_without_hash_ids_share_nothing(tmp_path):
    path = jsonl(tmp_path, [{"timestamp": i, "input_length": 600, "output_length": 1} for i in range(4)])
    prompts = make_trace_prompts(Trace(file=str(path), block_tokens=100), Workload(), 0, Limits())
    texts = [prompts.get(i).text for i in range(4)]
    assert len({b for i in range(4) for b in prompts.blocks_of(i)}) == 24
    assert max(common(a, b) for a in texts for b in texts if a is not b) < 40


# -- the generator --------------------------------------------------------------------------------------------

def test_generated_traces_follow_mooncakes_rules(tmp_path):
    rows = generate_trace(2000, 50.0, input_tokens=TokenDist(mean=300, stddev=100), output_tokens=TokenDist(mean=20),
                          groups=4, prefix_tokens=200, block_tokens=64, seed=5)
    t = [r["timestamp"] for r in rows]
    assert t == sorted(t) and all(isinstance(x, int) for x in t)
    assert 45 < len(rows) / (t[-1] / 1000) < 55  # Poisson at 50 req/s
    for r in rows:
        assert len(r["hash_ids"]) == math.ceil(r["input_length"] / 64) and r["input_length"] > 200
    firsts: dict[tuple, int] = {}
    seen: dict[int, tuple] = {}
    for r in rows:
        group = tuple(r["hash_ids"][:3])  # 200 tokens: 3 whole blocks of 64 are the group's
        firsts[group] = firsts.get(group, 0) + 1
        for pos, h in enumerate(r["hash_ids"]):
            assert seen.setdefault(h, (pos, tuple(r["hash_ids"][:pos]))) == (pos, tuple(r["hash_ids"][:pos]))
    assert len(firsts) == 4 and min(firsts.values()) > 400  # four groups, drawn uniformly
    assert generate_trace(2000, 50.0, input_tokens=TokenDist(mean=300, stddev=100),
                          output_tokens=TokenDist(mean=20), groups=4, prefix_tokens=200, block_tokens=64,
                          seed=5) == rows


def test_generate_and_show_from_the_command_line(tmp_path):
    out = tmp_path / "g.csv"
    r = CliRunner().invoke(main, ["trace", "generate", str(out), "-n", "50", "--qps", "5", "--groups", "2",
                                  "--prefix-tokens", "512", "--input-tokens", "100", "--seed", "1"])
    assert r.exit_code == 0, r.output
    data = read_trace(out)
    assert len(data) == 50 and set(data.input_tokens.tolist()) == {612}
    r = CliRunner().invoke(main, ["trace", "show", str(out)])
    assert r.exit_code == 0 and "50 requests" in r.output and "2 used by more than one request" in r.output
    (tmp_path / "bad.jsonl").write_text('{"timestamp": 1}\n')
    r = CliRunner().invoke(main, ["trace", "show", str(tmp_path / "bad.jsonl")])
    assert r.exit_code == 2 and "bad.jsonl:1: input_length: required field is missing" in r.output
