"""``reset: prefix_cache`` against a real vLLM (its CPU build, the tiny dummy-weight Llama of benchmarks/): latbench
starts it as a ``command:`` target with a reset asked, which sets ``VLLM_SERVER_DEV_MODE=1`` for it, and the reset
empties its prefix cache: a request sharing a cached prefix finds it before the reset and nothing of it after.

Skipped unless ``python benchmarks/peer_setup.py vllm`` has set the peer venv up (it is not a latbench dependency);
vLLM takes a minute or more to start on 2 cores, so the module runs alone.
"""

from __future__ import annotations

import pytest

from benchmarks import peer_setup
from loadgen.fetch import fetch
from loadgen.run.reset import reset_state
from loadgen.run.targets import start_managed
from loadgen.scenario.model import Target
from loadgen.scenario.reset import Reset
from tests.helpers import live_vllm

pytestmark = [pytest.mark.alone, live_vllm()]

PROMPT = "the quick brown fox jumps over the lazy dog and then some more words follow here " * 12


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    from benchmarks.real_engines import write_model

    model = tmp_path_factory.mktemp("tiny-llama") / "model"
    write_model(model)
    target = Target.model_validate({"command": {
        "run": ["env", "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_TARGET_DEVICE=cpu",
                "VLLM_CPU_KVCACHE_SPACE=1", str(peer_setup.peer_bin("vllm", "vllm")), "serve", str(model),
                "--load-format", "dummy", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", "tiny",
                "--max-model-len", "1024", "--enable-prefix-caching"],
        "url": "http://127.0.0.1:{port}/v1", "ready_url": "http://127.0.0.1:{port}/v1/models",
        "startup_timeout": "10m"}, "reset": "prefix_cache"})
    server = start_managed(target)
    try:
        yield f"http://127.0.0.1:{server.config['port']}"
    finally:
        server.stop()


def hits(root: str) -> float:
    text = fetch("GET", root + "/metrics").body.decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prefix_cache_hits_total"))


def chat(root: str, text: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    assert fetch("POST", root + "/v1/chat/completions", json=body, deadline_s=120).ok


def test_a_vllm_latbench_starts_serves_the_reset_and_its_cache_empties(vllm):
    chat(vllm, PROMPT + "first question")
    before = hits(vllm)
    chat(vllm, PROMPT + "second question")
    assert hits(vllm) - before >= 128  # the shared prefix found cached, in blocks of 16

    out = reset_state(Reset(what="prefix_cache"), vllm + "/v1")  # the engine told by its /metrics names
    assert (out.done, out.status, out.engine, out.found_by) == (True, 200, "vllm", "metrics"), out
    assert out.text == "prefix cache reset before the run (vLLM, POST /reset_prefix_cache: HTTP 200)"

    before = hits(vllm)
    chat(vllm, PROMPT + "third question")  # the first request after the reset: nothing of the prefix is left
    assert hits(vllm) - before == 0
