"""Prompts: synthetic ones of a requested token length, or a JSONL dataset, addressed by request number.

**How token length is approximated.** latbench downloads no tokenizer. A prompt of N tokens is
N x 4 characters of English-like text: 4 characters per token is the usual rule of thumb for English
with BPE tokenizers. The text is random words drawn (with a seeded RNG) from a fixed list of short
common English words (1-4 letters, 3.4 on average), each of which GPT- and Llama-style tokenizers
typically encode as one token; so a real tokenizer counts about one token per 4-4.5 characters of
this text, i.e. roughly 0.9-1.0 x the requested length. Servers report the exact count in ``usage``,
and the records keep that (``prompt_tokens``).

**Repetition.** ``distinct: N`` makes N different prompts; request ``seq`` uses prompt ``seq % N``,
and its ``max_tokens`` belongs to the prompt, so a repeated prompt is a repeated request (what a
result cache or prefix cache can serve). Distinct synthetic prompts start at different places of one
random word sequence, so they share no prefix.

**Output length.** ``max_tokens`` is ``workload.max_tokens`` when set, else a dataset line's own
``max_tokens``, else drawn from ``prompts.output_tokens``. Token-length distributions are normal
with the given mean and stddev, rounded, clipped to ``[min, max]``.

**Datasets.** A JSONL file, one request per line: ``{"prompt": "..."}`` or ``{"messages": [...]}``,
each optionally with ``"max_tokens"``; blank lines are skipped. Requests cycle through the lines in
file order (``distinct: N``, when written in the scenario, uses only the first N lines).

Datasets are checked when the scenario is loaded (:func:`check_dataset`, called by ``load_scenario``), so a
missing, empty or broken file is a scenario error (exit 2, nothing sent), every problem named with the
file and line. Reading goes through :func:`read_dataset` (the file, line by line, errors collected) and each
record through :func:`dataset_prompt` (the one rule of what a request may be): another format (ShareGPT
conversations, say) reads its records its own way and hands each to :func:`dataset_prompt` as
``{"messages": [...]}`` or ``{"prompt": ...}``, so its mistakes are reported, and checked up front, the same way.

A chat API sends ``messages`` (a text prompt becomes one user message); a completions or embeddings
API sends ``text`` (messages flattened: their contents joined by blank lines).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.scenario.model import TokenDist, Workload

if TYPE_CHECKING:  # numpy is imported where prompts are made: loading a scenario (and its dataset check) needs none
    import numpy as np

__all__ = ["CHARS_PER_TOKEN", "DatasetError", "Prompt", "PromptSource", "check_dataset", "dataset_prompt",
           "make_prompt_source", "read_dataset"]

MAX_DATASET_ERRORS = 20  # problems reported per dataset before the rest are counted, not listed

#: Characters of synthetic text per requested token.
CHARS_PER_TOKEN = 4

# Short common English words, one BPE token each in common tokenizers (mean length 3.4 letters).
_WORDS = tuple(
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
    input_tokens: int  # approximate prompt length in tokens (CHARS_PER_TOKEN characters each)
    max_tokens: int  # output length asked for


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
        words = np.asarray(_WORDS, dtype=object)[rng.integers(0, len(_WORDS), size=n_words)]
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


def draw_tokens(dist: TokenDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """n token counts ~ Normal(mean, stddev), rounded and clipped to [min, max] (max may be None)."""
    import numpy as np

    if dist.stddev > 0:
        x = rng.normal(dist.mean, dist.stddev, size=n)
    else:
        x = np.full(n, float(dist.mean))
    hi = dist.max if dist.max is not None else np.inf
    return np.clip(np.rint(x), max(dist.min, 1), hi).astype(np.int64)


def make_prompt_source(workload: Workload, seed: int, base_dir: Path) -> PromptSource:
    """The scenario's prompts: from ``workload.dataset`` (relative to ``base_dir``) or synthetic.

    The same workload and seed give the same prompts, in the same order, on every machine.
    """
    import numpy as np

    rng = np.random.default_rng([seed, 0x5EED])
    spec = workload.prompts
    if workload.dataset is not None:
        prompts = read_dataset(dataset_path(workload, base_dir))
        if "distinct" in spec.model_fields_set:
            prompts = prompts[: spec.distinct]
        drawn = draw_tokens(spec.output_tokens, len(prompts), rng)
        for p, d in zip(prompts, drawn.tolist()):
            if workload.max_tokens is not None:
                p.max_tokens = workload.max_tokens
            elif p.max_tokens <= 0:
                p.max_tokens = d
        return ListPrompts(prompts)
    n = spec.distinct
    inp = draw_tokens(spec.input_tokens, n, rng)
    if workload.max_tokens is not None:
        out = np.full(n, workload.max_tokens, dtype=np.int64)
    else:
        out = draw_tokens(spec.output_tokens, n, rng)
    return SyntheticPrompts(inp, out, rng)


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


class DatasetError(ValueError):
    """A dataset that cannot be used: ``errors`` holds one ``file:line: what`` message per problem found."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def dataset_path(workload: Workload, base_dir: Path) -> Path:
    """Where the workload's dataset is: its path, relative to ``base_dir`` (the scenario's folder) unless absolute."""
    path = Path(workload.dataset)
    return path if path.is_absolute() else Path(base_dir) / path


