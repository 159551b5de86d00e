"""The retrieval APIs over HTTP, answered by one JSON body and no output tokens: embeddings and rerank.

**embeddings** (``POST {base}/embeddings`` with ``input``, the OpenAI embeddings API): never streamed; success
needs a ``data`` list (:class:`~loadgen.protocols.openai.JsonHandler`); ``output_tokens`` stays 0.

**rerank** (``POST {base}/rerank``: ``/rerank`` or ``/v1/rerank`` as vLLM, Cohere and Jina serve it, by the
base URL): ``{model, query, documents}``. The prompt is cut into ``target.documents`` documents (default 8)
and its first words are the query, so ``input_tokens`` sizes the whole request. Never streamed; success
needs a ``results`` list; ``prompt_tokens`` from ``usage.prompt_tokens`` or ``usage.total_tokens``.
"""

from __future__ import annotations

from loadgen.protocols.base import ResponseHandler
from loadgen.protocols.openai import JsonHandler, OpenAIProtocol
from loadgen.protocols.shared import JsonApiProtocol, JsonBodyHandler, as_int
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.scenario.tokenizer import Tokenizer

__all__ = ["EmbeddingsProtocol", "RerankProtocol"]


class EmbeddingsProtocol(OpenAIProtocol):
    """``POST {base}/embeddings`` with ``input``; never streamed. ``output_tokens`` stays 0."""

    name = "embeddings"
    endpoint = "/embeddings"
    streams_tokens = False

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None,
                 tokenizer: Tokenizer | None = None):
        super().__init__(target.model_copy(update={"stream": False}), workload, model, base_url, tokenizer)

    def _body(self, prompt: Prompt) -> dict:
        body = dict(self.fixed)
        body["input"] = prompt.text
        return self._options(body, prompt)

    def handler(self) -> ResponseHandler:
        return JsonHandler(self.name, output=False)


QUERY_WORDS = 8


class RerankJson(JsonBodyHandler):
    __slots__ = ()
    api = "rerank"

    def read(self, obj: dict, out: Outcome) -> str | None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            pt = as_int(usage.get("prompt_tokens"))
            pt = pt if pt is not None else as_int(usage.get("total_tokens"))
            if pt is not None:
                out.prompt_tokens = pt
        return None


class RerankProtocol(JsonApiProtocol):
    """``POST {base}/rerank``: the prompt cut into ``target.documents`` documents, its first words the query."""

    name = "rerank"
    endpoint = "/rerank"

    def __init__(self, target: Target, workload: Workload, model: str | None, base_url: str | None = None):
        super().__init__(target.model_copy(update={"stream": False}), workload, model, base_url)
        self.documents = target.documents or 8

    def _body(self, prompt: Prompt) -> dict:
        words = prompt.text.split()
        k = max(1, min(self.documents, len(words)))
        size = -(-len(words) // k) if words else 1
        docs = [" ".join(words[i : i + size]) for i in range(0, len(words), size)] or [prompt.text]
        body: dict = {"model": self.model} if self.model is not None else {}
        body["query"] = " ".join(words[:QUERY_WORDS]) or prompt.text
        body["documents"] = docs
        return body

    def handler(self) -> ResponseHandler:
        return RerankJson()
