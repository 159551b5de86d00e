"""The user's side of conversations (made before the run) and a session's turns (built during it)."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.analysis.conversations import conversation_stats
from loadgen.analysis.metrics import records_frame
from loadgen.protocols.conversation import TURN_SEQ_BASE, Sessions, turn_seq
from loadgen.protocols.openai import ChatProtocol
from loadgen.records.schema import SCHEMA, Outcome, RecordBuffer, read_records
from loadgen.scenario.conversations import make_conversation_source
from loadgen.scenario.loader import ScenarioError, load_scenario
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.sample_data import sharegpt_sample, write_sharegpt_sample
from loadgen.scenario.tokenizer import load_tokenizer


def _workload(**kw) -> Workload:
    return Workload.model_validate(kw)


def test_synthetic_conversations_have_their_turns_lengths_and_think_times():
    w = _workload(prompts={"input_tokens": 12, "output_tokens": 7, "distinct": 20},
                  conversations={"turns": {"mean": 3, "stddev": 1, "min": 1, "max": 5}, "think_time": "250ms"})
    src = make_conversation_source(w, 3, ".")
    assert len(src) == 20 and src.get(23) is src.get(3)  # session s holds conversation s % 20
    counts = [len(src.get(i).turns) for i in range(20)]
    assert min(counts) >= 1 and max(counts) <= 5 and len(set(counts)) > 1
    for i in range(20):
        turns = src.get(i).turns
        assert [t.think for t in turns] == [0.0] + [0.25] * (len(turns) - 1)
        assert all(t.tokens == 12 and t.max_tokens == 7 and 40 < len(t.text) <= 48 for t in turns)
    texts = [t.text for i in range(20) for t in src.get(i).turns]
    assert len(set(texts)) == len(texts)  # every user turn its own text
    again = make_conversation_source(w, 3, ".")
    assert [again.get(i) for i in range(20)] == [src.get(i) for i in range(20)]


def test_exponential_think_times_have_the_mean_asked_for():
    w = _workload(prompts={"distinct": 500}, conversations={"turns": 5, "think_time": {"mean": "2s"}})
    src = make_conversation_source(w, 0, ".")
    thinks = np.array([t.think for i in range(500) for t in src.get(i).turns[1:]])
    assert len(thinks) == 2000 and abs(thinks.mean() - 2.0) < 0.15 and thinks.std() > 1.5


def test_a_sharegpt_conversation_replays_its_human_turns_and_takes_its_answers_lengths(tmp_path, bpe_dir):
    path = write_sharegpt_sample(tmp_path / "sg.json")
    tok = load_tokenizer(str(bpe_dir), tmp_path)
    w = _workload(dataset="sg.json", tokenizer=str(bpe_dir), conversations={"think_time": "1s"})
    src = make_conversation_source(w, 0, tmp_path, tok, chat=True)
    data = [d for d in json.loads(path.read_text())]
    answered = [d for d in data if any(t["from"] == "gpt" for t in d["conversations"])]
    assert len(src) == len(answered) == len(sharegpt_sample()) - 3  # 3 without an answered turn are skipped
    multi = 0
    for conv, d in zip((src.get(i) for i in range(len(src))), answered):
        turns = d["conversations"]
        humans = [(t["value"], turns[j + 1]["value"] if j + 1 < len(turns) else None)
                  for j, t in enumerate(turns) if t["from"] == "human"]
        assert [t.text for t in conv.turns] == [h for h, _ in humans]
        assert [t.tokens for t in conv.turns] == [tok.count(h) for h, _ in humans]
        assert [t.max_tokens for t in conv.turns] == [tok.count(r) for _, r in humans]  # the dataset's answers
        assert conv.counted_by == "tokenizer"
        multi += len(conv.turns) > 1
    assert multi >= 5


def test_turns_cut_a_dataset_conversation(tmp_path):
    write_sharegpt_sample(tmp_path / "sg.json")
    src = make_conversation_source(_workload(dataset="sg.json", conversations={"turns": 1}), 0, tmp_path)
    assert all(len(src.get(i).turns) == 1 for i in range(len(src)))


def _target(**kw) -> Target:
    return Target.model_validate({"url": "http://127.0.0.1:9/v1", **kw})


def test_a_session_builds_each_turn_from_the_history_and_ends_at_a_failure():
    w = _workload(prompts={"input_tokens": 4, "output_tokens": 3, "distinct": 2}, conversations={"turns": 3})
    proto = ChatProtocol(_target(), w, "m")
    sessions = Sessions(proto, make_conversation_source(w, 0, "."), chat=True)
    s = sessions.start(7)
    conv = sessions.source.get(7)
    req = sessions.request(s)
    assert req.counts.input_tokens == 4 and json.loads(req.body)["messages"] == [
        {"role": "user", "content": conv.turns[0].text}]
    assert sessions.answered(s, Outcome(answer="first answer", output_tokens=2, output_tokens_source="usage")) == 0.0
    body = json.loads(sessions.request(s).body)
    assert s.seq == turn_seq(7, 1) == TURN_SEQ_BASE + 7 * 1000 + 1
    assert body["messages"] == [{"role": "user", "content": conv.turns[0].text},
                                {"role": "assistant", "content": "first answer"},
                                {"role": "user", "content": conv.turns[1].text}]
    assert body["max_tokens"] == conv.turns[1].max_tokens
    assert sessions.request(s).counts.input_tokens == 4 + 2 + 4 and sessions.request(s).counts.source == "approximation"
    assert sessions.answered(s, Outcome(error="http_5xx", answer=None)) is None  # a failed turn: the session ends
    assert s.turn == 1


def test_the_last_turn_ends_a_session():
    w = _workload(conversations={"turns": 1})
    sessions = Sessions(ChatProtocol(_target(), w, "m"), make_conversation_source(w, 0, "."), chat=True)
    s = sessions.start(0)
    assert sessions.answered(s, Outcome(answer="done")) is None


@pytest.mark.parametrize("api", ["embeddings", "http", "rerank"])
def test_conversations_need_a_chat_or_completions_api(tmp_path, api):
    p = tmp_path / "s.yaml"
    p.write_text(f"name: c\ntarget: {{url: 'http://127.0.0.1:9/v1', api: {api}}}\n"
                 "workload: {conversations: {turns: 2}}\nload: {phases: [{name: a, duration: 1s, qps: 1}]}\n")
    with pytest.raises(ScenarioError, match="conversations"):
        load_scenario(p)


def test_too_many_turns_are_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: c\ntarget: {url: 'http://127.0.0.1:9/v1'}\nworkload: {conversations: {turns: 5000}}\n"
                 "load: {phases: [{name: a, duration: 1s, qps: 1}]}\n")
    with pytest.raises(ScenarioError, match="1000 turns"):
        load_scenario(p)


def test_records_carry_session_and_turn_and_old_files_read_as_none(tmp_path):
    buf = RecordBuffer()
    out = Outcome(sent=1.0, done=1.5)
    out.session, out.turn = 4, 2
    buf.append(turn_seq(4, 2), 0, True, 0.9, out, 0.0)
    buf.append(5, 0, True, 1.0, Outcome(sent=1.0, done=1.2), 0.0)
    table = pa.Table.from_batches([buf.drain()])
    assert table.column("session").to_pylist() == [4, -1] and table.column("turn").to_pylist() == [2, -1]
    pq.write_table(table.drop_columns(["session", "turn"]), tmp_path / "old.parquet")
    old = read_records(tmp_path / "old.parquet")
    assert old.schema == SCHEMA and old.column("session").to_pylist() == [-1, -1]


def test_by_turn_statistics():
    buf = RecordBuffer()
    for sid in range(4):
        for turn in range(3 if sid else 1):
            out = Outcome(sent=turn + 0.0, first_token=turn + 0.01 * (turn + 1), done=turn + 0.1 * (turn + 1),
                          error="http_5xx" if (sid == 3 and turn == 2) else "", prompt_tokens=10 * (turn + 1))
            out.session, out.turn = sid, turn
            buf.append(turn_seq(sid, turn), 0, True, float(turn), out, 0.0)
    c = conversation_stats(records_frame(pa.Table.from_batches([buf.drain()])))
    assert c.sessions == 4 and c.turns_per_session.to_json() == {"mean": 2.5, "max": 3} and c.ended_by_failure == 1
    t = {x.turn: x for x in c.by_turn}
    assert [t[i].count for i in range(3)] == [4, 3, 3] and t[2].error_rate == pytest.approx(1 / 3)
    assert t[1].latency.pct("p50").value == pytest.approx(0.2)
    assert t[2].ttft.pct("p50").value == pytest.approx(0.03)
    assert t[0].prompt_tokens_mean == 10 and t[2].prompt_tokens_mean == 30


def test_a_trace_refuses_a_prefix(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n')
    p = tmp_path / "s.yaml"
    p.write_text("name: c\ntarget: {url: 'http://127.0.0.1:9/v1'}\nworkload: {prefix: {tokens: 16, groups: 2}}\n"
                 "load: {mode: trace, file: t.jsonl}\n")
    with pytest.raises(ScenarioError, match="workload.prefix: a trace"):
        load_scenario(p)