def check_dataset(workload: Workload, base_dir: Path) -> list[str]:
    """Every problem of the workload's dataset, one ``file:line: what`` message each; empty when it can be used
    (or there is none). What ``load_scenario`` calls, so a dataset is checked before anything starts."""
    if workload.dataset is None:
        return []
    try:
        read_dataset(dataset_path(workload, base_dir))
    except DatasetError as exc:
        return exc.errors
    return []


def read_dataset(path: Path) -> list[Prompt]:
    """Read a JSONL dataset; ``max_tokens`` is 0 where a line gives none. Raises :class:`DatasetError` listing
    every problem (up to :data:`MAX_DATASET_ERRORS`), each with the file and line."""
    errors: list[str] = []
    prompts: list[Prompt] = []
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise DatasetError([f"{path}: cannot read dataset: {exc.strerror or exc}"]) from None
    more = 0
    with f:
        try:
            for lineno, raw in enumerate(f, 1):
                where = f"{path}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                    if not line.strip():
                        continue
                    prompts.append(dataset_prompt(_json_line(line, where), where))
                except UnicodeDecodeError as exc:
                    problem = f"{where}: not UTF-8 text (byte {exc.start + 1} of the line)"
                except ValueError as exc:
                    problem = str(exc)
                else:
                    continue
                if len(errors) < MAX_DATASET_ERRORS:
                    errors.append(problem)
                else:
                    more += 1
        except OSError as exc:  # a directory, a file that went away
            raise DatasetError([f"{path}: cannot read dataset: {exc.strerror or exc}"]) from None
    if more:
        errors.append(f"{path}: ... and {more} more lines with problems")
    if not errors and not prompts:
        errors.append(f"{path}: the dataset has no prompts (expected one JSON object per line)")
    if errors:
        raise DatasetError(errors)
    return prompts


def _json_line(line: str, where: str):
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ValueError(f"{where}: expected a JSON object, got invalid JSON ({exc})") from None


def dataset_prompt(obj, where: str) -> Prompt:
    """One dataset record as a :class:`Prompt`: ``{"prompt": str}`` or ``{"messages": [{"role", "content"}, ...]}``,
    optionally with a positive integer ``max_tokens``. Raises ValueError starting with ``where`` (``file:line``).
    Every dataset format goes through this one rule."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object with 'prompt' or 'messages', got {type(obj).__name__}")
    mt = obj.get("max_tokens")
    if mt is None:
        mt = 0
    elif not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise ValueError(f"{where}: max_tokens: expected a positive integer, got {mt!r}")
    if "prompt" in obj:
        text = obj["prompt"]
        if not isinstance(text, str) or not text:
            raise ValueError(f"{where}: prompt: expected a non-empty string, got {text!r:.60}")
        return Prompt(text, None, approx_tokens(text), mt)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise ValueError(f"{where}: messages: expected a non-empty list, got {msgs!r:.60}")
        for i, m in enumerate(msgs):
            if (not isinstance(m, dict) or not isinstance(m.get("role"), str)
                    or not isinstance(m.get("content"), (str, list))):
                raise ValueError(f"{where}: messages[{i}]: expected {{\"role\": str, \"content\": str}}, got {m!r:.60}")
        text = flatten(msgs)
        return Prompt(text, msgs, approx_tokens(text), mt)
    raise ValueError(f"{where}: expected an object with 'prompt' or 'messages', got keys {sorted(obj)}")
