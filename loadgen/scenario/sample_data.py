"""A small ShareGPT-format dataset that latbench generates itself, for examples and tests (no download).

``python -m loadgen.scenario.sample_data scenarios/data/sharegpt_small.json`` writes the file the bundled
``scenarios/dataset.yaml`` reads; a test checks that the committed file is exactly what this writes. The
conversations are seeded random sentences of common words in ShareGPT's shape (``id``, ``conversations``
of ``from``/``value`` turns): prompts of 4 to 120 words, answers of 2 to 60, some conversations of several
turns, some opening with a system turn, and a few with no answered human turn (which readers skip, as
vLLM's ShareGPT mode does), so every rule of the format is exercised.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from loadgen.scenario.prompts import WORDS  # the same plain words as synthetic prompts

__all__ = ["sharegpt_sample", "write_sharegpt_sample"]


def _sentences(rng: random.Random, words: int) -> str:
    out, left = [], words
    while left > 0:
        k = min(left, rng.randint(3, 14))
        left -= k
        s = " ".join(rng.choice(WORDS) for _ in range(k))
        out.append(s[0].upper() + s[1:] + rng.choice([".", ".", ".", "?", "!"]))
    return " ".join(out)


def sharegpt_sample(n: int = 48, seed: int = 0) -> list[dict]:
    """``n`` ShareGPT conversations, the same for the same ``n`` and ``seed`` on every machine."""
    rng = random.Random(seed)
    data = []
    for i in range(n):
        turns = []
        if rng.random() < 0.15:
            turns.append({"from": "system", "value": _sentences(rng, rng.randint(4, 16))})
        rounds = 0 if i % 16 == 7 else rng.choice([1, 1, 1, 2, 3])  # now and then: a question left unanswered
        for _ in range(max(rounds, 1)):
            turns.append({"from": "human", "value": _sentences(rng, int(rng.lognormvariate(3.0, 0.8)) % 117 + 4)})
            if rounds:
                turns.append({"from": "gpt", "value": _sentences(rng, int(rng.lognormvariate(2.6, 0.7)) % 59 + 2)})
        data.append({"id": f"sample-{i:03d}", "conversations": turns})
    return data


def write_sharegpt_sample(path: str | Path, n: int = 48, seed: int = 0) -> Path:
    """Write :func:`sharegpt_sample` as a JSON array, one turn a line (so errors name useful lines)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sharegpt_sample(n, seed), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write_sharegpt_sample(sys.argv[1] if len(sys.argv) > 1 else "sharegpt_small.json"))
