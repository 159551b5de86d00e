"""The report's server panel against vLLM's real /metrics names, driven by a real short latbench run.

The target is tests/vllm_like.py: a real aiohttp server on 127.0.0.1 that streams like vLLM and serves the
/metrics text recorded from a real vLLM 0.32.0, with the values of the families it drives replaced by
what it did (queue, running, KV-cache share, prefix-cache hits, TTFT histogram).
"""

import json
import re
import sys

import numpy as np
import pandas as pd
import pytest

from loadgen.engine.scrape import parse_samples
from reports import write_outputs
from reports.server import panel_series, ttft_comparison
from tests.helpers import run
from tests.vllm_like import RECORDED, VllmLikeServer

TTFT_S = 0.03  # the fixture's arrival -> first token


@pytest.fixture
def vllm_like():
    srv = VllmLikeServer(ttft=TTFT_S, queue=0.005, gap=0.005, tokens=16, kv_per_request=0.125).start()
    yield srv
    srv.stop()


def test_the_recorded_text_is_real_vllm_output_with_todays_names():
    names = {n for n, _, _ in parse_samples(RECORDED.read_text())}
    assert {"vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
            "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds_count",
            "vllm:time_to_first_token_seconds_bucket", "vllm:request_queue_time_seconds_sum"} <= names
    assert not any(n.startswith("vllm:gpu_") for n in names)  # the names of older vLLM are gone


def test_a_latbench_run_against_a_vllm_like_server_fills_the_kv_prefix_queue_and_ttft_panels(tmp_path, vllm_like):
    text = f"""
    name: vllm-like
    target:
      url: {vllm_like.root}/v1
      stream: true
      metrics_url: {vllm_like.root}/metrics
    workload: {{prompts: {{input_tokens: 16, output_tokens: 16, distinct: 4}}, ignore_eos: true}}
    load:
      arrival: poisson
      seed: 3
      phases:
        - {{name: main, duration: 5s, qps: 10}}
    """
    res, summary, df = run(tmp_path, text)
    assert res.exit_code == 0, res.reasons
    tdir = res.rundir.path / res.targets[0].dir
    scraped = pd.read_csv(tdir / "server_metrics.csv", keep_default_na=False)
    assert scraped["time"].nunique() >= 4  # one scrape a second over 5 s

    panels = {title: s.dropna() for title, _, s in panel_series(scraped)}
    want = {"requests running", "queued requests", "queue time", "KV cache usage", "prefix cache hit rate"}
    assert want <= set(panels)
    kv = panels["KV cache usage"]
    assert kv.between(0, 100).all() and np.allclose(kv % 12.5, 0)  # 12.5% per running request, in percent
    assert (panels["queue time"] >= 5.0).all() and (panels["queue time"] < 50).all()  # ms: the fixture's 5 ms wait
    hit = panels["prefix cache hit rate"]
    assert hit.iloc[-1] == 100.0 and hit.min() < 100.0  # 4 distinct prompts: misses only at the start

    cmp = ttft_comparison(scraped, df)
    assert cmp is not None
    assert cmp["engine_requests"] == cmp["latbench_requests"] > 20  # latbench was the only client
    assert TTFT_S * 1e3 <= cmp["engine_ms"] < TTFT_S * 1e3 + 15
    # latbench counts from the intended send, the engine from arrival: latbench's figure is the larger,
    # and the difference (client, loopback, HTTP server) is small on 127.0.0.1
    assert cmp["latbench_ms"] >= cmp["latbench_sent_ms"] > cmp["engine_ms"]
    assert 0 < cmp["outside_ms"] < 30

    write_outputs(res.rundir.path)
    html = (res.rundir.path / "report.html").read_text()
    assert "TTFT: engine vs latbench" in html and "KV cache usage" in html and "prefix cache hit rate" in html
    m = re.search(r"the engine&#39;s own ([\d.]+) ms|the engine's own ([\d.]+) ms", html)
    assert m and abs(float(m.group(1) or m.group(2)) - cmp["engine_ms"]) < 0.1


def test_a_command_target_names_its_port_in_metrics_url(tmp_path):
    """What scenarios/engines/vllm.yaml does: latbench starts the engine and scrapes http://127.0.0.1:{port}/metrics."""
    text = """
    name: engine-command
    target:
      command:
        run: [PYTHON, -m, tests.vllm_like, --port, "{port}"]
        url: "http://127.0.0.1:{port}/v1"
        ready_url: "http://127.0.0.1:{port}/v1/models"
        startup_timeout: 30s
      metrics_url: "http://127.0.0.1:{port}/metrics"
    workload: {prompts: {input_tokens: 16, output_tokens: 16, distinct: 4}, ignore_eos: true}
    load:
      phases:
        - {name: main, duration: 3s, qps: 5}
    """.replace("PYTHON", json.dumps(sys.executable))
    res, summary, df = run(tmp_path, text)
    assert res.exit_code == 0, res.reasons
    assert summary["overall"]["ok"] > 5 and summary["model"] == "tiny-llama"
    scraped = pd.read_csv(res.rundir.path / res.targets[0].dir / "server_metrics.csv", keep_default_na=False)
    assert "vllm:kv_cache_usage_perc" in set(scraped["metric"]) and scraped["time"].nunique() >= 2
    count = scraped[scraped["metric"] == "vllm:time_to_first_token_seconds_count"].groupby("time")["value"].sum()
    assert count.iloc[-1] > count.iloc[0]  # the engine started by latbench is the one scraped
