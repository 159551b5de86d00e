"""The record columns for tokens per chunk, reasoning and aborted requests: buffered, written, read back."""

from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.records.schema import (
    ABORTED,
    SCHEMA,
    Outcome,
    RecordBuffer,
    RecordWriter,
    read_records,
    records_exist,
)

T0 = 100.0


def _outcome(chunks: int, **kw) -> Outcome:
    out = Outcome(sent=T0 + 0.01, first_byte=T0 + 0.02, first_token=T0 + 0.08, done=T0 + 0.3, status=200, **kw)
    out.token_times = [T0 + 0.08 + 0.04 * i for i in range(chunks)]
    return out


@pytest.mark.parametrize(
    "chunks, kw, tokens, source",
    [
        # 19 over 5, early first
        (6, {"output_tokens": 20, "output_tokens_source": "usage"}, [1, 4, 4, 4, 4, 3], "usage_spread"),
        (6, {"output_tokens": 6, "output_tokens_source": "usage"}, [1] * 6, "usage_spread"),
        (1, {"output_tokens": 5, "output_tokens_source": "usage"}, [5], "usage_spread"),
        (3, {"output_tokens": 9, "chunk_tokens": [1, 4, 4]}, [1, 4, 4], "chunk_usage"),
        (4, {"output_tokens": 4}, [1, 1, 1, 1], "chunks"),  # no usage: one per chunk
        # usage below the chunks: not spread
        (5, {"output_tokens": 3, "output_tokens_source": "usage"}, [1] * 5, "chunks"),
        (0, {}, [], ""),
    ],
)
def test_chunk_tokens_and_their_source(chunks, kw, tokens, source):
    buf = RecordBuffer(capacity=1)
    buf.append(0, 0, True, 0.0, _outcome(0), T0)  # a row before, so offsets are exercised
    buf.append(1, 0, True, 0.0, _outcome(chunks, **kw), T0)  # and a grown buffer
    rows = buf.drain().to_pylist()
    assert rows[1]["chunk_tokens"] == tokens and rows[1]["chunk_tokens_source"] == source
    assert len(rows[1]["token_times"]) == chunks
    assert rows[0]["chunk_tokens"] == [] and rows[0]["chunk_tokens_source"] == ""


def test_reasoning_answer_and_aborted_round_trip(tmp_path):
    buf = RecordBuffer(capacity=2)
    buf.append(0, 0, True, 0.0, _outcome(8, first_answer=T0 + 0.13, reasoning_tokens=5, output_tokens=8), T0)
    buf.append(1, 0, True, 0.0, Outcome(sent=T0, done=T0 + 0.5, status=200, error=ABORTED), T0)
    path = tmp_path / "requests.parquet"
    w = RecordWriter(path)
    w.write(buf.drain())
    w.close()
    t = read_records(path)
    assert t.schema == SCHEMA
    a, b = t.to_pylist()
    assert a["first_answer"] == pytest.approx(0.13) and a["reasoning_tokens"] == 5 and a["error"] == ""
    assert b["error"] == "aborted" and math.isnan(b["first_answer"]) and b["reasoning_tokens"] == 0


def test_records_written_before_the_chunk_columns_are_read_with_them_filled_in(tmp_path):
    buf = RecordBuffer()
    buf.append(0, 0, True, 0.0, _outcome(3, output_tokens=3), T0)
    buf.append(1, 0, True, 0.0, _outcome(0), T0)
    table = pa.Table.from_batches([buf.drain()])
    old = table.drop_columns(["first_answer", "reasoning_tokens", "chunk_tokens", "chunk_tokens_source"])
    path = tmp_path / "old.parquet"
    pq.write_table(old, path)
    t = read_records(path)
    assert t.schema == SCHEMA
    rows = t.to_pylist()
    assert [r["chunk_tokens"] for r in rows] == [[1, 1, 1], []]
    assert [r["chunk_tokens_source"] for r in rows] == ["chunks", ""]
    assert np.isnan([r["first_answer"] for r in rows]).all() and [r["reasoning_tokens"] for r in rows] == [0, 0]


def test_a_killed_multi_process_runs_parts_are_its_records(tmp_path):
    """Issue 27, item 4: part 0 closed (its writer finished), part 1 killed mid-batch (its parquet has no footer, its
    partial stream a torn last batch): read_records of the target's file reads both parts, whole batches only,
    merged as the run's end would have (sorted by phase and seq, renumbered)."""
    dest = tmp_path / "requests.parquet"
    writers = [RecordWriter(f"{dest}.part{k}") for k in range(2)]  # as the engine processes name them
    for k, w in enumerate(writers):
        for b in range(3):
            buf = RecordBuffer(capacity=4)
            for i in range(4):
                buf.append(2 * (4 * b + i) + k, 0, True, 0.0, _outcome(2), T0)
            w.write(buf.drain())
    writers[0].close()
    torn = writers[1].partial_path
    with open(torn, "r+b") as f:
        f.truncate(f.seek(0, 2) - 50)  # the third batch cut short
    assert records_exist(dest)
    table = read_records(dest)
    assert table.num_rows == 12 + 8
    assert table.column("seq").to_pylist() == list(range(20))
    assert table.column("token_times").to_pylist()[0] == pytest.approx([0.0, 0.04])


def test_the_parquet_file_is_written_at_close_from_the_stream_in_row_groups(tmp_path):
    """During the run only the partial stream is written (what a killed run leaves, read back whole); close writes
    the parquet file from it in row groups of ``row_group_rows`` and removes the stream."""
    path = tmp_path / "requests.parquet"
    (tmp_path / "requests.parquet").write_bytes(b"an earlier run's file")
    w = RecordWriter(path, row_group_rows=5)
    for b in range(3):
        buf = RecordBuffer(capacity=4)
        for i in range(4):
            buf.append(4 * b + i, 0, True, 0.0, _outcome(2), T0)
        w.write(buf.drain())
    assert not path.exists() and os.path.exists(w.partial_path)  # the earlier file is not this run's records
    assert read_records(path).column("seq").to_pylist() == list(range(12))  # mid-run: from the stream
    w.close()
    assert not os.path.exists(w.partial_path)
    f = pq.ParquetFile(path)
    assert [f.metadata.row_group(k).num_rows for k in range(f.metadata.num_row_groups)] == [5, 5, 2]
    assert read_records(path).column("seq").to_pylist() == list(range(12))
    assert read_records(path).column("token_times").to_pylist()[0] == pytest.approx([0.0, 0.04])


def test_a_close_that_cannot_write_the_parquet_file_keeps_the_stream(tmp_path):
    path = tmp_path / "requests.parquet"
    w = RecordWriter(path)
    buf = RecordBuffer(capacity=4)
    for i in range(3):
        buf.append(i, 0, True, 0.0, _outcome(2), T0)
    w.write(buf.drain())
    path.mkdir()  # what the parquet file would be cannot be written
    w.close()
    assert w.error is not None and str(path) in str(w.error)
    assert os.path.exists(w.partial_path) and records_exist(path)
    assert read_records(path).column("seq").to_pylist() == [0, 1, 2]
