"""The vLLM adapter against a live vLLM (its CPU build, from ``python benchmarks/peer_setup.py vllm``): a short
latbench run whose summary.json reads vLLM's own queue, running requests, KV-cache usage and TTFT per phase by
their real names, its engine TTFT beside latbench's. Skips where vLLM's venv is not installed (it takes minutes to
start on a small machine: the suite elsewhere never waits for it)."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from benchmarks.real_engines import Engine, write_model
from tests.helpers import live_vllm, run

pytestmark = live_vllm()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm")
    write_model(work / "model")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    eng = Engine(work / "model", port, work / "vllm.log", [])
    yield eng
    os.killpg(eng.proc.pid, signal.SIGTERM)
    eng.proc.wait(60)


def test_a_live_vllm_is_read_by_its_own_names(tmp_path, vllm):
    res, summary, df = run(tmp_path, f"""
    name: vllm-live
    target:
      url: {vllm.root}/v1
      metrics_url: {vllm.root}/metrics
      stream: true
    workload: {{prompts: {{input_tokens: 32, output_tokens: 8}}, ignore_eos: true}}
    load:
      arrival: constant
      host_wait_limit: 1
      phases: [{{name: main, duration: 4s, qps: 2}}]
    """)
    assert res.exit_code == 0, res.reasons
    t = summary["telemetry"]
    assert t["engine"] == "vllm" and t["engine_chosen"] == "auto"
    q = t["phases"]["main"]["quantities"]
    assert q["server.queue_waiting"]["source"] == "vllm:num_requests_waiting"
    assert q["server.requests_running"]["source"] == "vllm:num_requests_running"
    kv = q["server.kv_cache_usage"]
    assert kv["source"] == "vllm:kv_cache_usage_perc" and 0 <= kv["max"] <= 1
    ttft = q["server.ttft"]
    assert ttft["source"] == "vllm:time_to_first_token_seconds" and ttft["count"] == pytest.approx(len(df), abs=2)
    ours = summary["phases"]["main"]["metrics"]["ttft"]["mean"]
    assert 0 < ttft["mean"] <= ours  # the engine counts from arrival, latbench from the intended send
