"""Tokenizers: loaded from a file, a folder or the Hugging Face cache (offline), exact-length prompts that
round-trip, what the server adds counted apart, and clear errors when something is missing."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import ScenarioError
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import Workload
from loadgen.scenario.prompts import make_prompt_source
from loadgen.scenario.sample_data import train_sample_tokenizer
from loadgen.scenario.tokenized import exact_texts
from loadgen.scenario.tokenizer import TokenizerError, load_tokenizer
from tests.helpers import write_scenario

MIXED = {"mean": 120, "stddev": 150, "min": 1, "max": 1500}


def prompts(tok, chat=False, seed=0, n=400, dist=MIXED):
    src = make_prompt_source(Workload(prompts={"input_tokens": dist, "output_tokens": 8, "distinct": n}), seed,
                             Path("."), tok, chat)
    return [src.get(i) for i in range(n)]


def test_synthetic_prompts_have_exactly_the_requested_tokens(bpe_dir):
    tok = load_tokenizer(str(bpe_dir), Path("."))
    ps = prompts(tok)
    lengths = [p.input_tokens for p in ps]
    assert min(lengths) == 1 and max(lengths) > 500  # mixed, down to a single token
    assert [tok.count(p.text) for p in ps] == lengths
    assert {p.counted_by for p in ps} == {"tokenizer"}
    # completions: the server adds BOS to a plain prompt; the count of it is the tokenizer's, not a guess
    assert tok.special_tokens() == ["<|begin_of_text|>"] and {p.added_tokens for p in ps} == {1}
    longer = [p.text for p in ps if p.input_tokens >= 8]  # distinct (a 1-token prompt has few choices)
    assert len(set(longer)) == len(longer) > 300
    assert [p.text for p in prompts(tok)] == [p.text for p in ps]  # same seed, same prompts
    assert [p.text for p in prompts(tok, seed=1)] != [p.text for p in ps]


def test_chat_template_overhead_is_counted_apart(bpe_dir):
    tok = load_tokenizer(str(bpe_dir / "tokenizer.json"), Path("."))  # the file: its folder's config still read
    for p in prompts(tok, chat=True, n=100):
        rendered = tok.chat_tokens([{"role": "user", "content": p.text}])
        assert tok.count(p.text) == p.input_tokens and p.added_tokens == rendered - p.input_tokens
        # BOS + header + role + end-header + "\n\n" ... + eot + the assistant's header: a fixed overhead here
        assert 10 <= p.added_tokens <= 25


def test_a_tokenizer_without_a_chat_template_leaves_the_overhead_unknown(tmp_path):
    tok = load_tokenizer(str(train_sample_tokenizer(tmp_path / "plain", template=False)), Path("."))
    assert {p.added_tokens for p in prompts(tok, chat=True, n=20)} == {-1}


def test_chat_template_jinja_file_wins(bpe_dir, tmp_path):
    folder = shutil.copytree(bpe_dir, tmp_path / "m")
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    tok = load_tokenizer(str(folder), Path("."))
    assert tok.chat_tokens([{"role": "user", "content": "the way"}]) == tok.count("the way")


def test_windows_that_do_not_round_trip_are_adjusted(bpe_dir):
    """Windows cut inside a word re-encode differently: the adjustment still lands on the exact count."""
    tok = load_tokenizer(str(bpe_dir), Path("."))
    corpus = " ".join(["understanding", "thermodynamics", "the", "hyperparameter", "walked"] * 400)
    lengths = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89] * 10
    texts = exact_texts(tok, corpus, lengths, np.random.default_rng(3))
    assert [tok.count(t) for t in texts] == lengths


def test_model_id_from_the_local_hugging_face_cache(bpe_dir, tmp_path, monkeypatch):
    """An id resolves through huggingface_hub's cache layout, offline; an id not cached is named in the error."""
    snap = tmp_path / "hub" / "models--acme--tiny-llm" / "snapshots" / "0123abcd"
    shutil.copytree(bpe_dir, snap)
    (tmp_path / "hub" / "models--acme--tiny-llm" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-llm" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = load_tokenizer("acme/tiny-llm", tmp_path / "elsewhere")
    assert tok.name == "acme/tiny-llm" and tok.count("the way") == load_tokenizer(str(bpe_dir), Path(".")).count(
        "the way")
    with pytest.raises(TokenizerError, match=r"'acme/not-cached'.*local cache \(latbench never downloads\)"):
        load_tokenizer("acme/not-cached", tmp_path)


@pytest.mark.parametrize("spec, message", [
    ("./missing/tokenizer.json", "no such tokenizer file or folder"),
    ("nothing-here.json", "no such tokenizer file or folder"),
])
def test_missing_paths_are_named(tmp_path, spec, message):
    with pytest.raises(TokenizerError, match=message):
        load_tokenizer(spec, tmp_path)


def test_a_broken_tokenizer_json_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{\"not\": \"a tokenizer\"}")
    with pytest.raises(TokenizerError, match="tokenizer.json.*not a tokenizer.json"):
        load_tokenizer(str(tmp_path), Path("."))


def test_sentencepiece_only_folder_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "tokenizer.model").write_bytes(b"\x00")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the extra were not installed
    with pytest.raises(TokenizerError, match=r"SentencePiece tokenizer.model.*latbench\[sentencepiece\]"):
        load_tokenizer(str(tmp_path), Path("."))


def test_without_the_tokenizers_library(bpe_dir, tmp_path, monkeypatch):
    """Without `tokenizers` a tokenizer is a clear error and everything else still works (the approximation)."""
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(TokenizerError, match="pip install tokenizers"):
        load_tokenizer(str(shutil.copytree(bpe_dir, tmp_path / "copy")), Path("."))  # a path not loaded before
    ps = prompts(None, n=50)
    assert {p.counted_by for p in ps} == {"approximation"} and {p.added_tokens for p in ps} == {-1}


def test_scenario_with_a_bad_tokenizer_is_a_located_error(tmp_path):
    p = write_scenario(tmp_path, """
        name: t
        target: {url: "http://127.0.0.1:9/v1"}
        workload:
          tokenizer: ./no/such/folder
        load: {phases: [{name: a, duration: 1s, qps: 1}]}
    """)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert len(e.value.errors) == 1
    assert e.value.errors[0].startswith(f"{p}:5:14: workload.tokenizer: ") and "no such tokenizer" in str(e.value)
    assert e.value.exit_code == 2


def test_server_tokenizer_is_not_checked_at_load_time(tmp_path):
    p = write_scenario(tmp_path, """
        name: t
        target: {url: "http://127.0.0.1:9/v1"}
        workload: {tokenizer: server}
        load: {phases: [{name: a, duration: 1s, qps: 1}]}
    """)
    assert load_scenario(p).scenario.workload.tokenizer == "server"


def test_tokenizer_config_special_tokens_may_be_objects(bpe_dir, tmp_path):
    folder = shutil.copytree(bpe_dir, tmp_path / "m")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["bos_token"] = {"content": "<|begin_of_text|>", "lstrip": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    a = load_tokenizer(str(folder), Path(".")).chat_tokens([{"role": "user", "content": "x"}])
    assert a == load_tokenizer(str(bpe_dir), Path(".")).chat_tokens([{"role": "user", "content": "x"}])
