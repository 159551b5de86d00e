"""Reference server, the batched forward pass and the scheduler: packed and chunked prefill give the same
logits as one prompt at a time, decode is never starved by queued prompts, the step budget holds, and the
pre-encoded stream chunks are byte-identical to the generic encoder. The tiny model, numpy, no HTTP."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from reference_server.api.openai_protocol import ChunkTemplate, chunk, parse_request, sse
from reference_server.config import ServerConfig
from reference_server.models.backends import resolve_backend
from reference_server.models.modelspec import get_spec
from reference_server.models.numpy_model import NumpyModel
from reference_server.models.sim import get_profile
from reference_server.models.weights import ensure_weights_file, read_weights_file
from reference_server.serving.faults import FaultInjector
from reference_server.serving.gen_request import EventChannel, GenRequest
from reference_server.serving.metrics import Metrics
from reference_server.serving.scheduler import ServingEngine, model_step

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def model(weights_dir):
    return NumpyModel(get_spec("tiny"), read_weights_file(ensure_weights_file(get_spec("tiny"), 0, weights_dir)))


def prompts(n: int, seed: int = 0, lo: int = 5, hi: int = 90) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(32, 127, int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def test_packed_prefill_matches_one_prompt_at_a_time(model):
    ps = prompts(5)
    alone = [model.prefill(p, model.new_cache(len(p) + 2)) for p in ps]
    caches = [model.new_cache(len(p) + 2) for p in ps]
    packed = model.step(list(zip(ps, caches)))
    assert packed.shape == (5, 256)
    for row, ref, p, c in zip(packed, alone, ps, caches):
        np.testing.assert_allclose(row, ref, **TOL)
        assert c.length == len(p)
    # the caches a packed pass leaves behind decode exactly like those of single prefills
    solo = [model.new_cache(len(p) + 2) for p in ps]
    for p, c in zip(ps, solo):
        model.prefill(p, c)
    np.testing.assert_allclose(model.decode([70] * 5, caches), model.decode([70] * 5, solo), **TOL)


def test_chunked_prefill_mixed_with_decodes_matches_whole_prompt(model):
    long, other = prompts(1, seed=1, lo=150, hi=151)[0], prompts(1, seed=2)[0]
    whole = model.prefill(long, model.new_cache(len(long) + 1))
    running = model.new_cache(len(other) + 8)
    model.prefill(other, running)
    ref_running = model.new_cache(len(other) + 8)
    model.prefill(other, ref_running)
    chunked, at, token = model.new_cache(len(long) + 1), 0, 65
    for size in (1, 40, 64, 45):  # chunks of the long prompt, each in one pass with a decode of `other`
        out = model.step([([token], running), (long[at:at + size], chunked)])
        np.testing.assert_allclose(out[0], model.decode([token], [ref_running])[0], **TOL)
        at, token = at + size, token + 1
    assert at == len(long) and chunked.length == len(long)
    np.testing.assert_allclose(out[1], whole, **TOL)


def test_model_step_fallback_for_models_without_step(model):
    class PrefillDecodeOnly:  # the torch backend's interface
        def __init__(self, inner):
            self.new_cache, self.prefill, self.decode = inner.new_cache, inner.prefill, inner.decode

    ps = prompts(3, seed=3)
    running = [model.new_cache(len(p) + 4) for p in ps[:2]]
    for p, c in zip(ps[:2], running):
        model.prefill(p, c)
    ref = [model.new_cache(len(p) + 4) for p in ps[:2]]
    for p, c in zip(ps[:2], ref):
        model.prefill(p, c)
    segs = [([66], running[0]), (ps[2], model.new_cache(len(ps[2]))), ([67], running[1])]
    out = model_step(PrefillDecodeOnly(model))(segs)
    expect = model.step([([66], ref[0]), (ps[2], model.new_cache(len(ps[2]))), ([67], ref[1])])
    np.testing.assert_allclose(out, expect, **TOL)


def make_engine(weights_dir, model, **kw) -> ServingEngine:
    config = ServerConfig.from_preset("batching", model="tiny", backend="numpy", cache_dir=weights_dir,
                                      max_queue_delay_s=0, **kw)
    engine = ServingEngine(config, resolve_backend(config), Metrics("numpy"), FaultInjector(config),
                    logging.LoggerAdapter(logging.getLogger("test"), {}))
    engine.model, engine.state = model, "ready"
    return engine


class StepSpy:
    """The model, recording the segments of every pass."""

    chunked_prefill = True

    def __init__(self, inner):
        self.inner, self.passes = inner, []
        self.new_cache = inner.new_cache

    def step(self, segments):
        self.passes.append([len(t) for t, _ in segments])
        return self.inner.step(segments)


def test_decode_is_not_starved_by_queued_prompts(weights_dir, model):
    engine = make_engine(weights_dir, model, max_step_tokens=64)
    engine.model = spy = StepSpy(model)
    first = GenRequest(list(b"short prompt"), max_tokens=60)
    engine._waiting.append(first)
    assert engine._wait_for_work()
    engine._iterate()
    assert first in engine._running and first.n_generated == 1
    queued = [GenRequest(p, max_tokens=4) for p in prompts(6, seed=4, lo=100, hi=200)]
    engine._waiting.extend(queued)
    started_at = {}
    for step in range(1, 60):
        before = first.n_generated
        assert engine._wait_for_work()
        engine._iterate()
        assert first.n_generated == before + 1  # the running stream got its token in this step
        assert sum(spy.passes[-1]) <= 64  # the step budget holds, decodes included
        for i, r in enumerate(queued):
            if r.n_generated and i not in started_at:
                started_at[i] = step
        if len(started_at) == len(queued):
            break
    assert len(started_at) == len(queued), "queued prompts never finished prefilling"
    assert [started_at[i] for i in range(len(queued))] == sorted(started_at.values())  # oldest first
    assert any(len(p) > 2 and max(p) > 1 for p in spy.passes)  # prompt chunks and decodes shared passes


def test_one_at_a_time_takes_whole_prompts(weights_dir, model):
    engine = make_engine(weights_dir, model, max_batch_size=1, max_step_tokens=16)
    req = GenRequest(prompts(1, seed=5, lo=80, hi=81)[0], max_tokens=2)
    engine._waiting.append(req)
    assert engine._wait_for_work()
    engine._iterate()  # the whole 80-token prompt in one pass despite the 16-token budget
    assert req.prefilled == 80 and req.n_generated == 1


def test_chunk_template_is_byte_identical_to_the_generic_encoder():
    for kind, body in (("chat", {"messages": [{"role": "user", "content": "hi"}]}), ("completion", {"prompt": "hi"})):
        for usage in (False, True):
            req = parse_request(dict(body, model="tiny", stream=True, stream_options={"include_usage": usage}),
                                kind, served_model="tiny", max_model_len=2048, default_max_tokens=8)
            template = ChunkTemplate(req, "id-1", 1700000000)
            for text in ("a", '"', "\\", "é", "\n", "</script>"):
                assert template.encode(text) == sse(chunk(req, "id-1", 1700000000, text))


def test_event_channel_hands_over_everything_buffered():
    async def main():
        ch = EventChannel(asyncio.get_running_loop())
        reader = asyncio.ensure_future(ch.get_all())
        await asyncio.sleep(0)
        ch.put_nowait(("text", "a"))
        assert await reader == [("text", "a")]
        for ev in (("text", "b"), ("text", "c"), ("done", "length", 3)):
            ch.put_nowait(ev)
        assert await ch.get() == ("text", "b")
        assert await ch.get_all() == [("text", "c"), ("done", "length", 3)]

    asyncio.run(main())


def test_sim_step_time_reduces_to_prefill_and_decode():
    p = get_profile("h200-8b")
    assert p.step_time(0, 0, 1000) == pytest.approx(p.prefill_time(1000))
    assert p.step_time(16, 4000, 0) == pytest.approx(p.decode_time(16, 4000))
    assert p.step_time(16, 4000, 1000) >= max(p.prefill_time(1000), p.decode_time(16, 4000)) - 1e-9


def test_step_split_over_compute_threads_matches_one_thread(model, weights_dir):
    two = NumpyModel(get_spec("tiny"), read_weights_file(ensure_weights_file(get_spec("tiny"), 0, weights_dir)),
                     threads=2)
    ps = prompts(5, seed=6, lo=60, hi=120)
    assert len(two._split([(p, None) for p in ps])) == 2  # large enough to split
    a = [model.new_cache(len(p) + 2) for p in ps]
    b = [two.new_cache(len(p) + 2) for p in ps]
    np.testing.assert_allclose(two.step(list(zip(ps, b))), model.step(list(zip(ps, a))), **TOL)
    np.testing.assert_allclose(two.decode([71] * 5, b), model.decode([71] * 5, a), **TOL)  # small: one group
    assert [c.length for c in b] == [len(p) + 1 for p in ps]


def test_several_prompts_share_a_step_with_two_step_threads(weights_dir, model):
    engine = make_engine(weights_dir, model, max_step_tokens=128, step_threads=2)
    engine.model = spy = StepSpy(model)
    engine._waiting.extend(GenRequest(p, max_tokens=2) for p in prompts(3, seed=7, lo=150, hi=200))
    assert engine._wait_for_work()
    engine._iterate()
    assert spy.passes[0] == [64, 64]  # two prompts, half the budget each, run side by side
