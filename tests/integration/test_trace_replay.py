"""Trace replay against real servers: every request at its trace time / speed on each engine (one process,
several, Locust workers), its prompt on the wire of the trace's length and sharing the blocks its hash ids share,
and the reference server: lengths in its own tokens, requests clipped to its max_model_len (counted) or refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from loadgen.engine.options import EngineOptions
from loadgen.errors import UsageError
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import TokenDist
from loadgen.scenario.tokenizer import load_tokenizer
from loadgen.schedule.tracegen import generate_trace, write_trace
from reports import write_outputs
from tests.helpers import run
from tests.servers import RecordingServer

ROOT = Path(__file__).resolve().parents[2]
#: The intended times, the lengths and the prompts are under test here, not how late a loaded machine sent nor how
#: long its CPUs kept a process waiting: the runs judge neither (so no test here needs to run alone).
UNJUDGED = "send_lag_threshold: 1s, host_wait_limit: 1"


def trace_file(tmp_path: Path, n: int, qps: float, block: int = 32, **kw) -> tuple[Path, list[dict]]:
    rows = generate_trace(n, qps, input_tokens=TokenDist(mean=60, stddev=30), output_tokens=TokenDist(mean=4),
                          groups=3, prefix_tokens=2 * block, block_tokens=block, seed=2, **kw)
    return write_trace(rows, tmp_path / "trace.jsonl"), sorted(rows, key=lambda r: r["timestamp"])


def assert_on_schedule(df, rows: list[dict], speed: float) -> None:
    """Request seq is the seq-th row in time order, intended at its trace time / speed (to float rounding)."""
    df = df.sort_values("seq")
    assert df["seq"].tolist() == list(range(len(rows)))
    want = np.array([r["timestamp"] for r in rows], dtype=float) / (1000.0 * speed)
    assert np.abs(df["scheduled"].to_numpy() - want).max() < 1e-9
    assert (df["input_tokens"].to_numpy() == [r["input_length"] for r in rows]).all()


def test_a_trace_replays_at_its_times_with_its_lengths_and_shared_prefixes_on_the_wire(tmp_path, bpe_dir):
    path, rows = trace_file(tmp_path, 60, 40.0)
    srv = RecordingServer().start()
    try:
        res, s, df = run(tmp_path, f"""
        name: trace
        target: {{url: "{srv.url}", model: known, api: openai-completions}}
        workload: {{tokenizer: {bpe_dir}}}
        load: {{mode: trace, file: {path.name}, speed: 2, block_tokens: 32, {UNJUDGED}}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    assert_on_schedule(df, rows, 2.0)
    assert s["trace"]["requests"] == 60 and s["trace"]["clipped"] == 0 and s["trace"]["max_model_len"] is None
    assert s["trace"]["shared_blocks"] == 6  # three groups, two whole prefix blocks each
    tok = load_tokenizer(str(bpe_dir), Path("."))
    by_text = {b["prompt"]: b for b in srv.bodies}
    assert len(srv.bodies) == len(by_text) == 60
    # each prompt as the server got it: the trace's length in tokens, its output length as max_tokens
    lengths = sorted((tok.count(t), b["max_tokens"]) for t, b in by_text.items())
    assert lengths == sorted((r["input_length"], r["output_length"]) for r in rows)
    # ... and the same text as every other prompt exactly as far as their hash ids agree
    texts = {tok.count(t): t for t in by_text}  # lengths are distinct enough to pair most prompts with their rows
    paired = [(r, texts[r["input_length"]]) for r in rows
              if sum(q["input_length"] == r["input_length"] for q in rows) == 1]
    assert len(paired) > 30
    checked = {0: 0, 2: 0}
    for (a, ta), (b, tb) in ((x, y) for i, x in enumerate(paired) for y in paired[:i]):
        same = next((k for k, (u, v) in enumerate(zip(a["hash_ids"], b["hash_ids"])) if u != v),
                    min(len(a["hash_ids"]), len(b["hash_ids"])))
        shared = tok.count(os.path.commonprefix([ta, tb]))
        assert same * 32 <= shared <= same * 32 + 3, (same, shared)  # a few tokens may agree by chance
        checked[same] = checked.get(same, 0) + 1
    assert checked[0] > 100 and checked[2] > 100


@pytest.mark.parametrize("opts", [EngineOptions(processes=2), EngineOptions(engine="locust", workers=2)],
                         ids=["processes", "locust"])
def test_every_engine_replays_the_trace_on_its_times(tmp_path, known_server, opts):
    srv = known_server(delay=0.01, ttft=0.01, gap=0.002, tokens=4)
    path, rows = trace_file(tmp_path, 80, 60.0, block=16)
    res, s, df = run(tmp_path, f"""
    name: trace
    target: {{url: "{srv.url}", model: known}}
    load: {{mode: trace, file: {path.name}, block_tokens: 16, {UNJUDGED}}}
    """, opts=opts)
    assert res.exit_code == 0, res.reasons
    assert_on_schedule(df, rows, 1.0)
    assert set(df["worker"]) == {0, 1} and (df["error"] == "").all()
    assert s["phases"]["trace"]["count"] == 80


def bundled_trace(tmp_path: Path, **load) -> Path:
    """scenarios/trace.yaml with its trace file's absolute path and ``load`` changes."""
    data = yaml.safe_load((ROOT / "scenarios" / "trace.yaml").read_text())
    data["load"].update({"file": str(ROOT / "scenarios" / "data" / "trace_small.jsonl"), **load})
    p = tmp_path / "trace.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_the_bundled_trace_against_the_reference_server_in_its_own_tokens(tmp_path):
    loaded = load_scenario(bundled_trace(tmp_path, max_requests=40, speed=4.0, host_wait_limit=1,
                                         send_lag_threshold="1s"))  # as UNJUDGED
    res = run_scenario(loaded, out=str(tmp_path / "runs"))
    assert res.exit_code == 0, res.reasons
    tdir = res.rundir.path / res.targets[0].dir
    s = json.loads((tdir / "summary.json").read_text())
    df = read_records(tdir / "requests.parquet").to_pandas().sort_values("seq")
    rows = sorted((json.loads(x) for x in (ROOT / "scenarios/data/trace_small.jsonl").read_text().splitlines()),
                  key=lambda r: r["timestamp"])[:40]
    assert_on_schedule(df, rows, 4.0)
    assert s["overall"]["tokens"]["usage_vs_counted"]["equal"] == 40  # the server counts what latbench asked
    assert (df["output_tokens"].to_numpy() == [r["output_length"] for r in rows]).all()  # ignore_eos
    t = s["trace"]
    assert (t["max_model_len"], t["max_model_len_source"], t["clipped"]) == (2048, "target", 0)
    assert t["added_tokens"] == df["added_tokens"].iloc[0] > 0  # the chat template, by the server's /tokenize
    write_outputs(res.rundir.path)
    html = (res.rundir.path / "report.html").read_text()
    assert "trace_small.jsonl: 40 of 100 requests at speed 4" in html


def long_trace(tmp_path: Path) -> Path:
    rows = [{"timestamp": 100 * i, "input_length": 3000 if i in (2, 5) else 100, "output_length": 8}
            for i in range(8)]
    return write_trace(rows, tmp_path / "long.jsonl")


def reference_trace(tmp_path: Path, too_long: str) -> Path:
    p = tmp_path / f"{too_long}.yaml"
    p.write_text(f"""
name: long
target: {{reference: {{arch: optimized, model: tiny}}, api: openai-completions}}
workload: {{tokenizer: server, ignore_eos: true}}
load: {{mode: trace, file: {long_trace(tmp_path)}, too_long: {too_long}}}
""")
    return p


def test_requests_beyond_the_servers_context_are_clipped_and_counted(tmp_path):
    res = run_scenario(load_scenario(reference_trace(tmp_path, "clip")), out=str(tmp_path / "runs"))
    assert res.exit_code == 0, res.reasons
    tdir = res.rundir.path / res.targets[0].dir
    s = json.loads((tdir / "summary.json").read_text())
    df = read_records(tdir / "requests.parquet").to_pandas().sort_values("seq")
    assert (df["error"] == "").all()  # the server took every request: clipped to its context, none refused
    assert df["input_tokens"].tolist() == [100, 100, 2040, 100, 100, 2040, 100, 100]  # 2048 less the output
    assert (df["prompt_tokens"] == df["input_tokens"]).all()  # completions: the server adds nothing
    assert (s["trace"]["clipped"], s["trace"]["clipped_input_tokens"]) == (2, 2 * 960)
    assert any("2 of 8 trace requests were clipped to fit max_model_len 2048" in n for n in s["notes"])


def test_too_long_refuse_stops_before_anything_is_sent(tmp_path):
    loaded = load_scenario(reference_trace(tmp_path, "refuse"))  # no limit in the scenario: the target's counts
    with pytest.raises(UsageError) as e:
        run_scenario(loaded, out=str(tmp_path / "runs"))
    msg = str(e.value)
    assert "nothing was sent" in msg and "long.jsonl:3: input_length 3000 + output_length 8 > max_model_len 2048" in msg
    assert "long.jsonl:6:" in msg and "long.jsonl:1:" not in msg
    assert not list((tmp_path / "runs").glob("*/*/requests.parquet*"))
