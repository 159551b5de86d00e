"""Prompt sources: deterministic, repetition as asked, token lengths as asked, datasets checked line by line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.protocols.registry import make_protocol
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import CHARS_PER_TOKEN, approx_tokens, make_prompt_source


def wl(**prompts) -> Workload:
    extra = {k: prompts.pop(k) for k in ("dataset", "max_tokens", "ignore_eos") if k in prompts}
    return Workload(prompts=prompts, **extra)


def texts(src, n):
    return [src.get(i).text for i in range(n)]


def test_same_seed_same_prompts_other_seed_other_prompts():
    w = wl(input_tokens={"mean": 64, "stddev": 16}, output_tokens={"mean": 32, "stddev": 8}, distinct=50)
    a, b, c = (make_prompt_source(w, s, Path(".")) for s in (7, 7, 8))
    assert [(p.text, p.input_tokens, p.max_tokens) for p in map(a.get, range(100))] == [
        (p.text, p.input_tokens, p.max_tokens) for p in map(b.get, range(100))
    ]
    assert texts(a, 50) != texts(c, 50)


@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_distinct_n_gives_exactly_n_texts_cycling(n):
    src = make_prompt_source(wl(input_tokens=32, distinct=n), 0, Path("."))
    got = texts(src, 10 * n)
    assert len(set(got)) == n
    assert all(got[i] == got[i % n] for i in range(10 * n))
    # a repeated prompt is a repeated request: its output length goes with it
    assert all(src.get(i).max_tokens == src.get(i % n).max_tokens for i in range(10 * n))


def test_distinct_prompts_share_no_prefix():
    src = make_prompt_source(wl(input_tokens=64, distinct=200), 0, Path("."))
    firsts = [t.split(" ", 3)[:3] for t in texts(src, 200)]
    assert len({tuple(f) for f in firsts}) > 190


@pytest.mark.parametrize(
    "dist, mean",
    [({"mean": 128, "stddev": 32}, 128), ({"mean": 16, "stddev": 4}, 16), ({"mean": 2000, "stddev": 500}, 2000),
     (300, 300)],
)
def test_token_length_mean_as_requested(dist, mean):
    src = make_prompt_source(wl(input_tokens=dist, distinct=2000), 1, Path("."))
    ps = [src.get(i) for i in range(2000)]
    assert abs(np.mean([approx_tokens(p.text) for p in ps]) - mean) < 0.1 * mean
    assert abs(np.mean([p.input_tokens for p in ps]) - mean) < 0.1 * mean
    assert all(abs(len(p.text) - CHARS_PER_TOKEN * p.input_tokens) <= 1 for p in ps)
    assert all(not p.text.startswith(" ") and p.messages is None for p in ps)


def test_lengths_clipped_and_max_tokens_override():
    w = wl(input_tokens={"mean": 50, "stddev": 100, "min": 20, "max": 60},
           output_tokens={"mean": 10, "stddev": 50, "min": 5, "max": 12}, distinct=500)
    ps = [make_prompt_source(w, 2, Path(".")).get(i) for i in range(500)]
    assert {20, 60} <= {p.input_tokens for p in ps} and all(20 <= p.input_tokens <= 60 for p in ps)
    assert all(5 <= p.max_tokens <= 12 for p in ps)
    fixed = make_prompt_source(Workload(prompts={"distinct": 10}, max_tokens=77), 2, Path("."))
    assert {fixed.get(i).max_tokens for i in range(10)} == {77}


def write(tmp_path: Path, lines: list) -> Path:
    p = tmp_path / "data.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def test_dataset_prompts_messages_and_max_tokens(tmp_path):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why?"}]
    write(tmp_path, [{"prompt": "hello there", "max_tokens": 5}, "", {"messages": msgs}])
    src = make_prompt_source(Workload(dataset="data.jsonl", prompts={"output_tokens": 40}), 0, tmp_path)
    assert len(src) == 2
    a, b = src.get(0), src.get(1)
    assert (a.text, a.messages, a.max_tokens, a.input_tokens) == ("hello there", None, 5, 3)
    assert (b.text, b.messages, b.max_tokens) == ("be brief\n\nwhy?", msgs, 40)
    assert src.get(2) is a and src.get(5) is b
    # chat sends messages as given, a text prompt as one user message; completions sends text
    chat = make_protocol(Target(url="http://h/v1"), Workload(), "m")
    assert json.loads(chat.build(0, a).body)["messages"] == [{"role": "user", "content": "hello there"}]
    assert json.loads(chat.build(1, b).body)["messages"] == msgs
    comp = make_protocol(Target(url="http://h/v1", api="openai-completions"), Workload(), "m")
    assert json.loads(comp.build(1, b).body)["prompt"] == "be brief\n\nwhy?"


def test_dataset_workload_max_tokens_wins_and_distinct_limits(tmp_path):
    write(tmp_path, [{"prompt": f"p{i}", "max_tokens": 5} for i in range(10)])
    src = make_prompt_source(Workload(dataset=str(tmp_path / "data.jsonl"), max_tokens=9, prompts={"distinct": 3}), 0,
                             Path("/"))
    assert len(src) == 3 and {src.get(i).max_tokens for i in range(3)} == {9}


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "data.jsonl:2: expected a JSON object, got invalid JSON"),
        ("[1, 2]", "data.jsonl:2: expected an object with 'prompt', 'messages' or 'conversations', got list"),
        ({"text": "x"}, "data.jsonl:2: expected an object with 'prompt', 'messages' or 'conversations', got keys "
                        "['text']"),
        ({"prompt": ""}, "data.jsonl:2: prompt: expected a non-empty string"),
        ({"messages": []}, "data.jsonl:2: messages: expected a non-empty list"),
        ({"messages": [{"content": "x"}]}, "data.jsonl:2: messages[0]: expected"),
        ({"prompt": "x", "max_tokens": "5"}, "data.jsonl:2: max_tokens: expected a positive integer, got '5'"),
    ],
)
def test_dataset_bad_line_names_file_and_line(tmp_path, line, message):
    write(tmp_path, [{"prompt": "fine"}, line])
    with pytest.raises(ValueError) as e:
        make_prompt_source(Workload(dataset="data.jsonl"), 0, tmp_path)
    assert message in str(e.value)


def test_dataset_missing_or_empty(tmp_path):
    with pytest.raises(ValueError, match="cannot read dataset"):
        make_prompt_source(Workload(dataset="nope.jsonl"), 0, tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match="no prompts"):
        make_prompt_source(Workload(dataset="empty.jsonl"), 0, tmp_path)
    with pytest.raises(ValueError, match="cannot read dataset"):
        make_prompt_source(Workload(dataset="."), 0, tmp_path)  # a folder


def test_a_wide_stddev_never_draws_past_the_documented_maximum():
    """Issue 27, item 11: the maximum of a length (1,000,000 tokens) and of a session's turns (1000) hold for what
    is drawn too: a mean within them with a wide stddev and no max drew lengths of millions of tokens."""
    from loadgen.scenario.conversations import make_conversation_source
    from loadgen.scenario.prompts import draw_tokens

    wide = Workload.model_validate({"prompts": {"input_tokens": {"mean": 900_000, "stddev": 1_000_000}}})
    drawn = draw_tokens(wide.prompts.input_tokens, 1000, np.random.default_rng(0))
    assert drawn.max() == 1_000_000 and drawn.min() >= 1
    w = Workload.model_validate({"prompts": {"input_tokens": 4, "output_tokens": 2, "distinct": 6},
                                 "conversations": {"turns": {"mean": 900, "stddev": 1000}}})
    turns = [len(make_conversation_source(w, 0, ".").get(i).turns) for i in range(6)]
    assert max(turns) == 1000, turns
