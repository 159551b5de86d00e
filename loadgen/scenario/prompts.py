"""Prompts: synthetic ones of a requested token length, or a dataset's, addressed by request number.

**Token lengths with a tokenizer** (``workload.tokenizer``, :mod:`loadgen.scenario.tokenizer`): a synthetic
prompt of N tokens has exactly N tokens of that tokenizer, without special tokens. Its token ids are a
window of a seeded random word sequence encoded with the tokenizer (so the text reads as words, not as
random vocabulary); the window is decoded, re-encoded, and adjusted until it round-trips at exactly N
(:mod:`loadgen.scenario.tokenized`). What the server adds is counted apart (``added_tokens``): the
special tokens the tokenizer adds to a plain prompt (BOS) for completions and embeddings, the chat
template's overhead for chat. Dataset prompts and replies are counted with the same tokenizer.

**Without a tokenizer** latbench approximates: a prompt of N tokens is N x 4 characters of English-like
text, 4 characters a token being the usual rule of thumb for English with BPE tokenizers. The words
(1-4 letters, 3.4 on average) are ones GPT- and Llama-style tokenizers typically encode as one token
each, so a real tokenizer counts roughly 0.9-1.0 x the requested length, before any template. Records
say which count they hold (``prompt_tokens_source``), and the summary says when it is an approximation.

**Repetition.** ``distinct: N`` makes N different prompts; request ``seq`` uses prompt ``seq % N``,
and its ``max_tokens`` belongs to the prompt, so a repeated prompt is a repeated request (what a
result cache or prefix cache can serve). Distinct synthetic prompts start at different places of one
random word sequence, so they share no prefix.

**Output length.** ``max_tokens`` is ``workload.max_tokens`` when set, else a dataset entry's own
(``max_tokens``/``output_tokens``, or its reply's length in tokens for ShareGPT), else drawn from
``prompts.output_tokens``. Token-length distributions are normal with the given mean and stddev,
rounded, clipped to ``[min, max]``.

**Datasets** (formats and checks in :mod:`loadgen.scenario.datasets`). Requests cycle through the entries
in file order; ``distinct: N``, when written in the scenario, uses only the first N. With ``sample: N``
the entries are visited in an order drawn with the seed and the first N that pass the length filters
(``min_input_tokens``...) are used. A line's ``extra_body`` goes with its requests.

A chat API sends ``messages`` (a text prompt becomes one user message); a completions or embeddings
API sends ``text`` (messages flattened: their contents joined by blank lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.scenario.datasets import DatasetError, Entry, read_dataset
from loadgen.scenario.model import MAX_TOKENS, TokenDist, Workload, as_dataset
from loadgen.scenario.tokenized import added_tokens, count_many, exact_texts
from loadgen.scenario.tokenizer import Tokenizer

if TYPE_CHECKING:  # numpy is imported where prompts are made: loading a scenario (and its dataset check) needs none
    import numpy as np

__all__ = ["CHARS_PER_TOKEN", "DatasetError", "Prompt", "PromptSource",
           "make_prompt_source", "read_dataset"]

MAX_DATASET_ERRORS = 20  # problems reported per dataset before the rest are counted, not listed

#: Characters of synthetic text per requested token.
CHARS_PER_TOKEN = 4

# Short common English words, one BPE token each in common tokenizers (mean length 3.4 letters).
WORDS = tuple(
    """the of and to in is it you that he was for on are as with his they at be this have from or
    one had by but not what all were we when your can said use an each she do how if will up
    out many then them so some her like him into time has look two more go see no way my than
    been call who its now find long down day did get come made may part over new take only
    work know year live me back give most very just name good man say much line too mean old
    any same tell boy came want show also form set put end does well must big even turn here
    why ask went men read need land home us move try kind hand off play air away page food own
    keep tree city eye head saw left few open life both got run""".split()
)


@dataclass(slots=True)
class Prompt:
    """What one request asks. ``messages`` is None for a plain text prompt."""

    text: str  # the prompt as text (messages flattened)
    messages: list | None  # chat messages as given by a dataset, else None
    input_tokens: int  # prompt length in tokens, content only: counted by the tokenizer, else approximated
    max_tokens: int  # output length asked for
    added_tokens: int = -1  # what the server adds (chat template, or special tokens such as BOS); -1 unknown
    counted_by: str = "approximation"  # how input_tokens was counted: "tokenizer" or "approximation"
    extra_body: dict | None = None  # a dataset entry's own request options
    images: tuple = ()  # workload.images: the ImageItems sent after the text (loadgen.scenario.images)
    audio: tuple = ()  # workload.audio: the AudioItems sent after the text (loadgen.scenario.audio)


class PromptSource:
    """Deterministic prompts by request number; :meth:`get` is O(1) and allocation-light."""

    def get(self, seq: int) -> Prompt:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class SyntheticPrompts(PromptSource):
    """N prompts cut from one seeded random word sequence: prompt i is ``corpus[start_i : start_i + 4 * tokens_i]``."""

    def __init__(self, input_tokens: np.ndarray, max_tokens: np.ndarray, rng: np.random.Generator):
        import numpy as np

        n = len(input_tokens)
        chars = input_tokens.astype(np.int64) * CHARS_PER_TOKEN
        longest = int(chars.max())
        # Enough words that n distinct word starts each have `longest` characters after them
        # (every word with its space is at least 2 characters).
        n_words = n + longest // 2 + 64
        words = np.asarray(WORDS, dtype=object)[rng.integers(0, len(WORDS), size=n_words)]
        self._corpus = " ".join(words.tolist())
        starts = np.zeros(n_words, dtype=np.int64)
        np.cumsum([len(w) + 1 for w in words[:-1]], out=starts[1:])
        usable = int(np.searchsorted(starts, len(self._corpus) - longest, side="right"))
        picks = rng.choice(usable, size=n, replace=False)
        self._start = starts[picks].tolist()
        self._end = (starts[picks] + chars).tolist()
        self._tokens = input_tokens.astype(np.int64).tolist()
        self._max = max_tokens.astype(np.int64).tolist()
        self._n = n

    def __len__(self) -> int:
        return self._n

    def get(self, seq: int) -> Prompt:
        i = seq % self._n
        return Prompt(self._corpus[self._start[i] : self._end[i]].rstrip(), None, self._tokens[i], self._max[i])


class ListPrompts(PromptSource):
    """Prompts given as a list (a dataset); request ``seq`` gets ``prompts[seq % len]``."""

    def __init__(self, prompts: list[Prompt]):
        if not prompts:
            raise ValueError("no prompts")
        self._prompts = prompts

    def __len__(self) -> int:
        return len(self._prompts)

    def get(self, seq: int) -> Prompt:
        return self._prompts[seq % len(self._prompts)]


def draw_tokens(dist: TokenDist, n: int, rng: np.random.Generator, cap: int = MAX_TOKENS) -> np.ndarray:
    """n token counts ~ Normal(mean, stddev), rounded and clipped to [min, max]; ``max`` None is ``cap`` (a wide
    stddev never draws past the documented maximum, MAX_TOKENS for a length)."""
    import numpy as np

    if dist.stddev > 0:
        x = rng.normal(dist.mean, dist.stddev, size=n)
    else:
        x = np.full(n, float(dist.mean))
    hi = min(dist.max, cap) if dist.max is not None else cap
    return np.clip(np.rint(x), max(dist.min, 1), hi).astype(np.int64)


def make_prompt_source(workload: Workload, seed: int, base_dir: Path, tokenizer: Tokenizer | None = None,
                       chat: bool = False) -> PromptSource:
    """The scenario's prompts: from ``workload.dataset`` (relative to ``base_dir``) or synthetic.

    With a ``tokenizer`` (:func:`loadgen.scenario.tokenizer.load_tokenizer`) lengths are counted with it and
    synthetic prompts are exact; ``chat`` (the target's API is a chat API) decides what the server adds:
    the chat template rather than the plain prompt's special tokens. The same workload, seed and tokenizer
    give the same prompts, in the same order, on every machine. Raises DatasetError for a dataset that
    cannot be used (the scenario loader checks datasets before a run).
    """
    import numpy as np

    rng = np.random.default_rng([seed, 0x5EED])
    spec = workload.prompts
    if workload.dataset is not None:
        return ListPrompts(_dataset_prompts(workload, rng, Path(base_dir), tokenizer, chat))
    n = spec.distinct
    inp = draw_tokens(spec.input_tokens, n, rng)
    if workload.max_tokens is not None:
        out = np.full(n, workload.max_tokens, dtype=np.int64)
    else:
        out = draw_tokens(spec.output_tokens, n, rng)
    if tokenizer is None:
        return SyntheticPrompts(inp, out, rng)
    lengths = inp.tolist()
    texts = exact_texts(tokenizer, _word_corpus(rng, n + 2 * max(lengths) + 128), lengths, rng)
    added = added_tokens(tokenizer, [(t, None, k) for t, k in zip(texts, lengths)], chat)
    return ListPrompts([Prompt(t, None, k, m, a, "tokenizer")
                        for t, k, m, a in zip(texts, lengths, out.tolist(), added)])


def _word_corpus(rng: np.random.Generator, n_words: int) -> str:
    """A seeded random sequence of common words (more words than tokens are needed, in any tokenizer)."""
    import numpy as np  # lazily: loading a scenario needs none

    return " ".join(np.asarray(WORDS, dtype=object)[rng.integers(0, len(WORDS), size=n_words)].tolist())


def _dataset_prompts(workload: Workload, rng: np.random.Generator, base_dir: Path, tokenizer: Tokenizer | None,
                     chat: bool) -> list[Prompt]:
    ds = as_dataset(workload.dataset)
    entries = read_dataset(ds, base_dir)
    spec = workload.prompts
    if ds.sample is None:
        order = range(len(entries))
        want = spec.distinct if "distinct" in spec.model_fields_set else len(entries)
    else:
        order, want = rng.permutation(len(entries)).tolist(), ds.sample
    if tokenizer is not None:
        count = lambda texts: count_many(tokenizer, texts)  # noqa: E731
    else:
        count = lambda texts: [approx_tokens(t) for t in texts]  # noqa: E731
    prompts: list[Prompt] = []
    for lo in range(0, len(order), 256):  # counted in batches, and no further than needed for `sample`
        batch = [entries[i] for i in order[lo : lo + 256]]
        for e, (n, reply) in zip(batch, _lengths(batch, count, chat)):
            out = e.output_tokens if e.output_tokens is not None else reply
            if _passes(ds, n, out):
                text = e.text if e.text is not None else flatten(e.messages)
                prompts.append(Prompt(text, e.messages, n, out or 0, -1,
                                      "tokenizer" if tokenizer else "approximation", e.extra_body))
        if len(prompts) >= want:
            break
    prompts = prompts[:want]
    if not prompts:
        raise DatasetError([f"{ds.path or ds.hf}: no entry passes the length filters (min/max_input_tokens, "
                            "min/max_output_tokens)"])
    drawn = draw_tokens(spec.output_tokens, len(prompts), rng)
    for p, d in zip(prompts, drawn.tolist()):
        if workload.max_tokens is not None:
            p.max_tokens = workload.max_tokens
        elif p.max_tokens <= 0:
            p.max_tokens = d
    if tokenizer is not None:
        added = added_tokens(tokenizer, [(p.text, p.messages, p.input_tokens) for p in prompts], chat)
        for p, a in zip(prompts, added):
            p.added_tokens = a
    return prompts


def _lengths(batch: list[Entry], count, chat: bool) -> list[tuple[int, int | None]]:
    """(input tokens, reply tokens or None) of each entry; chat messages count their contents only."""
    texts, spans = [], []
    for e in batch:
        parts = ([_content(m) for m in e.messages] if (e.messages is not None and chat)
                 else [e.text if e.text is not None else flatten(e.messages)])
        spans.append((len(texts), len(parts), e.reply is not None))
        texts += parts + ([e.reply] if e.reply is not None else [])
    counts = count(texts)
    return [(sum(counts[s : s + k]), counts[s + k] if r else None) for s, k, r in spans]


def _passes(ds, n: int, out: int | None) -> bool:
    if (ds.min_input_tokens is not None and n < ds.min_input_tokens) or (
            ds.max_input_tokens is not None and n > ds.max_input_tokens):
        return False
    if out is not None and ((ds.min_output_tokens is not None and out < ds.min_output_tokens)
                            or (ds.max_output_tokens is not None and out > ds.max_output_tokens)):
        return False
    return True


def _content(message: dict) -> str:
    c = message.get("content")
    if isinstance(c, list):
        return "".join(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return c if isinstance(c, str) else ""


def flatten(messages: list) -> str:
    """The text of chat messages for a text API: their contents (text parts of lists too), blank-line separated."""
    parts = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "\n\n".join(parts)


def approx_tokens(text: str) -> int:
    """Approximate token count of text: one per CHARS_PER_TOKEN characters, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
