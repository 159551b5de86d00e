"""The front ends' one way into the serving engine: a parsed request goes through the fault plan, then is answered
from the result cache or submitted to the engine; its events come back in batches, and the finished answer is
remembered. The OpenAI routes (:mod:`.openai_routes`) and KServe (:mod:`.kserve`) format what comes out."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from ..config import ServerConfig
from ..models.backends import ResolvedBackend
from ..serving.faults import FaultInjector, FaultPlan
from ..serving.gen_request import EngineFailed, GenRequest, QueueFull
from ..serving.metrics import Metrics
from ..serving.result_cache import CachedResult, ResultCache, cache_key
from ..serving.scheduler import ServingEngine
from .counting import ByteCounter, TokenizerCounter
from .openai_protocol import (
    ApiError,
    ParsedRequest,
)


@dataclass
class ServerState:
    """Everything the handlers share; one per server."""

    config: ServerConfig
    resolved: ResolvedBackend
    engine: ServingEngine
    metrics: Metrics
    faults: FaultInjector
    cache: ResultCache | None
    log: logging.LoggerAdapter
    served_model: str
    started: float  # perf_counter at start (fault stall schedule)
    started_wall: float = 0.0  # time.time at start (model card "created")
    counter: ByteCounter | TokenizerCounter = field(default_factory=ByteCounter)  # what usage counts


async def _stall_gate(state: ServerState) -> None:
    remaining = state.faults.stall_remaining(time.perf_counter() - state.started)
    if remaining > 0:
        await asyncio.sleep(remaining)


async def _engine_events(gen: GenRequest, deadline: float | None):
    """The engine's events for ``gen`` in batches (lists: everything that arrived together), ending with
    the final one; ApiError 504 at ``deadline`` (a loop timer, not a timeout per event)."""
    timer = None
    if deadline is not None:
        timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.perf_counter()),
                                                      gen.events.put_nowait, ("timeout",))
    try:
        while True:
            batch = []
            for event in await gen.events.get_all():
                if event[0] == "timeout":
                    if batch:
                        yield batch
                    raise ApiError(504, "request timed out (request_timeout_s)", "timeout_error", code="timeout")
                batch.append(event)
                if event[0] != "text":
                    yield batch
                    return
            yield batch
    finally:
        if timer is not None:
            timer.cancel()


async def _replay(state: ServerState, hit: CachedResult):
    for piece in hit.pieces:
        await _stall_gate(state)
        yield [("text", piece)]
    yield [("done", hit.finish_reason, hit.completion_tokens)]


@dataclass
class Generation:
    """A request on its way: the events of its answer (from the cache or the engine) and what to remember."""

    events: object  # async iterator of event batches (lists): ("text", piece) ... then ("done", reason, n)
    prompt_tokens: int
    plan: FaultPlan
    key: object  # the result-cache key, None without a cache
    gen: GenRequest | None  # the engine request (None when answered from the cache)
    arrival: float

    def usage_details(self, key: str = "prompt_tokens_details") -> dict:
        """What usage adds for a request with images or audio: ``{key: {"media_cache_hits": n}}``, the media
        whose encoder tokens the image cache held (0 without a cache); ``{}`` for a request without media, or one
        answered from the result cache."""
        if self.gen is None or not self.gen.image_spans:
            return {}
        return {key: {"media_cache_hits": self.gen.media_cache_hits}}

    def close(self, state: ServerState) -> None:
        """Free the engine slot (a no-op when finished): on timeout, disconnect, or the end."""
        if self.gen is not None:
            state.engine.abort(self.gen)


async def begin(state: ServerState, req: ParsedRequest, arrival: float) -> Generation:
    """Apply the fault plan, then start the answer: replayed from the result cache, or submitted to the engine.
    Raises ApiError (injected error, queue full, model unavailable)."""
    cfg = state.config
    plan = state.faults.plan(req.stream, req.max_tokens)
    if plan.error:
        state.metrics.fault("error")
        raise ApiError(500, "injected fault (error_rate)", "server_error", code="injected_fault")
    if plan.slow_s:
        state.metrics.fault("slow")
        await asyncio.sleep(plan.slow_s)
    key = cache_key(state.served_model, req.kind, req.canonical) if state.cache is not None else None
    hit = state.cache.get(key) if key is not None else None
    if key is not None:
        (state.metrics.cache_hits if hit else state.metrics.cache_misses).inc()
    gen = None
    if hit is not None:
        events, prompt_tokens = _replay(state, hit), hit.prompt_tokens  # counted when it was first answered
    else:
        gen = GenRequest(req.prompt_ids, req.max_tokens, req.temperature, req.top_p, req.seed, req.stop,
                         arrival=arrival, images=req.images, image_spans=req.image_spans)
        try:
            state.engine.submit(gen)
        except QueueFull:
            raise ApiError(429, f"server queue is full ({cfg.max_queue_size} waiting requests); retry later",
                           "rate_limit_error", code="queue_full") from None
        except EngineFailed as exc:
            raise ApiError(503, str(exc), "server_error", code="model_unavailable") from None
        deadline = arrival + cfg.request_timeout_s if cfg.request_timeout_s > 0 else None
        events = _engine_events(gen, deadline)
        prompt_tokens = state.counter.prompt(req.kind, req.prompt_ids, req.messages, req.image_tokens)
    return Generation(events, prompt_tokens, plan, key, gen, arrival)


def remember(state, key, pieces, reason, prompt_tokens, completion_tokens, arrival) -> None:
    """A finished answer: observe its end-to-end time, and keep it in the result cache."""
    state.metrics.e2e.observe(time.perf_counter() - arrival)
    if key is not None and reason in ("length", "stop"):
        state.cache.put(key, CachedResult(tuple(pieces), reason, prompt_tokens, completion_tokens))
