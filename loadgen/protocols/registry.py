"""The one place a target's API protocol is chosen: ``target.api`` -> an :class:`ApiProtocol`.

One module per API family: :mod:`~loadgen.protocols.openai` (chat, completions), :mod:`~loadgen.protocols.plain_http`,
:mod:`~loadgen.protocols.anthropic` (Messages), :mod:`~loadgen.protocols.openai_responses`,
:mod:`~loadgen.protocols.retrieval` (embeddings, rerank), :mod:`~loadgen.protocols.transcriptions` (audio),
:mod:`~loadgen.protocols.kserve` (KServe v2 and Triton generate over HTTP) and :mod:`~loadgen.protocols.kserve_grpc`;
what they share is :mod:`~loadgen.protocols.shared`.
"""

from __future__ import annotations

from loadgen.protocols.anthropic import AnthropicProtocol
from loadgen.protocols.base import ApiProtocol
from loadgen.protocols.kserve import KServeHttpProtocol, TritonGenerateProtocol
from loadgen.protocols.kserve_grpc.api import KServeGrpcProtocol, is_grpc_url
from loadgen.protocols.openai import ChatProtocol, CompletionsProtocol
from loadgen.protocols.openai_responses import ResponsesProtocol
from loadgen.protocols.plain_http import HttpProtocol
from loadgen.protocols.retrieval import EmbeddingsProtocol, RerankProtocol
from loadgen.protocols.transcriptions import TranscriptionsProtocol
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.tokenizer import Tokenizer

PROTOCOLS = {
    "openai-chat": ChatProtocol,
    "openai-completions": CompletionsProtocol,
    "embeddings": EmbeddingsProtocol,
    "http": HttpProtocol,
    "anthropic-messages": AnthropicProtocol,
    "openai-responses": ResponsesProtocol,
    "rerank": RerankProtocol,
    "kserve-v2": KServeHttpProtocol,
    "triton-generate": TritonGenerateProtocol,
    "openai-transcriptions": TranscriptionsProtocol,
}


#: protocols that count streamed output with the workload's tokenizer when the server sends no usage
TOKENIZED = (ChatProtocol, CompletionsProtocol)


def protocol_class(target: Target, base_url: str | None = None) -> type[ApiProtocol]:
    """The protocol class of ``target.api`` (kserve-v2 over gRPC for a ``grpc://`` URL or ``transport: grpc``)."""
    cls = PROTOCOLS.get(target.api)
    if cls is KServeHttpProtocol and (target.transport == "grpc" or is_grpc_url(base_url or target.url)):
        cls = KServeGrpcProtocol
    if cls is None:
        raise ValueError(f"unknown api {target.api!r}; expected one of {', '.join(PROTOCOLS)}")
    return cls


def streams_tokens(target: Target) -> bool:
    """Whether ``target``'s answers are token streams: it asks for them (``stream``, true by default) and its API
    streams tokens (``api: http``, embeddings and rerank never do)."""
    return target.stream and protocol_class(target).streams_tokens


def make_protocol(target: Target, workload: Workload, model: str | None, base_url: str | None = None,
                  tokenizer: Tokenizer | None = None) -> ApiProtocol:
    """The protocol of ``target.api``.

    ``model`` is sent as ``model`` (None: ``target.model``; when both are None no model field is sent).
    ``base_url`` replaces ``target.url`` for targets whose URL is known only once started (reference,
    command); a trailing slash is dropped, so ``http://host:8000/v1`` and ``.../v1/`` are the same.
    ``tokenizer`` counts output the server sends no usage for (a local one; ``server`` counts in chunks).
    """
    cls = protocol_class(target, base_url)
    model = model if model is not None else target.model
    if cls in TOKENIZED:
        return cls(target, workload, model, base_url, tokenizer)
    return cls(target, workload, model, base_url)
