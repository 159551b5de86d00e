"""Conversations: the user turns of multi-turn sessions, made once, addressed by session number.

With ``workload.conversations`` a request is one *turn* of a *session*. The user's side of a session is
fixed here, before the run: its turns' texts, their lengths in tokens, the output length each asks for, and
the pause (think time) before each turn. The server's side (its answers, which every later turn resends)
is only known during the run: :mod:`loadgen.protocols.conversation` keeps it.

**Synthetic** (no dataset): ``prompts.distinct`` conversations (default 1000), each of ``turns`` user turns
(drawn per conversation; default 4); every user turn is a synthetic prompt of ``prompts.input_tokens``
tokens (exact with ``workload.tokenizer``) asking for ``prompts.output_tokens`` (or ``workload.max_tokens``).

**From a dataset**: each entry is a conversation: a ShareGPT entry's human turns, or a ``messages`` entry's
user messages, in order (an entry with one prompt is a one-turn conversation). The dataset's own answers
are not sent (the server's are): each gives the output length asked for at its turn, as vLLM's bench
takes the first answer's length. With ``turns`` set, a conversation is cut to a number drawn from it. The
length filters (``min_input_tokens``...) apply to a conversation's first turn.

Session ``s`` holds conversation ``s % len``: a repeated conversation is a repeated session (its user turns
and pauses are the same; its answers are the server's each time). Think times are drawn per turn with
the seed: ``constant`` is exactly ``mean``, ``exponential`` has that mean. The first turn has none: it is
due at the session's arrival.

One idea at several stages, multi-turn conversations, so one file name: :mod:`loadgen.analysis.conversations` (the
summary by turn).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.scenario.datasets import DatasetError, read_dataset
from loadgen.scenario.model import MAX_TURNS, TokenDist, Workload, as_dataset
from loadgen.scenario.prompts import approx_tokens, draw_tokens, flatten, make_prompt_source
from loadgen.scenario.tokenized import count_many
from loadgen.scenario.tokenizer import Tokenizer

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_TURNS", "Conversation", "ConversationSource", "Turn", "make_conversation_source"]

DEFAULT_TURNS = 4


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: its text, its length in tokens, the output length it asks for, the pause before it (s)."""

    text: str
    tokens: int
    max_tokens: int
    think: float


@dataclass(frozen=True, slots=True)
class Conversation:
    """The user's side of one session."""

    turns: tuple[Turn, ...]
    counted_by: str  # how the turns' tokens were counted: "tokenizer" or "approximation"
    added_tokens: int = -1  # what the server adds to the first turn (chat template, BOS); -1 unknown
    extra_body: dict | None = None


class ConversationSource:
    """``get(session)``: the conversation of a session (``session % len``)."""

    def __init__(self, conversations: list[Conversation]):
        if not conversations:
            raise ValueError("no conversations")
        self._c = conversations

    def __len__(self) -> int:
        return len(self._c)

    def get(self, session: int) -> Conversation:
        return self._c[session % len(self._c)]

    @property
    def longest(self) -> int:
        """The most turns of any conversation."""
        return max(len(c.turns) for c in self._c)


def _thinks(workload: Workload, n: int, rng: np.random.Generator) -> list[float]:
    spec = workload.conversations.think_time
    if spec.distribution == "constant" or spec.mean == 0:
        return [float(spec.mean)] * n
    return rng.exponential(spec.mean, n).tolist()


def _turn_counts(spec: TokenDist | None, n: int, rng: np.random.Generator, default: int):
    if spec is None:
        return [default] * n
    return draw_tokens(spec, n, rng, cap=MAX_TURNS).tolist()


def make_conversation_source(workload: Workload, seed: int, base_dir: Path, tokenizer: Tokenizer | None = None,
                             chat: bool = False) -> ConversationSource:
    """The scenario's conversations (see the module docstring). Raises DatasetError for an unusable dataset."""
    import numpy as np  # lazily, as prompts.py: loading a scenario needs none

    rng = np.random.default_rng([seed, 0xC0DE])
    if workload.dataset is not None:
        return ConversationSource(_from_dataset(workload, rng, Path(base_dir), tokenizer, chat))
    n = workload.prompts.distinct
    counts = _turn_counts(workload.conversations.turns, n, rng, DEFAULT_TURNS)
    total = sum(counts)
    flat = workload.model_copy(update={"prompts": workload.prompts.model_copy(update={"distinct": total}),
                                       "conversations": None})
    prompts = make_prompt_source(flat, seed, Path(base_dir), tokenizer, chat)
    thinks = _thinks(workload, total, rng)
    out, k = [], 0
    for c in counts:
        first = prompts.get(k)
        turns = tuple(Turn(p.text, p.input_tokens, p.max_tokens, 0.0 if j == 0 else thinks[k + j])
                      for j, p in ((j, prompts.get(k + j)) for j in range(c)))
        out.append(Conversation(turns, first.counted_by, first.added_tokens))
        k += c
    return ConversationSource(out)


def _from_dataset(workload: Workload, rng: np.random.Generator, base_dir: Path, tokenizer: Tokenizer | None,
                  chat: bool) -> list[Conversation]:
    ds = as_dataset(workload.dataset)
    entries = read_dataset(ds, base_dir)
    spec = workload.prompts
    if ds.sample is None:
        order = list(range(len(entries)))
        want = spec.distinct if "distinct" in spec.model_fields_set else len(entries)
    else:
        order, want = rng.permutation(len(entries)).tolist(), ds.sample
    cut = _turn_counts(workload.conversations.turns, len(order), rng, 0)
    count = (lambda texts: count_many(tokenizer, texts)) if tokenizer is not None else (  # noqa: E731
        lambda texts: [approx_tokens(t) for t in texts])
    by = "tokenizer" if tokenizer is not None else "approximation"
    out: list[Conversation] = []
    for i, c in zip(order, cut):
        e = entries[i]
        pairs = list(e.turns) if e.turns else [(e.text if e.text is not None else flatten(e.messages), e.reply)]
        if c:
            pairs = pairs[:c]
        n = count([t for t, _ in pairs] + [r for _, r in pairs if r is not None])
        user, replies = n[: len(pairs)], iter(n[len(pairs) :])
        if not _passes(ds, user[0]):
            continue
        drawn = draw_tokens(spec.output_tokens, len(pairs), rng).tolist()
        thinks = _thinks(workload, len(pairs), rng)
        turns = []
        for j, ((text, reply), k) in enumerate(zip(pairs, user)):
            asked = next(replies) if reply is not None else None
            if workload.max_tokens is not None:
                asked = workload.max_tokens
            elif e.output_tokens is not None and j == 0:
                asked = e.output_tokens
            turns.append(Turn(text, k, asked if asked else drawn[j], 0.0 if j == 0 else thinks[j]))
        out.append(Conversation(tuple(turns), by, -1, e.extra_body))
        if len(out) >= want:
            break
    if not out:
        raise DatasetError([f"{ds.path or ds.hf}: no conversation passes the length filters (min/max_input_tokens)"])
    return out


def _passes(ds, n: int) -> bool:
    return not ((ds.min_input_tokens is not None and n < ds.min_input_tokens)
                or (ds.max_input_tokens is not None and n > ds.max_input_tokens))
