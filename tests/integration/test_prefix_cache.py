"""Reference server, prefix cache: block chains, a hit computes only the rest of the prompt (with the same
logits as a whole prefill), hits and queries are counted in tokens, least recently used blocks are evicted
tail first, and a real server answers a repeated prefix sooner than a cold one. The tiny model, numpy."""

from __future__ import annotations

import json
import logging
import statistics
import time
import urllib.request

import numpy as np
import pytest

from reference_server.__main__ import check_config, config_from_args
from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig
from reference_server.models.backends import resolve_backend
from reference_server.models.modelspec import get_spec
from reference_server.models.numpy_model import NumpyModel
from reference_server.models.weights import ensure_weights_file, read_weights_file
from reference_server.serving.faults import FaultInjector
from reference_server.serving.gen_request import GenRequest
from reference_server.serving.metrics import Metrics
from reference_server.serving.prefix_cache import BLOCK_TOKENS, PrefixCache, block_hashes
from reference_server.serving.scheduler import ServingEngine, model_step

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def model(weights_dir):
    return NumpyModel(get_spec("tiny"), read_weights_file(ensure_weights_file(get_spec("tiny"), 0, weights_dir)))


def tokens(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(32, 127, n).tolist()


def sample(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name, {"backend": "numpy"})


@pytest.mark.parametrize("argv, on, blocks", [
    (["--arch", "naive"], False, 0),
    (["--arch", "optimized"], True, 0),
    (["--arch", "batching"], False, 0),
    (["--arch", "optimized", "--no-prefix-cache"], False, 0),
    (["--arch", "naive", "--prefix-cache", "--prefix-cache-blocks", "100"], True, 100),
])
def test_the_knob_is_on_in_the_optimized_preset_only(argv, on, blocks):
    c = config_from_args(argv)
    assert (c.prefix_cache, c.prefix_cache_blocks) == (on, blocks)


def test_bad_prefix_cache_settings_are_named():
    assert check_config(["--prefix-cache-blocks", "-1"]) == ["prefix_cache_blocks: must be >= 0, got -1"]
    assert check_config(["--prefix-cache-blocks", "many"])[0].startswith("prefix_cache_blocks: invalid int value")


def test_block_hashes_chain_the_whole_prefix():
    a = tokens(70, 1)
    h = block_hashes(a)
    assert len(h) == 70 // BLOCK_TOKENS == 4 and len(set(h)) == 4  # the partial last block has none
    assert block_hashes(a[:48] + tokens(30, 2))[:3] == h[:3]  # same first 48 tokens: same first three blocks
    changed = [a[0] + 1] + a[1:]
    assert not set(block_hashes(changed)) & set(h)  # one token differs in block 0: no later block matches either


def test_a_hit_computes_only_the_rest_with_the_same_logits(model):
    default = PrefixCache(model, Metrics("numpy"))
    assert default.capacity == (256 << 20) // (12288 * BLOCK_TOKENS) == 1365  # tiny: 12 KiB of K and V a token
    pc = PrefixCache(model, Metrics("numpy"), capacity=64)
    shared, first, second = tokens(100, 3), tokens(37, 4), tokens(21, 5)
    cache = model.new_cache(140)
    hashes, hit = pc.attach(shared + first, cache)
    assert hit == 0 and cache.length == 0  # cold
    model.step([(shared + first, cache)])
    assert pc.store(hashes, cache, 0, len(shared) + len(first)) == (100 + 37) // BLOCK_TOKENS == 8
    warm = model.new_cache(130)
    hashes, hit = pc.attach(shared + second, warm)
    assert hit == warm.length == 96  # six whole blocks of the shared 100 tokens; the seventh differs
    logits = model.step([((shared + second)[hit:], warm)])[0]
    whole = model.prefill(shared + second, model.new_cache(130))
    np.testing.assert_allclose(logits, whole, **TOL)
    # a prompt entirely cached still computes its last token: the first output token needs its logits
    again = model.new_cache(140)
    _, hit = pc.attach(shared[:96], again)
    assert hit == 80


def test_eviction_is_least_recently_used_and_takes_a_chain_from_its_tail(model):
    metrics = Metrics("numpy")
    pc = PrefixCache(model, metrics, capacity=4)
    a, b = tokens(3 * BLOCK_TOKENS + 1, 6), tokens(3 * BLOCK_TOKENS + 1, 7)
    for prompt in (a, b):
        cache = model.new_cache(len(prompt))
        hashes, _ = pc.attach(prompt, cache)
        model.step([(prompt, cache)])
        pc.store(hashes, cache, 0, len(prompt))
    assert len(pc) == 4 and sample(metrics, "refserver:prefix_cache_evictions_total") == 2
    _, hit_a = pc.attach(a, model.new_cache(len(a)))
    _, hit_b = pc.attach(b, model.new_cache(len(b)))
    assert hit_a == BLOCK_TOKENS  # a's tail went first: its head block still serves
    assert hit_b == 3 * BLOCK_TOKENS
    assert sample(metrics, "refserver:prefix_cache_blocks") == 4
    assert sample(metrics, "refserver:prefix_cache_capacity_blocks") == 4


def make_engine(weights_dir, model, prefix: bool) -> ServingEngine:
    config = ServerConfig.from_preset("optimized", model="tiny", backend="numpy", cache_dir=weights_dir,
                                      max_queue_delay_s=0, step_threads=1, max_step_tokens=64,
                                      prefix_cache=prefix)
    engine = ServingEngine(config, resolve_backend(config), Metrics("numpy"), FaultInjector(config),
                    logging.LoggerAdapter(logging.getLogger("test"), {}))
    engine.model, engine.state = model, "ready"
    if prefix:
        engine.prefix = PrefixCache(model, engine.metrics, config.prefix_cache_blocks)
    return engine


def generate(engine: ServingEngine, prompt: list[int], n: int = 6) -> tuple[GenRequest, list[int], int]:
    """Run one request to its end; (the request, its tokens, prompt tokens the engine prefilled)."""
    before = sample(engine.metrics, "refserver:prompt_tokens_total")
    req = GenRequest(prompt, max_tokens=n)
    engine._waiting.append(req)
    out = []
    while req.n_generated < n:
        assert engine._wait_for_work()
        done = req.n_generated
        engine._iterate()
        if req.n_generated > done:
            out.append(req.last_token)
    return req, out, int(sample(engine.metrics, "refserver:prompt_tokens_total") - before)


def test_engine_skips_the_cached_prefix_counts_it_and_answers_the_same(weights_dir, model):
    engine, plain = make_engine(weights_dir, model, True), make_engine(weights_dir, model, False)
    shared = tokens(200, 8)
    prompts = [shared + tokens(40, 9 + i) for i in range(3)]
    prefilled = []
    for p in prompts:
        _, got, n = generate(engine, p)
        _, ref, _ = generate(plain, p)
        assert got == ref  # greedy answers as without the cache
        prefilled.append(n)
    # chunked prefill (64-token steps) stores blocks as they complete: the later prompts skip 192 tokens
    assert prefilled == [240, 48, 48]
    queries = sample(engine.metrics, "refserver:prefix_cache_queries_total")
    hits = sample(engine.metrics, "refserver:prefix_cache_hits_total")
    assert (queries, hits) == (720, 384)
    assert sample(engine.metrics, "refserver:prefix_cache_hit_rate") == pytest.approx(384 / 720)
    assert plain.prefix is None and "prefix_cache" not in plain.metrics.render().decode()


def test_fallback_step_continues_a_prompt_after_a_cached_prefix(model):
    class PrefillDecodeOnly:  # the torch backend's interface: prefill continues what the cache holds
        def __init__(self, inner):
            self.new_cache, self.prefill, self.decode = inner.new_cache, inner.prefill, inner.decode

    prompt, running = tokens(80, 20), tokens(30, 21)
    pc = PrefixCache(model, Metrics("numpy"), capacity=16)
    cache = model.new_cache(90)
    hashes, _ = pc.attach(prompt, cache)
    model.prefill(prompt, cache)
    pc.store(hashes, cache, 0, len(prompt))
    warm, run_cache = model.new_cache(90), model.new_cache(40)
    _, hit = pc.attach(prompt[:40] + tokens(10, 22), warm)
    model.prefill(running, run_cache)
    ref_run = model.new_cache(40)
    model.prefill(running, ref_run)
    tail = (prompt[:40] + tokens(10, 22))[hit:]
    out = model_step(PrefillDecodeOnly(model))([([70], run_cache), (tail, warm)])
    np.testing.assert_allclose(out[0], model.decode([70], [ref_run])[0], **TOL)
    np.testing.assert_allclose(out[1], model.prefill(prompt[:40] + tokens(10, 22), model.new_cache(60)), **TOL)
    assert hit == 32 and warm.length == 50


def _ttft(url: str, system: str, user: str) -> float:
    """Seconds from sending a streamed chat request to its first content chunk."""
    body = json.dumps({"model": "tiny", "stream": True, "max_tokens": 2,
                       "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
    req = urllib.request.Request(url + "/v1/chat/completions", body.encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as resp:  # a deadline against a hang (a busy host is slow)
        for line in resp:
            if line.startswith(b"data: {") and b'"content":"' in line and b'"content":""' not in line:
                return time.perf_counter() - t0
    raise AssertionError("no content chunk")


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_a_repeated_prefix_answers_sooner_than_a_cold_one(weights_dir):
    words = "the of and to in is it you that he was for on are as with his they at be".split()
    rng = np.random.default_rng(30)
    systems = [" ".join(rng.choice(words, 300)) for _ in range(3)]  # ~1000 bytes each, distinct
    config = ServerConfig.from_preset("optimized", model="tiny", backend="numpy", cache_dir=weights_dir)
    assert config.prefix_cache  # on in the optimized preset
    with BackgroundServer(config) as srv:
        cold = [_ttft(srv.url, s, f"question {i}") for i, s in enumerate(systems)]
        warm = [_ttft(srv.url, s, f"another question {i}") for i, s in enumerate(systems)]
        text = _metrics(srv.url)
    assert statistics.median(warm) < 0.6 * statistics.median(cold), (cold, warm)
    hits = [float(line.split()[-1]) for line in text.splitlines()
            if line.startswith("refserver:prefix_cache_hits_total")]
    assert hits and hits[0] >= 3 * 960  # each warm request found its system prompt's blocks
    off = ServerConfig.from_preset("optimized", model="tiny", backend="numpy", cache_dir=weights_dir,
                                   prefix_cache=False)
    with BackgroundServer(off) as srv:
        assert "prefix_cache" not in _metrics(srv.url)
