"""The KServe v2 / Triton text model, shared by the HTTP (:mod:`.kserve_http`) and gRPC (:mod:`.kserve_grpc`)
front ends: its tensors, how a request of it becomes the engine's request, and how its answer is collected
whole or streamed piece by piece. The front ends only translate their wire format to and from these.

Tensors: ``text_input`` (BYTES, one element) and ``max_tokens`` (an integer, optional) in; ``text_output``
(BYTES), ``num_input_tokens`` and ``num_output_tokens`` (UINT32) out, the names Triton's vLLM backend uses. A
stream sends one piece per token (``num_output_tokens`` 1), the first also ``num_input_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .generation import Generation, ServerState, begin, remember
from .openai_protocol import ApiError, ParsedRequest, parse_request

MODEL_VERSION = "1"
PLATFORM = "latbench-reference"
#: (name, datatype) of the model's input and output tensors, each of shape [1]
INPUTS = (("text_input", "BYTES"), ("max_tokens", "INT32"))
OUTPUTS = (("text_output", "BYTES"), ("num_input_tokens", "UINT32"), ("num_output_tokens", "UINT32"))


def text_request(state: ServerState, model: str, text, max_tokens, stream: bool) -> ParsedRequest:
    """A KServe/Triton text request as the engine's parsed request (checked as a completions request of that
    prompt, so the OpenAI endpoints' validation applies); ApiError names what is wrong."""
    if not isinstance(text, str):
        raise ApiError(400, "text_input must be one string", param="text_input")
    body = {"model": model, "prompt": text, "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    cfg = state.config
    return parse_request(body, "completion", served_model=state.served_model,
                         max_model_len=state.resolved.spec.max_model_len, default_max_tokens=cfg.default_max_tokens)


async def run_to_end(state: ServerState, req: ParsedRequest, arrival: float) -> tuple[str, int, int]:
    """Generate a whole answer: (text, prompt tokens, output tokens). Raises ApiError."""
    g = await begin(state, req, arrival)
    try:
        pieces: list[str] = []
        async for batch in g.events:
            for event in batch:
                if event[0] == "text":
                    pieces.append(event[1])
                elif event[0] == "error":
                    raise ApiError(500, event[1], "server_error")
                else:
                    remember(state, g.key, pieces, event[1], g.prompt_tokens, event[2], arrival)
                    return "".join(pieces), g.prompt_tokens, event[2]
        raise ApiError(500, "generation ended without a result", "server_error")
    finally:
        g.close(state)


@dataclass(frozen=True)
class StreamPiece:
    """One response of a stream: a token's text (``input_tokens`` set on the first only), or an error."""

    text: str | None = None
    input_tokens: int | None = None
    error: str | None = None


async def stream_pieces(state: ServerState, g: Generation, arrival: float):
    """The pieces of a streamed answer in batches (lists: what arrived together; the last may be empty), the
    finished answer remembered. Raises ApiError (a timeout) mid-stream; the caller closes ``g``."""
    pieces: list[str] = []
    async for batch in g.events:
        out = []
        for event in batch:
            if event[0] == "text":
                pieces.append(event[1])
                out.append(StreamPiece(event[1], g.prompt_tokens if len(pieces) == 1 else None))
            elif event[0] == "error":
                out.append(StreamPiece(error=event[1]))
            else:
                remember(state, g.key, pieces, event[1], g.prompt_tokens, event[2], arrival)
        yield out
