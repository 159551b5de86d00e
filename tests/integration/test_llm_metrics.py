"""LLM-aware metrics measured against servers whose timing is known (tests.servers.KnownServer in a subprocess):
tokens vs chunks, reasoning, goodput."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.analysis.metrics import records_frame
from loadgen.records.schema import read_records
from tests.helpers import pct, run

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)

TTFT, GAP, TOKENS = 0.08, 0.01, 20


def scenario(url, phases="        - {name: main, duration: 2s, qps: 10}", target_extra="", extra=""):
    return f"""
    name: t
    target: {{url: "{url}", stream: true{target_extra}}}
    workload: {{prompts: {{input_tokens: 16, output_tokens: 20, distinct: 10}}}}
    load:
      arrival: constant
      phases:
{phases}
    {extra}
    """


@pytest.mark.parametrize("per_chunk_usage, source", [(True, "chunk_usage"), (False, "usage_spread")])
def test_multi_token_chunks_per_token_itl_is_the_truth(tmp_path, known_server, per_chunk_usage, source):
    """First token alone at 80 ms, then 4 tokens a chunk, one token produced every 10 ms: the per-token ITL is
    10 ms, the gap between chunks 40 ms, and the run says streams carried several tokens per chunk."""
    srv = known_server(ttft=TTFT, gap=GAP, tokens=TOKENS, per_chunk=4)
    extra = ", continuous_usage_stats: true" if per_chunk_usage else ""
    _, s, df = run(tmp_path, scenario(srv.url, target_extra=extra))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 18
    assert (df["chunk_tokens_source"] == source).all()
    assert all(list(c) == [1, 4, 4, 4, 4, 3] for c in df["chunk_tokens"])
    itl = pct(o, "itl", "p50")
    assert abs(itl - GAP) < 0.001, itl  # the acceptance: within 1 ms of the truth
    assert pct(o, "chunk_gap", "p50") == pytest.approx(4 * GAP, abs=0.002)
    assert o["metrics"]["itl"]["n"] == o["ok"] * (TOKENS - 1)  # one sample per token after the first
    assert o["metrics"]["chunk_gap"]["n"] == o["ok"] * 5
    assert o["chunks"]["tokens_per_chunk"] == pytest.approx(19 / 5)
    assert o["chunks"]["multi_token_fraction"] == pytest.approx(1.0)
    assert o["chunks"]["sources"] == {source: o["ok"]}
    assert any("tokens per chunk" in n and "itl is per token" in n for n in s["notes"])
    print(f"per-token itl p50 {itl * 1e3:.2f} ms (truth 10 ms), chunk gap p50 "
          f"{pct(o, 'chunk_gap', 'p50') * 1e3:.2f} ms, source {source}")


def test_one_token_chunks_itl_equals_chunk_gap(tmp_path, known_server):
    srv = known_server(ttft=TTFT, gap=GAP, tokens=TOKENS)
    _, s, df = run(tmp_path, scenario(srv.url))
    o = s["overall"]
    assert (df["chunk_tokens_source"] == "usage_spread").all()  # 20 tokens in 20 chunks: one each
    assert o["metrics"]["itl"]["percentiles"] == o["metrics"]["chunk_gap"]["percentiles"]
    assert pct(o, "itl", "p50") == pytest.approx(GAP, abs=0.002)
    assert o["chunks"]["multi_token_fraction"] == 0.0
    assert not any("tokens per chunk" in n for n in s["notes"])
    assert np.isclose(o["chunks"]["tokens_per_chunk"], 1.0)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_time_to_first_answer_token(tmp_path, known_server, field):
    """5 reasoning tokens before the answer: TTFT is the first token of any kind (80 ms), the time to the first
    answer token is 80 + 5 x 10 = 130 ms, and the reasoning is counted apart."""
    srv = known_server(ttft=TTFT, gap=GAP, tokens=TOKENS, reasoning=5, reasoning_field=field)
    _, s, df = run(tmp_path, scenario(srv.url, extra="slo: [ttfat.p50 < 140ms, ttfat.p50 > 120ms]"))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 18
    ttft, ttfat = pct(o, "ttft", "p50"), pct(o, "ttfat", "p50")
    assert TTFT <= ttft < TTFT + 0.01
    truth = TTFT + 5 * GAP
    assert truth <= ttfat < truth + 0.01  # the server sleeps at least that long; above it is loopback and load
    # the acceptance, host delay aside: per request, the first answer came 5 tokens (50 ms) after the first token
    assert pct(o, "reasoning_time", "p50") == pytest.approx(5 * GAP, abs=0.002)
    assert (df["reasoning_tokens"] == 5).all() and (df["output_tokens"] == TOKENS).all()
    assert o["reasoning"] == {"requests": o["ok"], "tokens": 5 * o["ok"], "tokens_mean": 5.0}
    assert [r["passed"] for r in s["slo"]] == [True, True]
    print(f"ttft p50 {ttft * 1e3:.2f} ms (truth 80), ttfat p50 {ttfat * 1e3:.2f} ms (truth 130)")


def test_no_reasoning_no_reasoning_time(tmp_path, known_server):
    srv = known_server(ttft=TTFT, gap=GAP, tokens=5)
    _, s, df = run(tmp_path, scenario(srv.url, phases="        - {name: main, duration: 1s, qps: 10}"))
    o = s["overall"]
    assert (df["first_answer"] == df["first_token"]).all()  # the first token was an answer
    assert o["metrics"]["reasoning_time"]["n"] == 0 and o["reasoning"]["requests"] == 0
    assert o["metrics"]["ttfat"]["percentiles"] == o["metrics"]["ttft"]["percentiles"]


def _hand_count(df, bound_by_phase: dict[int, float]) -> tuple[int, int]:
    """(good, judged) counted by hand from the records: succeeded and latency within its phase's bound."""
    good = judged = 0
    for _, r in df[df["recorded"]].iterrows():
        if r["phase"] not in bound_by_phase:
            continue
        judged += 1
        good += int(r["error"] == "" and r["done"] - r["scheduled"] <= bound_by_phase[r["phase"]])
    return good, judged


