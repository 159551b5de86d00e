"""The one place a target's API protocol is chosen: ``target.api`` -> an :class:`ApiProtocol`."""

from __future__ import annotations

from loadgen.protocols.apis import ChatProtocol, CompletionsProtocol, EmbeddingsProtocol, HttpProtocol
from loadgen.protocols.base import ApiProtocol
from loadgen.protocols.kserve import KServeHttpProtocol, TritonGenerateProtocol
from loadgen.protocols.kserve_grpc.api import KServeGrpcProtocol, is_grpc_url
from loadgen.protocols.messages import AnthropicProtocol, RerankProtocol, ResponsesProtocol
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
}


#: protocols that count streamed output with the workload's tokenizer when the server sends no usage
TOKENIZED = (ChatProtocol, CompletionsProtocol)


def make_protocol(target: Target, workload: Workload, model: str | None, base_url: str | None = None,
                  tokenizer: Tokenizer | None = None) -> ApiProtocol:
    """The protocol of ``target.api`` (see :func:`loadgen.protocols.apis.make_protocol` for ``model``,
    ``base_url`` and ``tokenizer``)."""
    cls = PROTOCOLS.get(target.api)
    if cls is KServeHttpProtocol and (target.transport == "grpc" or is_grpc_url(base_url or target.url)):
        cls = KServeGrpcProtocol
    if cls is None:
        raise ValueError(f"unknown api {target.api!r}; expected one of {', '.join(PROTOCOLS)}")
    model = model if model is not None else target.model
    if cls in TOKENIZED:
        return cls(target, workload, model, base_url, tokenizer)
    return cls(target, workload, model, base_url)
