"""The OpenAI-compatible routes: ``/v1/chat/completions`` and ``/v1/completions`` (a JSON answer, or server-sent
events with usage), ``/v1/audio/transcriptions`` (:mod:`.transcriptions`), ``/v1/models``, and vLLM's
``/tokenize`` and ``/detokenize``."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from .generation import Generation, ServerState, begin, remember
from .openai_protocol import (
    SSE_DONE,
    ApiError,
    ChunkTemplate,
    ParsedRequest,
    ToolChunks,
    chunk,
    escape,
    full_response,
    new_id,
    parse_json,
    parse_messages,
    parse_request,
    sse,
    usage_chunk,
)
from .transcriptions import transcription


class OpenAIRoutes:
    """The OpenAI-compatible routes of one server; each method is a route handler."""

    def __init__(self, state: ServerState):
        self.state = state

    def add_to(self, app: web.Application) -> None:
        """Register the routes on ``app``."""
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await handle_generation(self.state, request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await handle_generation(self.state, request, "completion")

    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        return await transcription(self.state, request)

    async def models(self, request: web.Request) -> web.Response:
        state = self.state
        card = {"id": state.served_model, "object": "model", "created": int(state.started_wall),
                "owned_by": "latbench", "max_model_len": state.resolved.spec.max_model_len}
        return web.json_response({"object": "list", "data": [card]})

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize: a prompt (special tokens added by default) or chat messages (template rendered)."""
        body = parse_json(await request.read())
        self._check_model(body)
        counter = self.state.counter
        if "messages" in body:
            ids = counter.tokenize_chat(parse_messages(body), _flag(body, "add_generation_prompt", True),
                                        _flag(body, "add_special_tokens", False))
        elif isinstance(body.get("prompt"), str):
            ids = counter.tokenize(body["prompt"], _flag(body, "add_special_tokens", True))
        else:
            raise ApiError(400, "expected 'prompt' (a string) or 'messages'", param="prompt")
        return web.json_response({"count": len(ids), "max_model_len": self.state.resolved.spec.max_model_len,
                                  "tokens": ids, "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        self._check_model(body)
        ids = body.get("tokens")
        if not (isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)):
            raise ApiError(400, "'tokens' must be a list of integers", param="tokens")
        return web.json_response({"prompt": self.state.counter.detokenize(ids)})

    def _check_model(self, body: dict) -> None:
        model, served = body.get("model"), self.state.served_model
        if model is not None and model != served:
            raise ApiError(404, f"The model `{model}` does not exist; this server serves `{served}`",
                           param="model", code="model_not_found")


def _flag(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if not isinstance(v, bool):
        raise ApiError(400, f"'{name}' must be a boolean", param=name)
    return v


class _Cut(Exception):
    """The fault plan says: close this stream now."""


async def handle_generation(state: ServerState, request: web.Request, kind: str) -> web.StreamResponse:
    """Validate, apply faults, answer from the cache or the engine. Raises ApiError for 4xx/5xx."""
    arrival = time.perf_counter()
    cfg = state.config
    req = parse_request(parse_json(await request.read()), kind, served_model=state.served_model,
                        max_model_len=state.resolved.spec.max_model_len, default_max_tokens=cfg.default_max_tokens,
                        image_patch=(cfg.image_patch_size, cfg.image_merge, cfg.audio_tokens_per_s))
    g = await begin(state, req, arrival)
    try:
        if req.stream:
            return await _stream(state, request, req, g, arrival)
        return await _collect(state, req, g, arrival)
    finally:
        g.close(state)


async def _collect(state, req: ParsedRequest, g: Generation, arrival) -> web.Response:
    pieces: list[str] = []
    prompt_tokens, key = g.prompt_tokens, g.key
    async for batch in g.events:
        for event in batch:
            if event[0] == "text":
                pieces.append(event[1])
            elif event[0] == "error":
                raise ApiError(500, event[1], "server_error")
            else:
                completion = state.counter.output("".join(pieces), event[2])
                remember(state, key, pieces, event[1], prompt_tokens, completion, arrival)
                body = full_response(req, new_id(req.kind), "".join(pieces), event[1], prompt_tokens, completion,
                                     g.usage_details())
                return web.json_response(body)
    raise ApiError(500, "generation ended without a result", "server_error")


async def _stream(state, request, req: ParsedRequest, g: Generation, arrival):
    """Stream the answer; every batch of events that arrived together goes out in one write."""
    events, prompt_tokens, plan, key = g.events, g.prompt_tokens, g.plan, g.key
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    rid, created = new_id(req.kind), int(time.time())
    template = ChunkTemplate(req, rid, created)
    tools = ToolChunks(req, rid, created) if req.tool_call is not None else None
    fmt = req.json_format
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
                    if tools is not None:
                        out.append(tools.token(event[1], not pieces))
                    elif fmt is not None:  # a JSON answer: the text escaped into it, its opening first
                        piece = escape(event[1])
                        out.append(template.encode(piece) if pieces
                                   else sse(chunk(req, rid, created, fmt[0] + piece, first=True)))
                    else:
                        out.append(template.encode(event[1]) if pieces
                                   else sse(chunk(req, rid, created, event[1], first=True)))
                    pieces.append(event[1])
                elif event[0] == "error":
                    out.append(sse(ApiError(500, event[1], "server_error").body()) + SSE_DONE)
                elif tools is not None:
                    out.append(tools.end(not pieces))
                    completion = state.counter.output("".join(pieces), event[2])
                    if req.include_usage:
                        out.append(sse(usage_chunk(req, rid, created, prompt_tokens, completion, g.usage_details())))
                    out.append(SSE_DONE)
                    remember(state, key, pieces, event[1], prompt_tokens, completion, arrival)
                else:
                    if fmt is not None:  # the JSON answer's closing (its opening too when no token came)
                        out.append(template.encode(fmt[1]) if pieces
                                   else sse(chunk(req, rid, created, fmt[0] + fmt[1], first=True)))
                    elif not pieces:
                        out.append(sse(chunk(req, rid, created, "", first=True)))
                    out.append(sse(chunk(req, rid, created, None, finish_reason=event[1])))
                    completion = state.counter.output("".join(pieces), event[2])
                    if req.include_usage:
                        out.append(sse(usage_chunk(req, rid, created, prompt_tokens, completion, g.usage_details())))
                    out.append(SSE_DONE)
                    remember(state, key, pieces, event[1], prompt_tokens, completion, arrival)
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
