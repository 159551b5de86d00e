"""``POST /v1/audio/transcriptions``: OpenAI's transcription endpoint (multipart/form-data).

Fields: ``file`` (a WAV file), ``model``, ``stream`` ("true" streams), ``response_format`` (json or text),
``max_tokens`` (not OpenAI's; default: 3 tokens a second of audio, about speech's pace). The clip becomes
``ceil(seconds x audio_tokens_per_s)`` prompt tokens between a fixed opening and closing, encoded by the engine's
audio encoder (:mod:`reference_server.models.audio`) and prefilled like any prompt, so a clip costs time in
proportion to its duration. A stream answers OpenAI's way: ``transcript.text.delta`` events, then
``transcript.text.done`` with the text and ``usage`` (input and output tokens).
"""

from __future__ import annotations

import math
import time

from aiohttp import web

from ..models.tokenizer import encode
from .generation import ServerState, begin, remember
from .media import MediaError, read_audio
from .openai_protocol import ApiError, ParsedRequest, sse

__all__ = ["transcription"]

OPENING, CLOSING = "<|audio|>\n", "\n<|transcript|>\n"
TOKENS_PER_SECOND = 3  # the default transcript length: about speech's pace


async def transcription(state: ServerState, request: web.Request) -> web.StreamResponse:
    """Validate the form, transcribe the clip; ApiError for a bad form (a 400 naming the field)."""
    arrival = time.perf_counter()
    cfg = state.config
    try:
        form = await request.post()
    except ValueError:
        raise ApiError(400, "expected a multipart/form-data body", param="file") from None
    upload = form.get("file")
    if upload is None or not hasattr(upload, "file"):
        raise ApiError(400, "'file' (the audio, a WAV file) is required", param="file")
    model = form.get("model")
    if model is not None and model != state.served_model:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{state.served_model}`",
                       param="model", code="model_not_found")
    try:
        clip = read_audio(upload.file.read(), "file", cfg.audio_tokens_per_s)
    except MediaError as exc:
        raise ApiError(400, str(exc), param=exc.param) from None
    stream = str(form.get("stream", "false")).lower() == "true"
    text_format = form.get("response_format", "json") == "text"
    head = encode(OPENING)
    ids = head + [0] * clip.tokens + encode(CLOSING)
    limit = state.resolved.spec.max_model_len - len(ids)
    asked = form.get("max_tokens")
    max_tokens = int(asked) if asked and str(asked).isdigit() else max(1, math.ceil(clip.seconds * TOKENS_PER_SECOND))
    if limit < 1:
        raise ApiError(400, f"the clip's {clip.tokens} tokens exceed the model's context of "
                            f"{state.resolved.spec.max_model_len}", param="file", code="context_length_exceeded")
    req = ParsedRequest("transcription", state.served_model, ids, min(max_tokens, limit), 0.0, 1.0, None, [],
                        stream, True, {"audio": clip.sha256, "max_tokens": max_tokens}, None, [clip],
                        [(len(head), clip.tokens)])
    g = await begin(state, req, arrival)
    try:
        pieces: list[str] = []
        resp = None
        async for batch in g.events:
            out = []
            for event in batch:
                if event[0] == "text":
                    pieces.append(event[1])
                    if stream:
                        out.append(sse({"type": "transcript.text.delta", "delta": event[1]}))
                elif event[0] == "error":
                    raise ApiError(500, event[1], "server_error")
                else:
                    completion = state.counter.output("".join(pieces), event[2])
                    remember(state, g.key, pieces, event[1], g.prompt_tokens, completion, arrival)
                    usage = {"type": "tokens", "input_tokens": g.prompt_tokens, "output_tokens": completion,
                             "total_tokens": g.prompt_tokens + completion, **g.usage_details("input_token_details")}
                    if not stream:
                        if text_format:
                            return web.Response(text="".join(pieces))
                        return web.json_response({"text": "".join(pieces), "usage": usage})
                    out.append(sse({"type": "transcript.text.done", "text": "".join(pieces), "usage": usage}))
            if stream and out:
                if resp is None:
                    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache"})
                    await resp.prepare(request)
                await resp.write(b"".join(out))
        if resp is None:
            raise ApiError(500, "transcription ended without a result", "server_error")
        return resp
    finally:
        g.close(state)