def test_goodput_equals_a_hand_count_per_scope(tmp_path, known_server):
    """Two targets of known latency (50 ms and 150 ms), two phases, scoped per-request bounds: goodput per target
    and phase is what a hand count over the records gives, and what the known latencies say it must be."""
    fast, slow = known_server(delay=0.05), known_server(delay=0.15)
    text = f"""
    name: g
    targets:
      - {{name: fast, url: "{fast.url}", stream: false}}
      - {{name: slow, url: "{slow.url}", stream: false}}
    workload: {{prompts: {{input_tokens: 8, output_tokens: 4, distinct: 4}}}}
    load:
      arrival: constant
      phases:
        - {{name: first, duration: 1s, qps: 20}}
        - {{name: second, duration: 1s, qps: 20}}
    goodput:
      - {{latency: 100ms}}
      - {{scope: slow, latency: 200ms}}
      - {{scope: slow/second, latency: 120ms}}
    slo:
      - "fast: goodput >= 99%"
      - "slow: goodput >= 99%"
    """
    result, _, _ = run(tmp_path, text)
    truth = {("fast", "first"): 1.0, ("fast", "second"): 1.0, ("slow", "first"): 1.0, ("slow", "second"): 0.0}
    bounds = {"fast": {0: 0.1, 1: 0.1}, "slow": {0: 0.2, 1: 0.12}}
    for t in result.targets:
        tdir = result.rundir.path / t.dir
        s = json.loads((tdir / "summary.json").read_text())
        df = records_frame(read_records(tdir / "requests.parquet"))
        for i, phase in enumerate(("first", "second")):
            good, judged = _hand_count(df[df["phase"] == i], bounds[t.name])
            ph = s["phases"][phase]
            assert ph["goodput"] == good / judged == truth[(t.name, phase)], (t.name, phase)
            done = df[(df["phase"] == i) & df["ok"]]
            in_window = done[(done["done"] >= ph["start"]) & (done["done"] < ph["end"])]
            n_good = int((in_window["latency"] <= bounds[t.name][i]).sum())
            assert ph["goodput_qps"] == pytest.approx(n_good / ph["duration_s"])
        good, judged = _hand_count(df, bounds[t.name])
        assert s["overall"]["goodput"] == pytest.approx(good / judged)
        print(f"{t.name}: goodput {s['overall']['goodput']:.3f} (hand count {good}/{judged}), per phase "
              f"{s['phases']['first']['goodput']:.3f} / {s['phases']['second']['goodput']:.3f}")
        passed = {r["expr"]: r["passed"] for r in s["slo"] if r["applies"]}
        assert passed == ({"fast: goodput >= 99%": True} if t.name == "fast" else {"slow: goodput >= 99%": False})


def test_no_goodput_block_no_goodput(tmp_path, known_server):
    """Objectives on means or percentiles do not make per-request bounds: without goodput: there is none."""
    srv = known_server(delay=0.05)
    _, s, _ = run(tmp_path, scenario(srv.url, phases="        - {name: main, duration: 1s, qps: 10}",
                                     extra="slo: [latency.mean < 10ms, latency.p99 < 20ms]"))
    assert s["overall"]["goodput"] is None and s["overall"]["goodput_qps"] is None
    assert s["phases"]["main"]["goodput"] is None
