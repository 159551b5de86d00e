"""Counting with a tokenizer: prompts of exactly N tokens, counts in batches, and what the server adds.

**Exact lengths.** The token ids of a prompt are a window of N ids of an encoded word sequence (distinct
prompts start at distinct, seeded places). The window is decoded and the text re-encoded; where a
tokenizer merges differently across the window's edges the count moves, so the ids are adjusted (cut
to N when longer, extended with the following ids when shorter) and the round trip repeated until
``count(text) == N``. Natural text round-trips at the first try almost always; a window that will not
converge is tried again one token further on.
"""

from __future__ import annotations

import numpy as np

from loadgen.scenario.tokenizer import Tokenizer, TokenizerError

__all__ = ["added_tokens", "count_many", "exact_texts"]

_ROUNDS = 8  # adjustments of one window before moving it
_SHIFTS = 4  # windows tried for one prompt
_BATCH = 512


def count_many(tok: Tokenizer, texts: list[str]) -> list[int]:
    """Token counts (no special tokens) of ``texts``, encoded in batches."""
    out: list[int] = []
    for i in range(0, len(texts), _BATCH):
        out += [len(ids) for ids in tok.encode_batch(texts[i : i + _BATCH])]
    return out


def _adjust(tok: Tokenizer, ids: list[int], start: int, n: int) -> str:
    for shift in range(_SHIFTS):
        s = start + shift
        cur, nxt = ids[s : s + n], s + n
        for _ in range(_ROUNDS):
            text = tok.decode(cur)
            got = tok.encode(text)
            if len(got) == n:
                return text
            if len(got) > n:
                cur = got[:n]
            else:
                need = n - len(got)
                cur, nxt = got + ids[nxt : nxt + need], nxt + need
    raise TokenizerError(f"tokenizer {tok.name}: no text of exactly {n} tokens found (its decode and encode do "
                         "not round-trip on this text)")


def exact_texts(tok: Tokenizer, corpus: str, lengths: list[int], rng: np.random.Generator) -> list[str]:
    """One text per length, ``tok.count(texts[i]) == lengths[i]``, cut from ``corpus`` at distinct seeded places.

    ``corpus`` needs at least ``len(lengths) + max(lengths)`` tokens plus some spare (for adjustments)."""
    ids = tok.encode(corpus)
    longest = max(lengths)
    usable = len(ids) - longest - 32  # room after every window for shifts and extensions
    if usable < len(lengths):
        raise TokenizerError(f"tokenizer {tok.name}: the word corpus is too short for {len(lengths)} prompts")
    starts = rng.choice(usable, size=len(lengths), replace=False).tolist()
    windows = [ids[s : s + n] for s, n in zip(starts, lengths)]
    texts = []
    for i in range(0, len(windows), _BATCH):
        texts += tok.decode_batch(windows[i : i + _BATCH])
    counts = count_many(tok, texts)
    for i, (n, got) in enumerate(zip(lengths, counts)):
        if got != n:
            texts[i] = _adjust(tok, ids, starts[i], n)
    return texts


def added_tokens(tok: Tokenizer, prompts: list[tuple[str, list | None, int]], chat: bool) -> list[int]:
    """What the server adds to each ``(text, messages or None, input tokens)``, as ``tok`` counts it.

    Chat: the rendered chat template's tokens less the content's (a text is one user message); -1 for each
    when the tokenizer has no chat template. Otherwise: the special tokens a plain prompt gets (e.g. BOS)."""
    if not chat:
        k = len(tok.special_tokens())
        return [k] * len(prompts)
    out: list[int] = []
    for i in range(0, len(prompts), _BATCH):
        part = prompts[i : i + _BATCH]
        totals = tok.chat_tokens_batch([m if m is not None else [{"role": "user", "content": t}] for t, m, _ in part])
        out += [-1 if total is None else total - n for total, (_, _, n) in zip(totals, part)]
    return out
