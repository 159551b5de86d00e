"""Token counts in records say where they came from; old records are read with the sources filled in; the
summary reports token throughput, per-user output speed, and whether the server counted what latbench sent."""

from __future__ import annotations

from array import array

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.analysis.metrics import summarize
from loadgen.records.schema import SCHEMA, Outcome, PromptCounts, RecordBuffer, read_records
from loadgen.scenario.model import Load
from loadgen.schedule.arrivals import plan_phases

T0 = 1000.0


def outcome(i: int, **kw) -> Outcome:
    sent = T0 + i * 0.1
    out = Outcome(sent=sent, first_byte=sent + 0.01, first_token=sent + 0.02, done=sent + 0.02 + 0.01 * 9,
                  status=200, output_tokens=10, output_tokens_source="usage", token_times=[])
    for k, v in kw.items():
        setattr(out, k, v)
    return out


@pytest.mark.parametrize("out, row", [
    # the server's usage wins; latbench's own count is kept beside it
    (outcome(0, prompt_tokens=33, counts=PromptCounts(30, 3, "tokenizer")),
     {"prompt_tokens": 33, "prompt_tokens_source": "usage", "input_tokens": 30, "added_tokens": 3}),
    # no usage: latbench's count (input + added) with its source
    (outcome(0, counts=PromptCounts(30, 3, "tokenizer"), output_tokens_source="tokenizer"),
     {"prompt_tokens": 33, "prompt_tokens_source": "tokenizer", "output_tokens_source": "tokenizer"}),
    (outcome(0, counts=PromptCounts(12, -1, "approximation"), output_tokens_source="chunks"),
     {"prompt_tokens": 12, "prompt_tokens_source": "approximation", "added_tokens": -1,
      "output_tokens_source": "chunks"}),
    # nothing known (api: http)
    (outcome(0, output_tokens=0, output_tokens_source=""),
     {"prompt_tokens": -1, "prompt_tokens_source": "", "input_tokens": -1, "output_tokens_source": ""}),
])
def test_record_token_columns(out, row):
    buf = RecordBuffer(4)
    buf.append(0, 0, True, 0.0, out, T0)
    got = buf.drain().to_pylist()[0]
    assert {k: got[k] for k in row} == row


def test_a_value_the_row_packing_refuses_is_stored_as_numpy_converts_it():
    """A row is packed in place; a float where an int goes (which the packing refuses) takes numpy's row
    assignment: the same record, the count truncated as numpy does."""
    buf = RecordBuffer(4)
    tokens = dict(token_times=array("d", [T0 + 0.02, T0 + 0.03]), chunk_tokens=[4, 6])
    buf.append(7, 1, True, 0.5, outcome(0, **tokens), T0, worker=3)
    buf.append(7, 1, True, 0.5, outcome(0, output_tokens=10.7, **tokens), T0, worker=3)
    packed, converted = buf.drain().to_pylist()
    assert repr(packed) == repr(converted)  # NaN times alike
    assert packed["output_tokens"] == 10 and packed["worker"] == 3 and packed["chunk_tokens"] == [4, 6]


def test_records_written_before_token_sources_are_read_with_them(tmp_path):
    old_schema = pa.schema([f for f in SCHEMA if f.name not in ("prompt_tokens_source", "input_tokens",
                                                                "added_tokens", "output_tokens_source")]
                           + [("usage_tokens", pa.bool_())])
    cols = {f.name: [None, None, None] for f in old_schema}
    cols.update(seq=[0, 1, 2], phase=[0, 0, 0], recorded=[True] * 3, status=[200] * 3, error=["", "", ""],
                prompt_tokens=[5, -1, -1], output_tokens=[7, 4, 0], usage_tokens=[True, False, False],
                bytes_in=[1, 1, 1], worker=[0, 0, 0], token_times=[[], [], []])
    pq.write_table(pa.table(cols, schema=old_schema), tmp_path / "requests.parquet")
    t = read_records(tmp_path / "requests.parquet")
    assert t.schema == SCHEMA
    assert t.column("output_tokens_source").to_pylist() == ["usage", "chunks", ""]
    assert t.column("prompt_tokens_source").to_pylist() == ["usage", "", ""]
    assert t.column("input_tokens").to_pylist() == [-1, -1, -1]


def test_summary_token_throughput_and_usage_check():
    load = Load.model_validate({"phases": [{"name": "a", "duration": "10s", "qps": 10},
                                           {"name": "b", "duration": "10s", "qps": 10}]})
    plans = plan_phases(load)
    buf = RecordBuffer()
    for i in range(200):
        sched = i * 0.1
        out = Outcome(sent=T0 + sched, first_token=T0 + sched + 0.05, done=T0 + sched + 0.05 + 0.02 * 9,
                      status=200, output_tokens=10, output_tokens_source="usage",
                      prompt_tokens=100 + (i % 2 == 0) * (1 if i == 0 else 0),  # one disagreement, by one token
                      counts=PromptCounts(99, 1, "tokenizer"))
        buf.append(i, 0 if sched < 10 else 1, True, sched, out, T0)
    s = summarize(pa.Table.from_batches([buf.drain()]), plans, [], 20.0,
                  tokens={"tokenizer": "t", "special_tokens": ["<s>"]})
    o = s["overall"]
    # 200 requests in 20 s, 100 prompt tokens each (one has 101): what was completed inside the window
    assert o["input_tokens_per_s"] == pytest.approx((200 * 100 + 1) / 20.0, rel=0.01)
    assert o["output_tokens_per_s"] == pytest.approx(200 * 10 / 20.0, rel=0.01)
    assert s["phases"]["a"]["input_tokens_per_s"] == pytest.approx(100 * 100 / 10.0, rel=0.02)
    user = o["output_tokens_per_s_per_user"]  # 9 tokens after the first, in 0.18 s: 50 tokens/s for everyone
    assert user["n"] == 200 and user["percentiles"]["p1"]["value"] == pytest.approx(50.0)
    tk = o["tokens"]
    assert tk["prompt_tokens_source"] == {"usage": 200} and tk["output_tokens_source"] == {"usage": 200}
    assert tk["added_tokens"] == {"min": 1, "mean": 1.0, "max": 1}
    assert tk["usage_vs_counted"] == {"n": 200, "equal": 199, "min_diff": 0, "max_diff": 1}
    assert s["tokens"] == {"tokenizer": "t", "special_tokens": ["<s>"]}
    assert np.isfinite(user["mean"])
