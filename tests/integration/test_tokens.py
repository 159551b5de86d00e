"""Token counts against servers that count: the reference server counting with the same tokenizer (usage equals
what latbench asked, beyond BOS or the chat template's overhead), the target's own /tokenize, output counted
from streamed text when there is no usage, and a ShareGPT file's prompts being what the server receives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.errors import UsageError
from loadgen.scenario.datasets import read_dataset
from loadgen.scenario.model import Dataset
from loadgen.scenario.sample_data import write_sharegpt_sample
from loadgen.scenario.tokenizer import load_tokenizer
from tests.helpers import run
from tests.servers import RecordingServer

MIXED = "{mean: 30, stddev: 30, min: 1, max: 160}"


def counted_run(tmp_path, api: str, server_options: str, tokenizer: str, n: int = 150, stream: str = "true"):
    """``n`` requests of mixed lengths (1 to 160 tokens) in 3 s, each prompt once; all of them finish."""
    text = f"""
    name: tokens
    target:
      reference: {{arch: optimized, model: tiny, options: {server_options}}}
      api: {api}
      stream: {stream}
    workload:
      tokenizer: {tokenizer}
      prompts: {{input_tokens: {MIXED}, output_tokens: 2, distinct: {n}}}
    load:
      arrival: constant
      grace: 120s
      host_wait_limit: 1  # what is asserted is counts of tokens, not times: a busy host does not bend them
      send_lag_threshold: 10s
      phases:
        - {{name: main, duration: 3s, qps: {n / 3}}}
    """
    return run(tmp_path, text)


def test_completions_usage_equals_the_requested_length_plus_bos(tmp_path, bpe_dir):
    res, s, df = counted_run(tmp_path, "openai-completions", f"{{tokenizer: {bpe_dir}}}", str(bpe_dir))
    assert res.exit_code == 0, res.reasons
    assert len(df) == 150 and (df["error"] == "").all()
    assert df["input_tokens"].min() == 1 and df["input_tokens"].max() > 90  # mixed lengths
    assert (df["prompt_tokens_source"] == "usage").all() and (df["added_tokens"] == 1).all()
    assert (df["prompt_tokens"] == df["input_tokens"] + 1).all()  # exactly, for every request
    assert s["tokens"]["special_tokens"] == ["<|begin_of_text|>"] and s["tokens"]["tokenizer"] == str(bpe_dir)
    assert s["overall"]["tokens"]["usage_vs_counted"] == {"n": 150, "equal": 150, "min_diff": 0, "max_diff": 0}
    assert s["overall"]["input_tokens_per_s"] > 0


def test_chat_usage_equals_the_requested_length_plus_the_template_overhead(tmp_path, bpe_dir):
    res, s, df = counted_run(tmp_path, "openai-chat", f"{{tokenizer: {bpe_dir}}}", str(bpe_dir), stream="false")
    assert res.exit_code == 0, res.reasons
    assert (df["added_tokens"] > 10).all() and (df["prompt_tokens"] == df["input_tokens"] + df["added_tokens"]).all()
    added = s["overall"]["tokens"]["added_tokens"]
    assert added["min"] == added["max"] == df["added_tokens"].iloc[0]  # one user message: a fixed overhead
    # the server counted the answer with the tokenizer too: no more tokens than the 2 characters generated
    assert (df["output_tokens_source"] == "usage").all() and df["output_tokens"].between(1, 2).all()


@pytest.mark.parametrize("api", ["openai-completions", "openai-chat"])
def test_the_targets_own_tokenize_endpoint(tmp_path, api):
    """``tokenizer: server`` against the byte-level reference server: exact lengths in its tokens (bytes)."""
    res, s, df = counted_run(tmp_path, api, "{}", "server", n=60)
    assert res.exit_code == 0, res.reasons
    assert (df["prompt_tokens"] == df["input_tokens"] + df["added_tokens"]).all()
    assert (df["added_tokens"] == (0 if api == "openai-completions" else df["added_tokens"].iloc[0])).all()
    assert s["tokens"]["tokenizer"] == "server" and s["tokens"]["special_tokens"] == []


@pytest.mark.parametrize("tokenizer, source", [(True, "tokenizer"), (False, "chunks")])
def test_output_is_counted_from_the_streamed_text_when_there_is_no_usage(tmp_path, bpe_dir, tokenizer, source):
    srv = RecordingServer(usage=False).start()
    try:
        res, _, df = run(tmp_path, f"""
        name: nousage
        target: {{url: "{srv.url}", model: known, api: openai-chat}}
        workload:
          {"tokenizer: " + str(bpe_dir) if tokenizer else ""}
          prompts: {{input_tokens: 8, output_tokens: 5, distinct: 5}}
        load: {{phases: [{{name: a, duration: 1s, qps: 20}}]}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    want = load_tokenizer(str(bpe_dir), Path(".")).count("".join(srv.pieces)) if tokenizer else len(srv.pieces)
    assert (df["output_tokens"] == want).all() and (df["output_tokens_source"] == source).all()
    assert tokenizer is False or want != len(srv.pieces)  # the two ways of counting differ on this text
    assert (df["prompt_tokens_source"] == ("tokenizer" if tokenizer else "approximation")).all()


def test_a_sharegpt_files_prompts_are_what_the_server_receives(tmp_path):
    data = write_sharegpt_sample(tmp_path / "sg.json")
    entries = read_dataset(Dataset(path=str(data)), tmp_path)
    srv = RecordingServer().start()
    try:
        res, _, df = run(tmp_path, f"""
        name: sharegpt
        target: {{url: "{srv.url}", model: known, api: openai-completions, extra_body: {{temperature: 0}}}}
        workload:
          dataset: {{path: sg.json, sample: 20}}
        load: {{arrival: constant, phases: [{{name: a, duration: 2s, qps: 20}}]}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    (preflight,) = srv.preflight  # the pre-flight's one minimal request, not recorded
    assert preflight["prompt"] == "Hello" and preflight["max_tokens"] == 1 and len(df) == 40
    bodies = srv.bodies
    got = [b["prompt"] for b in bodies]
    assert len(got) == 40 and got[:20] == got[20:]  # 20 sampled entries, then again in the same order
    assert set(got) <= {e.text for e in entries} and len(set(got)) == 20
    replies = {e.text: e.reply for e in entries}
    assert all(b["max_tokens"] == -(-len(replies[b["prompt"]]) // 4) for b in bodies)  # the reply's length
    assert all(b["temperature"] == 0 for b in srv.bodies)


def test_a_sharegpt_order_depends_on_the_seed(tmp_path):
    data = write_sharegpt_sample(tmp_path / "sg.json")
    orders = []
    for seed in (3, 4, 3):
        srv = RecordingServer().start()
        try:
            res, _, _ = run(tmp_path / str(len(orders)), f"""
            name: sharegpt
            target: {{url: "{srv.url}", model: known, api: openai-chat}}
            workload: {{dataset: {{path: {data}, sample: 10}}}}
            load: {{seed: {seed}, arrival: constant, phases: [{{name: a, duration: 1s, qps: 10}}]}}
            """)
        finally:
            srv.stop()
        assert res.exit_code == 0
        orders.append([b["messages"][0]["content"] for b in srv.bodies])
    assert orders[0] == orders[2] and orders[0] != orders[1]


def test_reference_server_refuses_a_tokenizer_it_cannot_load(tmp_path):
    p = subprocess.run([sys.executable, "-m", "reference_server", "--model", "tiny", "--tokenizer",
                        str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--tokenizer" in p.stderr and "no tokenizer.json" in p.stderr


def test_a_target_without_tokenize_is_a_clear_usage_error(tmp_path):
    srv = RecordingServer().start()
    try:
        with pytest.raises(UsageError, match=r"workload.tokenizer: tokenizer: server: POST /tokenize answered 404"):
            run(tmp_path, f"""
            name: notokenize
            target: {{url: "{srv.url}", model: known}}
            workload: {{tokenizer: server}}
            load: {{phases: [{{name: a, duration: 1s, qps: 5}}]}}
            """)
    finally:
        srv.stop()
    assert srv.bodies == []  # nothing was sent to the API
