"""Datasets: ShareGPT (JSON array and lines), prompt/messages lines, sampling with the seed, length filters in
tokens, per-line request options, and every mistake named by file and line before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import ScenarioError
from loadgen.scenario.datasets import DatasetError, read_dataset
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import Dataset, Workload
from loadgen.scenario.prompts import approx_tokens, make_prompt_source
from loadgen.scenario.sample_data import sharegpt_sample, write_sharegpt_sample
from loadgen.scenario.tokenizer import load_tokenizer
from tests.helpers import write_scenario

ROOT = Path(__file__).resolve().parents[2]


def conv(*turns):
    return {"conversations": [{"from": f, "value": v} for f, v in turns]}


def sharegpt(tmp_path, entries, name="sg.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(entries, indent=1))
    return p


def test_sharegpt_first_human_turn_is_the_prompt_and_its_answer_the_output_length(tmp_path):
    sharegpt(tmp_path, [
        conv(("system", "be kind"), ("human", "why is the sky blue"), ("gpt", "because " * 10), ("human", "more")),
        conv(("human", "only a question")),  # no answer: skipped, as vLLM does
        conv(("gpt", "hello"), ("human", "hi"), ("gpt", "one two")),
    ])
    src = make_prompt_source(Workload(dataset="sg.json"), 0, tmp_path)
    assert len(src) == 2
    a, b = src.get(0), src.get(1)
    assert (a.text, a.messages, a.max_tokens) == ("why is the sky blue", None, approx_tokens("because " * 10))
    assert (b.text, b.max_tokens) == ("hi", approx_tokens("one two"))


def test_sharegpt_reply_lengths_and_filters_count_with_the_tokenizer(tmp_path, bpe_dir):
    write_sharegpt_sample(tmp_path / "sample.json")
    tok = load_tokenizer(str(bpe_dir), Path("."))
    wl = Workload(dataset={"path": "sample.json", "min_input_tokens": 20, "max_output_tokens": 60})
    src = make_prompt_source(wl, 0, tmp_path, tok)
    entries = [e for e in read_dataset(Dataset(path="sample.json"), tmp_path)]
    kept = [e for e in entries if tok.count(e.text) >= 20 and tok.count(e.reply) <= 60]
    assert 5 < len(src) == len(kept) < len(entries)
    for i, e in enumerate(kept):
        p = src.get(i)
        assert (p.text, p.input_tokens, p.max_tokens, p.counted_by) == (e.text, tok.count(e.text),
                                                                        tok.count(e.reply), "tokenizer")


def test_sample_draws_with_the_seed(tmp_path):
    write_sharegpt_sample(tmp_path / "sample.json")
    texts = {e.text for e in read_dataset(Dataset(path="sample.json"), tmp_path)}

    def drawn(seed, n=12):
        src = make_prompt_source(Workload(dataset={"path": "sample.json", "sample": n}), seed, tmp_path)
        return [src.get(i).text for i in range(len(src))]

    a = drawn(1)
    assert len(a) == 12 == len(set(a)) and set(a) <= texts
    assert drawn(1) == a and drawn(2) != a
    assert set(drawn(1, n=1000)) == texts  # more than there are: every entry, in a seeded order


def test_prompt_and_messages_lines_with_output_tokens_and_extra_body(tmp_path):
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(x) for x in [
        {"prompt": "a b c", "output_tokens": 7, "extra_body": {"temperature": 0.1}},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        conv(("human", "q"), ("gpt", "answer")),
    ]) + "\n")
    src = make_prompt_source(Workload(dataset="d.jsonl"), 0, tmp_path)
    assert [(src.get(i).max_tokens, src.get(i).extra_body) for i in range(3)] == [
        (7, {"temperature": 0.1}), (3, None), (approx_tokens("answer"), None)]


@pytest.mark.parametrize("content, line, message", [
    ('[\n {"conversations": []},\n 5\n]', 3, "expected an object with 'prompt', 'messages' or 'conversations'"),
    ('[\n {"conversations": [{"from": "human"}]}\n]', 2, "conversations[0]: expected"),
    ('[\n {"conversations": "x"}\n]', 2, "conversations: expected a list of turns"),
    ('[\n {"prompt": "a"},\n {"prompt": \n]', 3, "invalid JSON in the array"),
    ('[\n {"prompt": "a"}\n {"prompt": "b"}\n]', 3, "expected ',' or ']'"),
    ('{"prompt": "a", "max_tokens": 2, "output_tokens": 3}', 1, "give max_tokens or output_tokens, not both"),
    ('{"prompt": "a"}\n{"prompt": "b", "extra_body": {"stream": false}}', 2,
     "extra_body: 'stream' is set by latbench from target.stream"),
    ('{"prompt": "a"}\n{"prompt": "b", "output_tokens": 0}', 2, "output_tokens: expected a positive integer"),
])
def test_a_broken_entry_is_named_by_file_and_line(tmp_path, content, line, message):
    (tmp_path / "d.json").write_text(content)
    with pytest.raises(DatasetError) as e:
        read_dataset(Dataset(path="d.json"), tmp_path)
    (err,) = e.value.errors
    assert err.startswith(f"{tmp_path / 'd.json'}:{line}: ") and message in err


def test_every_broken_line_is_reported_at_once(tmp_path):
    lines = ['{"prompt": "a"}', "{oops", '{"prompt": "b"}', '{"messages": []}'] + ['{"x": 1}'] * 30
    (tmp_path / "d.jsonl").write_bytes(("\n".join(lines) + "\n").encode() + b'{"prompt": "\xff"}\n')
    with pytest.raises(DatasetError) as e:
        read_dataset(Dataset(path="d.jsonl"), tmp_path)
    errs = e.value.errors
    assert errs[0].startswith(f"{tmp_path / 'd.jsonl'}:2: expected a JSON object, got invalid JSON")
    assert errs[1].startswith(f"{tmp_path / 'd.jsonl'}:4: messages: expected a non-empty list")
    assert len(errs) == 21 and errs[-1] == f"{tmp_path / 'd.jsonl'}: ... and 13 more problems"


def scenario(tmp_path, dataset_line: str) -> Path:
    return write_scenario(tmp_path, f"""
        name: d
        target: {{url: "http://127.0.0.1:9/v1"}}
        workload:
          dataset: {dataset_line}
        load: {{phases: [{{name: a, duration: 1s, qps: 1}}]}}
    """)


def test_the_loader_checks_the_dataset_before_anything_is_sent(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "ok"}\n\n{"prompt": ""}\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, "d.jsonl"))
    assert e.value.exit_code == 2
    assert e.value.errors == [f"{tmp_path / 's.yaml'}:5:12: workload.dataset: {tmp_path / 'd.jsonl'}:3: "
                              "prompt: expected a non-empty string, got ''"]


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "cannot read dataset: No such file or directory"),
    (lambda p: (p / "d.jsonl").mkdir(), "cannot read dataset: Is a directory"),
    (lambda p: (p / "d.jsonl").write_text("\n\n"), "the dataset has no prompts"),
    (lambda p: (p / "d.jsonl").write_text(json.dumps(conv(("human", "q")))), "no conversation with an answered"),
])
def test_a_missing_or_empty_dataset_is_an_error_at_the_scenario_line(tmp_path, setup, message):
    setup(tmp_path)
    s = scenario(tmp_path, "d.jsonl")
    with pytest.raises(ScenarioError) as e:
        load_scenario(s)
    assert e.value.errors[0].startswith(f"{s}:5:12: workload.dataset: {tmp_path / 'd.jsonl'}: ")
    assert message in e.value.errors[0]


def test_dataset_object_needs_one_source(tmp_path):
    with pytest.raises(ScenarioError, match="expected exactly one of path .* or hf"):
        load_scenario(scenario(tmp_path, "{sample: 3}"))
    with pytest.raises(ScenarioError, match="columns: only for hf datasets"):
        load_scenario(scenario(tmp_path, "{path: d.jsonl, columns: {prompt: q}}"))


def test_the_committed_sample_is_what_the_generator_writes(tmp_path):
    committed = ROOT / "scenarios" / "data" / "sharegpt_small.json"
    assert committed.read_bytes() == write_sharegpt_sample(tmp_path / "s.json").read_bytes()
    assert committed.stat().st_size < 64 * 1024  # small: the repo generates it, it is not a data download
    entries = read_dataset(Dataset(path=str(committed)), Path("."))
    assert len(entries) == sum(1 for c in sharegpt_sample() if any(t["from"] == "gpt" for t in c["conversations"]))


def test_hugging_face_dataset_from_a_local_file_with_a_column_mapping(tmp_path):
    pytest.importorskip("datasets")  # the optional extra: pip install 'latbench[datasets]'
    rows = [{"question": f"question {i} " + "the " * i, "answer": "word " * (i + 1), "n": i + 2} for i in range(10)]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    wl = Workload(dataset={"hf": "rows.jsonl", "columns": {"prompt": "question", "reply": "answer"}})
    src = make_prompt_source(wl, 0, tmp_path)
    assert [src.get(i).text for i in range(10)] == [r["question"] for r in rows]
    assert [src.get(i).max_tokens for i in range(10)] == [approx_tokens(r["answer"]) for r in rows]
    wl = Workload(dataset={"hf": "rows.jsonl", "columns": {"prompt": "question", "output_tokens": "n"}})
    assert [make_prompt_source(wl, 0, tmp_path).get(i).max_tokens for i in range(3)] == [2, 3, 4]
    with pytest.raises(DatasetError, match=r"no column nope .*its columns: question, answer, n"):
        read_dataset(Dataset(hf="rows.jsonl", columns={"prompt": "nope"}), tmp_path)
