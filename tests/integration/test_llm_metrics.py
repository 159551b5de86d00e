"""LLM-aware metrics measured against servers whose timing is known (tests.servers.KnownServer in a subprocess):
tokens vs chunks, reasoning, goodput."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import pct, run

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
