"""Shared prefixes: ``workload.prefix: {tokens, groups}`` opens every prompt with one of a few system prompts.

Real traffic shares system prompts, and servers with prefix caching (vLLM's automatic prefix caching,
SGLang's radix cache, the reference server's ``--prefix-cache``) skip the prefill of a prefix they have
seen; a scenario with a prefix shows what that does to time to first token.

**The prefixes.** ``groups`` texts of exactly ``tokens`` tokens with ``workload.tokenizer`` (else ``4 x
tokens`` characters, as synthetic prompts are approximated), made as synthetic prompts are made
(:func:`loadgen.scenario.prompts.make_prompt_source`): common words, distinct texts that share no
beginning, from their own random stream of ``load.seed``, so adding a prefix leaves the prompts as they
were.

**Which prefix.** Prompt ``i`` opens with prefix ``i % groups`` (request ``seq`` sends prompt ``seq %
distinct``, so the groups take turns). The group follows from the prompt, never from the request, so a
repeated prompt is a repeated request, prefix included, and request caching by prompt holds.

**How it is sent.** To a chat API the prefix is a ``system`` message before the prompt's messages (a
dataset's own system message, if any, follows it). To every other API it is the text's opening
paragraph: ``prefix + "\\n\\n" + prompt``; messages, where a dataset gives them, get the system message
too (``anthropic-messages`` sends it as ``system``).

**Counts.** ``input_tokens`` includes the prefix. Chat: the prefix's tokens plus the prompt's content
tokens (content only, as for every chat prompt), and ``added_tokens`` is the template's overhead of the
whole conversation, system message included. Text: the joined text counted with the tokenizer (the
separator, and any merge across it, counted as the server's tokenizer would). Without a tokenizer:
``tokens`` plus the prompt's approximated count.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.scenario.model import Prefix, Prompts, Workload
from loadgen.scenario.prompts import Prompt, PromptSource, make_prompt_source
from loadgen.scenario.tokenized import added_tokens, count_many
from loadgen.scenario.tokenizer import Tokenizer

__all__ = ["SEPARATOR", "PrefixedPrompts", "group_of", "prefix_texts", "with_prefix"]

#: Between the prefix and the prompt in a text (as chat messages are flattened for a text API).
SEPARATOR = "\n\n"
#: The prefixes' random stream is the prompts' own made from ``load.seed ^ PREFIX_SALT``.
PREFIX_SALT = 0x5EED_9EF1_C0DE
_BATCH = 512  # prompts composed at once for counting


def group_of(index: int, groups: int) -> int:
    """The prefix group of prompt ``index``: the groups take turns."""
    return index % groups


def prefix_texts(prefix: Prefix, seed: int, tokenizer: Tokenizer | None) -> list[str]:
    """The ``prefix.groups`` shared prefixes: exactly ``prefix.tokens`` tokens each with ``tokenizer``, else
    ``4 x prefix.tokens`` characters of common words; the same seed and tokenizer give the same texts."""
    spec = Workload(prompts=Prompts(input_tokens=prefix.tokens, output_tokens=1, distinct=prefix.groups))
    source = make_prompt_source(spec, seed ^ PREFIX_SALT, Path("."), tokenizer)
    return [source.get(g).text for g in range(prefix.groups)]


class PrefixedPrompts(PromptSource):
    """Prompt ``i`` of ``base`` opened with prefix ``i % groups``; like ``base``, request ``seq`` gets prompt
    ``seq % len``. Composed per call (no copy of every prompt with its prefix is kept); ``counts`` holds
    (input_tokens, added_tokens) by prompt where a tokenizer counted them."""

    def __init__(self, base: PromptSource, prefixes: list[str], prefix_tokens: int, chat: bool,
                 counts: list[tuple[int, int]] | None = None):
        self._base, self._prefixes, self._tokens, self._chat = base, prefixes, prefix_tokens, chat
        self._system = [{"role": "system", "content": p} for p in prefixes]
        self._n = len(base)
        self._counts = counts

    def __len__(self) -> int:
        return self._n

    def group(self, seq: int) -> int:
        """The prefix group request ``seq`` opens with."""
        return group_of(seq % self._n, len(self._prefixes))

    def get(self, seq: int) -> Prompt:
        i = seq % self._n
        p = self._base.get(i)
        g = group_of(i, len(self._prefixes))
        if self._counts is not None:
            n, added = self._counts[i]
        else:
            n, added = self._tokens + p.input_tokens, p.added_tokens
        return Prompt(self._prefixes[g] + SEPARATOR + p.text, _messages(self._system[g], p, self._chat), n,
                      p.max_tokens, added, p.counted_by, p.extra_body)


def _messages(system: dict, p: Prompt, chat: bool) -> list | None:
    if p.messages is not None:
        return [system, *p.messages]
    return [system, {"role": "user", "content": p.text}] if chat else None


def with_prefix(base: PromptSource, workload: Workload, seed: int, tokenizer: Tokenizer | None,
                chat: bool) -> PromptSource:
    """``base`` with ``workload.prefix`` (unchanged without one); ``chat``: the target's API is a chat API.
    With a tokenizer every prompt is counted here, once, before the run (see the module's "Counts")."""
    prefix = workload.prefix
    if prefix is None:
        return base
    texts = prefix_texts(prefix, seed, tokenizer)
    if tokenizer is None:
        return PrefixedPrompts(base, texts, prefix.tokens, chat)
    plain = PrefixedPrompts(base, texts, prefix.tokens, chat)
    counts: list[tuple[int, int]] = []
    for lo in range(0, len(base), _BATCH):
        batch = [(base.get(i), plain.get(i)) for i in range(lo, min(lo + _BATCH, len(base)))]
        if chat:
            totals = [prefix.tokens + p.input_tokens for p, _ in batch]
            added = added_tokens(tokenizer, [(c.text, c.messages, n) for (_, c), n in zip(batch, totals)], True)
        else:
            totals = count_many(tokenizer, [c.text for _, c in batch])
            added = [p.added_tokens for p, _ in batch]
        counts += list(zip(totals, added))
    return PrefixedPrompts(base, texts, prefix.tokens, chat, counts)
