"""Serving one generation request: faults, result cache, engine, and the JSON or SSE answer."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiohttp import web

from ..config import ServerConfig
from ..models.backends import ResolvedBackend
from ..serving.faults import FaultInjector, FaultPlan
from ..serving.gen_request import EngineFailed, GenRequest, QueueFull
from ..serving.metrics import Metrics
from ..serving.result_cache import CachedResult, ResultCache, cache_key
from ..serving.scheduler import ServingEngine
from .counting import ByteCounter, TokenizerCounter
from .openai_protocol import (
    SSE_DONE,
    ApiError,
    ChunkTemplate,
    ParsedRequest,
    chunk,
    full_response,
    new_id,
    parse_json,
    parse_request,
    sse,
    usage_chunk,
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


class _Cut(Exception):
    """The fault plan says: close this stream now."""


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

    def close(self, state: ServerState) -> None:
        """Free the engine slot (a no-op when finished): on timeout, disconnect, or the end."""
        if self.gen is not None:
            state.engine.abort(self.gen)


async def handle_generation(state: ServerState, request: web.Request, kind: str) -> web.StreamResponse:
    """Validate, apply faults, answer from the cache or the engine. Raises ApiError for 4xx/5xx."""
    arrival = time.perf_counter()
    cfg = state.config
    req = parse_request(parse_json(await request.read()), kind, served_model=state.served_model,
                        max_model_len=state.resolved.spec.max_model_len, default_max_tokens=cfg.default_max_tokens)
    g = await begin(state, req, arrival)
    try:
        if req.stream:
            return await _stream(state, request, req, g.events, g.prompt_tokens, g.plan, g.key, arrival)
        return await _collect(state, req, g.events, g.prompt_tokens, g.key, arrival)
    finally:
        g.close(state)


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
                         arrival=arrival)
        try:
            state.engine.submit(gen)
        except QueueFull:
            raise ApiError(429, f"server queue is full ({cfg.max_queue_size} waiting requests); retry later",
                           "rate_limit_error", code="queue_full") from None
        except EngineFailed as exc:
            raise ApiError(503, str(exc), "server_error", code="model_unavailable") from None
        deadline = arrival + cfg.request_timeout_s if cfg.request_timeout_s > 0 else None
        events = _engine_events(gen, deadline)
        prompt_tokens = state.counter.prompt(req.kind, req.prompt_ids, req.messages)
    return Generation(events, prompt_tokens, plan, key, gen, arrival)


def remember(state, key, pieces, reason, prompt_tokens, completion_tokens, arrival) -> None:
    """A finished answer: observe its end-to-end time, and keep it in the result cache."""
    _remember(state, key, pieces, reason, prompt_tokens, completion_tokens, arrival)


def _remember(state, key, pieces, reason, prompt_tokens, completion_tokens, arrival) -> None:
    state.metrics.e2e.observe(time.perf_counter() - arrival)
    if key is not None and reason in ("length", "stop"):
        state.cache.put(key, CachedResult(tuple(pieces), reason, prompt_tokens, completion_tokens))


async def _collect(state, req: ParsedRequest, events, prompt_tokens, key, arrival) -> web.Response:
    pieces: list[str] = []
    async for batch in events:
        for event in batch:
            if event[0] == "text":
                pieces.append(event[1])
            elif event[0] == "error":
                raise ApiError(500, event[1], "server_error")
            else:
                completion = state.counter.output("".join(pieces), event[2])
                _remember(state, key, pieces, event[1], prompt_tokens, completion, arrival)
                body = full_response(req, new_id(req.kind), "".join(pieces), event[1], prompt_tokens, completion)
                return web.json_response(body)
    raise ApiError(500, "generation ended without a result", "server_error")


async def _stream(state, request, req: ParsedRequest, events, prompt_tokens, plan: FaultPlan, key, arrival):
    """Stream the answer; every batch of events that arrived together goes out in one write."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    rid, created = new_id(req.kind), int(time.time())
    template = ChunkTemplate(req, rid, created)
    pieces: list[str] = []
    out: list[bytes] = []
    prepared = False
    try:
        async for batch in events:
            if not prepared:  # headers wait for the first event, so queue errors can still be a 4xx/5xx
                await resp.prepare(request)
                prepared = True
            for event in batch:
                if event[0] == "text":
                    if plan.cut_after is not None and len(pieces) >= plan.cut_after:
                        if out:
                            await resp.write(b"".join(out))
                        raise _Cut()
                    out.append(template.encode(event[1]) if pieces
                               else sse(chunk(req, rid, created, event[1], first=True)))
                    pieces.append(event[1])
                elif event[0] == "error":
                    out.append(sse(ApiError(500, event[1], "server_error").body()) + SSE_DONE)
                else:
                    if not pieces:
                        out.append(sse(chunk(req, rid, created, "", first=True)))
                    out.append(sse(chunk(req, rid, created, None, finish_reason=event[1])))
                    completion = state.counter.output("".join(pieces), event[2])
                    if req.include_usage:
                        out.append(sse(usage_chunk(req, rid, created, prompt_tokens, completion)))
                    out.append(SSE_DONE)
                    _remember(state, key, pieces, event[1], prompt_tokens, completion, arrival)
            await resp.write(b"".join(out))
            out.clear()
    except ApiError as exc:
        if not prepared:
            raise
        await resp.write(b"".join(out) + sse(exc.body()) + SSE_DONE)
    except _Cut:
        state.metrics.fault("cut_stream")
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError()
    return resp
