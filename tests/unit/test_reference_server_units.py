"""Reference server, pure units: presets and flags, stop strings, stall schedule, roofline, sampling,
weights file, and the numpy model's KV cache against a full recompute."""

from __future__ import annotations

import numpy as np
import pytest

from reference_server.__main__ import config_from_args
from reference_server.config import ServerConfig
from reference_server.models.modelspec import get_spec
from reference_server.models.numpy_model import NumpyModel
from reference_server.models.sampling import StopMatcher, sample
from reference_server.models.sim import get_profile
from reference_server.models.weights import ensure_weights_file, read_weights_file
from reference_server.serving.faults import stall_remaining


@pytest.mark.parametrize("arch,preload,warmup,batch,cache", [
    ("naive", False, False, 1, 0),
    ("optimized", True, True, 32, 1024),
    ("batching", True, False, 32, 0),
    ("cache", False, False, 1, 1024),
])
def test_presets(arch, preload, warmup, batch, cache):
    c = ServerConfig.from_preset(arch)
    assert (c.preload, c.warmup, c.max_batch_size, c.cache_size) == (preload, warmup, batch, cache)
    assert c.host == "127.0.0.1" and c.port == 0


def test_overrides_flags_and_ms_aliases():
    c = ServerConfig.from_preset("optimized", cache_size=0, max_queue_delay_ms=5)
    assert c.cache_size == 0 and c.max_queue_delay_s == pytest.approx(0.005) and c.preload
    c = config_from_args(["--arch", "optimized", "--no-preload", "--max-batch-size", "4", "--slow-ms", "250",
                          "--stall-ms", "100", "--stall-every-s", "2", "--precision", "int8"])
    assert ((c.preload, c.warmup, c.max_batch_size, c.slow_s, c.stall_s, c.precision)
            == (False, True, 4, 0.25, 0.1, "int8"))
    with pytest.raises(ValueError, match="unknown server setting"):
        ServerConfig.from_preset("naive", bogus=1)
    with pytest.raises(ValueError, match="error_rate"):
        ServerConfig.from_preset("naive", error_rate=1.5)
    with pytest.raises(ValueError, match="arch"):
        ServerConfig.from_preset("fastest")


@pytest.mark.parametrize("stops,pieces,emitted,stopped", [
    ([], list("abc"), "abc", False),
    (["xy"], list("abxyz"), "ab", True),
    (["xy"], list("axaxb"), "axaxb", False),
    (["abc", "b"], list("zab"), "za", True),
    (["END"], list("xxEN"), "xx", False),  # "EN" is held back: it may still become END
])
def test_stop_matcher(stops, pieces, emitted, stopped):
    m = StopMatcher(stops)
    out, hit = "", False
    for p in pieces:
        text, hit = m.feed(p)
        out += text
        if hit:
            break
    assert (out, hit) == (emitted, stopped)


@pytest.mark.parametrize("t,expected", [(0.5, 0.0), (1.0, 0.2), (1.15, 0.05), (1.3, 0.0), (2.1, 0.1), (3.9, 0.0)])
def test_stall_schedule(t, expected):
    assert stall_remaining(t, 0.2, 1.0) == pytest.approx(expected)
    assert stall_remaining(t, 0.0, 1.0) == 0.0 and stall_remaining(t, 0.2, 0.0) == 0.0


def test_roofline_profiles():
    p = get_profile("h200-8b")
    assert p.decode_time(1, 0) == pytest.approx(8.03e9 * 2 / (4.8e12 * 0.8) + 0.0003)
    assert p.decode_time(32, 0) < 1.1 * p.decode_time(1, 0)  # memory bound: batching is nearly free
    assert p.decode_time(1, 100_000) > p.decode_time(1, 0)  # KV cache reads count
    assert p.prefill_time(4000) > 3 * p.prefill_time(1000) - 0.001  # compute bound
    assert get_profile("t4-1b").decode_time(1, 0) > p.decode_time(1, 0)
    with pytest.raises(ValueError, match="does not fit"):
        get_profile("t4-70b")
    with pytest.raises(ValueError, match="unknown sim profile"):
        get_profile("tpu-8b")


def test_sampling_is_printable_and_greedy_is_argmax():
    rng = np.random.default_rng(0)
    logits = np.zeros(256, dtype=np.float32)
    logits[10] = 100.0  # not printable: can never be picked
    logits[70] = 5.0
    assert sample(logits, 0.0, 1.0, rng) == 70
    assert sample(logits, 1.0, 0.01, rng) == 70  # a tiny nucleus is greedy
    picks = {sample(rng.standard_normal(256), 1.5, 1.0, rng) for _ in range(200)}
    assert all(32 <= t <= 126 for t in picks) and len(picks) > 20


def test_weights_file_written_once_and_reread(weights_dir):
    spec = get_spec("tiny")
    path = ensure_weights_file(spec, 0, weights_dir)
    mtime = path.stat().st_mtime_ns
    assert ensure_weights_file(spec, 0, weights_dir).stat().st_mtime_ns == mtime
    a, b = read_weights_file(path), read_weights_file(path)
    assert set(a) == set(spec.tensor_shapes()) and all(np.array_equal(a[k], b[k]) for k in a)
    assert sum(v.size for v in a.values()) == spec.parameter_count()
    assert 4_000_000 < get_spec("tiny").parameter_count() < 6_000_000
    assert 20_000_000 < get_spec("small").parameter_count() < 26_000_000
    assert 85_000_000 < get_spec("medium").parameter_count() < 95_000_000
    assert get_spec("1b").parameter_count() >= 1_000_000_000 and get_spec("1b").gpu_only


@pytest.fixture(scope="module")
def tiny_weights(weights_dir):
    return read_weights_file(ensure_weights_file(get_spec("tiny"), 0, weights_dir))


def test_kv_cache_decode_matches_full_recompute(tiny_weights):
    m = NumpyModel(get_spec("tiny"), tiny_weights)
    prompts = [list(b"hello world"), list(b"a much longer prompt here"), list(b"x")]
    caches = [m.new_cache(len(p) + 4) for p in prompts]
    for p, c in zip(prompts, caches):
        m.prefill(p, c)
    nxt = [65, 66, 67]
    batched = m.decode(nxt, caches)
    for p, t, row in zip(prompts, nxt, batched):
        full = m.prefill(p + [t], m.new_cache(len(p) + 1))
        np.testing.assert_allclose(row, full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_emulated_precisions_stay_close_to_fp32(tiny_weights, precision):
    spec = get_spec("tiny")
    ref = NumpyModel(spec, tiny_weights).prefill(list(b"precision"), NumpyModel(spec, tiny_weights).new_cache(16))
    low = NumpyModel(spec, tiny_weights, precision)
    out = low.prefill(list(b"precision"), low.new_cache(16))
    assert not np.array_equal(out, ref) and np.corrcoef(out, ref)[0, 1] > 0.98
