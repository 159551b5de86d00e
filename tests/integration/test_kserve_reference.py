"""The reference server speaks KServe v2 (HTTP/JSON: infer; Triton's generate and generate_stream), measured by
latbench as a managed reference target."""

from __future__ import annotations

import pytest

from tests.helpers import run


def scenario(api: str, stream: bool, extra: str = "") -> str:
    return f"""
    name: k
    target:
      reference: {{arch: optimized, model: tiny, backend: numpy{extra}}}
      api: {api}
      stream: {str(stream).lower()}
    workload: {{prompts: {{input_tokens: 4, output_tokens: 12, distinct: 4}}, ignore_eos: true}}
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 1s, qps: 8}}
    """


@pytest.mark.parametrize("api, stream", [("kserve-v2", False), ("triton-generate", False), ("triton-generate", True)])
def test_reference_server_kserve_http(tmp_path, api, stream):
    _, s, df = run(tmp_path, scenario(api, stream))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 7, o["errors"]
    assert (df["output_tokens"] == 12).all()  # the server's own count: the reference model never stops early
    if stream:
        assert o["metrics"]["ttft"]["n"] == o["ok"]
        assert all(len(t) == n for t, n in zip(df["token_times"], df["output_tokens"]))
        assert (df["chunk_tokens_source"] == "chunk_usage").all()
    else:
        assert (df["prompt_tokens"] > 0).all()
