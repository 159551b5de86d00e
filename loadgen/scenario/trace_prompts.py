"""The prompts of a trace replay: request ``seq`` is row ``seq`` of the replayed slice, with its own lengths, its
prompt made of the row's prefix blocks.

**Blocks.** Every distinct hash id of the slice gets one fixed text of ``block_tokens`` tokens (exactly, with
``workload.tokenizer``; ``4 x block_tokens`` characters of common words without one), cut from one seeded word
sequence at a place of its own. A request's prompt is the concatenation of its hash ids' blocks, in order, the
last one cut to what is left of its input length; so two requests whose hash ids start alike share exactly that
prefix of text (a prefix cache can serve it). A row with fewer hash ids than its length needs (or none) gets
blocks of its own for the rest, shared with no other row.

**Exact lengths.** With a tokenizer, the cut of the last block is found by encoding that block and decoding its
first ``r`` tokens; then each whole prompt is counted and, where the blocks' boundaries made the count move,
the cut is moved by the difference (a few rounds). A prompt that still does not count as its row says keeps
the count the tokenizer gives (``input_tokens`` on its records is that count). This costs one encoding of every
prompt before the run (as a dataset's counting does).

**Memory.** Blocks are made once (without a tokenizer they are offsets into one word sequence; with one, one
string each); a prompt is joined from its blocks when its request is built, never stored.

**Output.** ``max_tokens`` is the row's output length (``workload.max_tokens``, when set, replaces it); lengths
are fitted to the target's limits first (:func:`loadgen.scenario.trace.fit`).
"""

from __future__ import annotations

import numpy as np

from loadgen.scenario.model import Trace, Workload
from loadgen.scenario.prompts import CHARS_PER_TOKEN, WORDS, Prompt, PromptSource
from loadgen.scenario.tokenized import count_many, exact_texts
from loadgen.scenario.tokenizer import Tokenizer
from loadgen.scenario.trace import Limits, TraceData, TraceSlice, fit, read_trace, select

__all__ = ["TracePrompts", "block_numbers", "fitted_lengths", "make_trace_prompts"]

_ROUNDS = 4  # corrections of a prompt's last cut before its count is taken as it is
_BATCH = 256  # prompts counted at once


