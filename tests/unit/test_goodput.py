"""Goodput objectives: scenario validation and which bound applies where (no servers)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from loadgen.analysis.goodput import bounds_for
from loadgen.analysis.metrics import records_frame, window_stats
from loadgen.errors import ScenarioError
from loadgen.records.schema import Outcome, RecordBuffer
from loadgen.scenario.loader import load_scenario
from tests.helpers import write_scenario

BASE = """\
name: g
targets:
  - {name: fast, url: "http://127.0.0.1:9/v1"}
  - {name: slow, url: "http://127.0.0.1:9/v1"}
load:
  phases:
    - {name: first, duration: 1s, qps: 10}
    - {name: second, duration: 1s, qps: 10}
"""


def load(tmp_path, extra: str):
    return load_scenario(write_scenario(tmp_path, BASE + extra)).scenario


def test_a_block_or_a_list_of_scoped_blocks(tmp_path):
    sc = load(tmp_path, "goodput: {ttft: 200ms, tpot: 50ms, latency: 2s}\nslo: [goodput >= 90%, goodput_qps > 5]\n")
    assert [g.bounds() for g in sc.goodput] == [{"latency": 2.0, "ttft": 0.2, "tpot": 0.05}]
    sc = load(tmp_path, "goodput:\n  - {latency: 100ms, ttft: 50ms}\n  - {scope: slow, latency: 200ms}\n"
                        "  - {scope: slow/second, latency: 120ms}\n  - {scope: second, latency: 90ms}\n")
    g = sc.goodput
    assert bounds_for(g, "fast", "first") == {"latency": 0.1, "ttft": 0.05}
    assert bounds_for(g, "fast", "second") == {"latency": 0.09, "ttft": 0.05}
    assert bounds_for(g, "slow", "first") == {"latency": 0.2, "ttft": 0.05}
    # target and phase are equally specific: the tighter holds; target/phase is more specific than both
    assert bounds_for(g, "slow", "second") == {"latency": 0.12, "ttft": 0.05}


@pytest.mark.parametrize(
    "extra, message",
    [
        ("slo: [latency.p99 < 1s, goodput >= 90%]\n", "slo[1]: 'goodput >= 90%': goodput needs per-request objectives"),
        ("slo: [goodput_qps > 5]\n", "goodput needs per-request objectives"),
        ("goodput: {scope: nowhere, ttft: 1s}\n", "goodput[0]: unknown scope 'nowhere'"),
        ("goodput: [{ttft: 1s}, {scope: fast/third, ttft: 1s}]\n", "goodput[1]: scope 'fast/third' must be"),
        ("goodput: {scope: fast}\n", "expected at least one per-request bound"),
        ("goodput: {itl: 10ms}\n", "goodput[0].itl: unknown field"),
        ("goodput: {ttft: soon}\n", "goodput[0].ttft"),
    ],
)
def test_mistakes_are_named(tmp_path, extra, message):
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, extra)
    assert message in str(e.value), str(e.value)
    assert "s.yaml:" in str(e.value)


def test_a_watch_window_judges_goodput_by_the_block_and_leaves_aborted_requests_unjudged():
    buf = RecordBuffer()
    lat = [0.05, 0.08, 0.12, 0.09, 0.3, 0.07]
    errors = ["", "", "", "http_5xx", "", "aborted"]
    for i, (latency, err) in enumerate(zip(lat, errors)):
        buf.append(i, 0, True, float(i), Outcome(sent=i, done=i + latency, status=200, error=err), 0.0)
    df = records_frame(pa.Table.from_batches([buf.drain()]))
    s = window_stats(df, 0.0, 10.0, [], {"latency": 0.1})
    # judged: all but the aborted one (5); good: succeeded within 100 ms (0.05, 0.08): 2 of 5
    assert s.goodput == 2 / 5 and s.aborted == 1 and s.errors == {"http_5xx": 1}
    assert s.goodput_qps == 2 / 10.0
    assert window_stats(df, 0.0, 10.0, [], None).goodput is None
    assert np.isnan(df["ttfat"]).all()
