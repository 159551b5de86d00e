"""What a sender needs to build its requests: the tokenizer, the protocol and the prompts, made in one place.

Every sender (the native engine, each of its processes, each Locust worker) calls :func:`make_workload`, so
they all count and build alike; the prompts open with ``workload.prefix``'s shared prefixes when it has one
(:mod:`loadgen.scenario.prefix`) and carry ``workload.images`` when it has them
(:mod:`loadgen.scenario.images`), each counted in tokens where the tokenizer's folder holds a processor
config latbench knows (:mod:`loadgen.scenario.image_tokens`). The tokenizer is loaded here and not earlier
because ``tokenizer: server`` needs the target's URL, known only once a managed target has started.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.errors import UsageError
from loadgen.protocols.base import ApiProtocol
from loadgen.protocols.conversation import Sessions
from loadgen.protocols.registry import make_protocol
from loadgen.protocols.trace_workload import trace_prompts
from loadgen.scenario.audio import with_audio
from loadgen.scenario.conversations import make_conversation_source
from loadgen.scenario.datasets import DatasetError
from loadgen.scenario.image_tokens import image_token_rule
from loadgen.scenario.images import ImageError, with_images
from loadgen.scenario.model import Target, Trace, Workload
from loadgen.scenario.prefix import with_prefix
from loadgen.scenario.prompts import CHARS_PER_TOKEN, PromptSource, make_prompt_source
from loadgen.scenario.tokenizer import ServerTokenizer, Tokenizer, TokenizerError, load_tokenizer
from loadgen.scenario.trace import TraceError

__all__ = ["describe_tokens", "make_workload"]

CHAT_APIS = ("openai-chat",)


def _tokenizer(target: Target, workload: Workload, model: str | None, url: str | None,
               base_dir: Path) -> Tokenizer | None:
    try:
        return load_tokenizer(workload.tokenizer, base_dir, url or target.url, target.headers, model)
    except TokenizerError as exc:
        raise UsageError(f"workload.tokenizer: {exc}") from None


def make_workload(target: Target, workload: Workload, model: str | None, url: str | None, seed: int,
                  base_dir: Path, trace: Trace | None = None) -> tuple[ApiProtocol, PromptSource | Sessions]:
    """(protocol, prompts) of one target: prompts by request number (``trace``, the scenario's ``load.trace``:
    the prompts of that replay), or with ``workload.conversations`` the
    :class:`~loadgen.protocols.conversation.Sessions` that build each turn. Raises UsageError for a tokenizer,
    dataset or trace that cannot be used."""
    tok = _tokenizer(target, workload, model, url, Path(base_dir))
    chat = target.api in CHAT_APIS
    try:
        protocol = make_protocol(target, workload, model, base_url=url, tokenizer=tok)
        if workload.conversations is not None:
            source = make_conversation_source(workload, seed, Path(base_dir), tok, chat=chat)
            return protocol, Sessions(protocol, source, chat, workload.tools)
        if trace is not None:  # a trace's prompts share their prefixes by its hash ids (load.trace refuses prefix)
            prompts = trace_prompts(target, trace, workload, tok, model, url, seed, chat)
        else:
            prompts = with_prefix(make_prompt_source(workload, seed, Path(base_dir), tok, chat=chat), workload,
                                  seed, tok, chat)
            rule = image_token_rule(workload.tokenizer, Path(base_dir)) if workload.images is not None else None
            prompts = with_images(prompts, workload.images, seed, Path(base_dir), rule)
            prompts = with_audio(prompts, workload.audio, seed, Path(base_dir),
                                 one=target.api == "openai-transcriptions")
    except (TokenizerError, DatasetError, TraceError, ImageError) as exc:
        raise UsageError(f"workload: {exc}") from None
    finally:
        if isinstance(tok, ServerTokenizer):
            tok.close()
    return protocol, prompts


def describe_tokens(target: Target, workload: Workload, model: str | None, url: str | None,
                    base_dir: Path) -> dict:
    """How this target's token counts are made, for summary.json: the tokenizer (or the approximation), and the
    special tokens it adds to a plain prompt (what a completions server counts beyond the requested length)."""
    tok = _tokenizer(target, workload, model, url, Path(base_dir))
    if tok is None:
        return {"tokenizer": None, "counted_by": "approximation", "chars_per_token": CHARS_PER_TOKEN,
                "special_tokens": None, "chat_template": None}
    try:
        chat = target.api in CHAT_APIS
        specials = tok.special_tokens()
        template = tok.chat_tokens([{"role": "user", "content": "a"}]) is not None if chat else None
    except TokenizerError as exc:
        raise UsageError(f"workload.tokenizer: {exc}") from None
    finally:
        if isinstance(tok, ServerTokenizer):
            tok.close()
    return {"tokenizer": tok.name, "counted_by": "tokenizer", "output_counted_by_tokenizer": tok.counts_output,
            "special_tokens": specials, "chat_template": template}