def fitted_lengths(data: TraceData, sl: TraceSlice, limits: Limits,
                   max_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input, output) lengths of the slice's rows as the trace gives them (the output replaced by
    ``max_tokens`` when set), and the same fitted to ``limits``."""
    inp0 = data.input_tokens[sl.lo : sl.hi]
    out0 = data.output_tokens[sl.lo : sl.hi] if max_tokens is None else np.full(sl.count, max_tokens, np.int64)
    return (inp0, out0, *fit(inp0, out0, limits))


def block_numbers(data: TraceData, lo: int, per_row: np.ndarray) -> np.ndarray:
    """Dense block numbers (0..K-1) of every prompt of the rows from ``lo``, ``per_row[i]`` blocks for row
    ``lo + i``, concatenated: the row's hash ids (equal ids, equal numbers), then fresh numbers for the blocks
    its hash ids do not cover (a block of that row alone)."""
    n = len(per_row)
    total = int(per_row.sum())
    first = data.hash_offsets[lo : lo + n]
    given = np.minimum(data.hash_offsets[lo + 1 : lo + n + 1] - first, per_row)
    row = np.repeat(np.arange(n), per_row)
    pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    keys = np.empty(total, dtype=np.int64)
    has = pos < given[row]
    keys[has] = data.hash_values[first[row[has]] + pos[has]]
    top = int(data.hash_values.max()) + 1 if len(data.hash_values) else 0
    keys[~has] = top + np.arange(int(np.count_nonzero(~has)), dtype=np.int64)
    _, dense = np.unique(keys, return_inverse=True)
    return dense.reshape(-1).astype(np.int64)


def _corpus(rng: np.random.Generator, n_words: int) -> tuple[str, np.ndarray]:
    """A seeded sequence of common words and the character offset at which each word starts."""
    words = np.asarray(WORDS, dtype=object)[rng.integers(0, len(WORDS), size=n_words)]
    starts = np.zeros(n_words, dtype=np.int64)
    np.cumsum([len(w) + 1 for w in words[:-1]], out=starts[1:])
    return " ".join(words.tolist()), starts


class TracePrompts(PromptSource):
    """The prompts of one trace slice (see the module's docstring); :meth:`get` joins request ``seq``'s blocks."""

    def __init__(self, data: TraceData, sl: TraceSlice, block_tokens: int, limits: Limits, seed: int,
                 tokenizer: Tokenizer | None = None, max_tokens: int | None = None, added: int = -1):
        rng = np.random.default_rng([seed, 0x7ACE])
        n = sl.count
        inp0, out0, inp, out = fitted_lengths(data, sl, limits, max_tokens)
        self.clipped = int(np.count_nonzero((inp != inp0) | (out != out0)))
        self.limits = limits
        b = block_tokens
        per_row = -(-inp // b)  # blocks each prompt needs
        self._off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(per_row, out=self._off[1:])
        self._blocks = block_numbers(data, sl.lo, per_row)
        tail = inp - b * (per_row - 1)  # tokens of the last block used, 1..b
        self._b, self._tok = b, tokenizer
        self._inp, self._max = inp.tolist(), out.tolist()
        self._added = added
        self._counted_by = "tokenizer" if tokenizer is not None else "approximation"
        self.inexact = 0
        k = int(self._blocks.max()) + 1 if len(self._blocks) else 0
        if tokenizer is None:
            width = b * CHARS_PER_TOKEN
            corpus, starts = _corpus(rng, k + width // 2 + 64)
            usable = int(np.searchsorted(starts, len(corpus) - width, side="right"))
            self._corpus = corpus
            self._start = starts[rng.choice(usable, size=k, replace=False)]  # an array: 8 bytes a block
            self._texts = None
            self._tail = (tail * CHARS_PER_TOKEN).tolist()
        else:
            text, _ = _corpus(rng, k + 2 * b + 128)
            self._texts = exact_texts(tokenizer, text, [b] * k, rng)
            self._tail = self._exact_tails(tail.tolist())

    # -- exact lengths ------------------------------------------------------------------------------------
    def _cut(self, block: int, r: int) -> int:
        """Characters of block ``block`` that hold its first ``r`` tokens."""
        text, tok = self._texts[block], self._tok
        if r >= self._b:
            return len(text)
        head = tok.decode(tok.encode(text)[:r])
        if text.startswith(head) and tok.count(head) == r:
            return len(head)
        lo, hi = 0, len(text)  # the shortest cut that counts r tokens (counts grow with the cut)
        while lo < hi:
            mid = (lo + hi) // 2
            if tok.count(text[:mid]) < r:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _exact_tails(self, tail: list[int]) -> list[int]:
        """Each prompt's last cut, in characters, such that the whole prompt counts as its row says."""
        n = len(tail)
        last = [int(self._blocks[self._off[i + 1] - 1]) for i in range(n)]
        self._tail = [self._cut(last[i], tail[i]) for i in range(n)]
        r = list(tail)
        for lo in range(0, n, _BATCH):
            rows = list(range(lo, min(n, lo + _BATCH)))
            for attempt in range(_ROUNDS + 1):
                if not rows:
                    break
                retry = []
                for i, got in zip(rows, count_many(self._tok, [self._text(i) for i in rows])):
                    if got == self._inp[i]:
                        continue
                    want = min(max(r[i] - (got - self._inp[i]), 1), self._b)
                    if attempt == _ROUNDS or want == r[i]:  # the last block cannot absorb the difference
                        self._inp[i] = got  # the records hold the count the prompt really has
                        self.inexact += 1
                        continue
                    r[i] = want
                    self._tail[i] = self._cut(last[i], want)
                    retry.append(i)
                rows = retry
        return self._tail

    # -- the prompts ----------------------------------------------------------------------------------------
    def block_text(self, k: int) -> str:
        """The text of block number ``k`` (see :meth:`blocks_of`)."""
        if self._texts is not None:
            return self._texts[k]
        s = int(self._start[k])
        return self._corpus[s : s + self._b * CHARS_PER_TOKEN]

    def _text(self, i: int) -> str:
        blocks = self._blocks[self._off[i] : self._off[i + 1]].tolist()
        return "".join([self.block_text(k) for k in blocks[:-1]] + [self.block_text(blocks[-1])[: self._tail[i]]])

    def __len__(self) -> int:
        return len(self._inp)

    def get(self, seq: int) -> Prompt:
        i = seq % len(self._inp)
        return Prompt(self._text(i), None, self._inp[i], self._max[i], self._added, self._counted_by)

    def blocks_of(self, seq: int) -> list[int]:
        """The dense block numbers request ``seq``'s prompt is made of (equal numbers: the same text)."""
        i = seq % len(self._inp)
        return self._blocks[self._off[i] : self._off[i + 1]].tolist()


def make_trace_prompts(spec: Trace, workload: Workload, seed: int, limits: Limits,
                       tokenizer: Tokenizer | None = None, added: int = -1) -> TracePrompts:
    """The prompts of the trace replay ``spec`` (its ``file`` resolved, as the scenario loader leaves it), fitted
    to ``limits``; ``added`` is what the server adds to each prompt, by the tokenizer's count (-1: unknown)."""
    data = read_trace(spec.file)
    return TracePrompts(data, select(spec, data), spec.block_tokens, limits, seed, tokenizer, workload.max_tokens,
                        added)
