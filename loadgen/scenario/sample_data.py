"""Sample data latbench makes itself, for examples, tests and benchmarks (no download): a small ShareGPT-format
dataset, and a small BPE tokenizer trained on the spot.

``python -m loadgen.scenario.sample_data scenarios/data/sharegpt_small.json`` writes the file the bundled
``scenarios/dataset.yaml`` reads; a test checks that the committed file is exactly what this writes. The
conversations are seeded random sentences of common words in ShareGPT's shape (``id``, ``conversations``
of ``from``/``value`` turns): prompts of 4 to 120 words, answers of 2 to 60, some conversations of several
turns, some opening with a system turn, and a few with no answered human turn (which readers skip, as
vLLM's ShareGPT mode does), so every rule of the format is exercised.

:func:`train_sample_tokenizer` trains (offline, in about a second) a byte-level BPE shaped like Llama 3's:
BOS added to a plain prompt, header tokens and a jinja2 chat template in ``tokenizer_config.json``. Give it
to latbench (``workload.tokenizer``) and to the reference server (``--tokenizer``) to see exact counts.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from loadgen.scenario.prompts import WORDS  # the same plain words as synthetic prompts

__all__ = ["sharegpt_sample", "train_sample_tokenizer", "write_sharegpt_sample"]

CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                 "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]


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


def train_sample_tokenizer(folder: str | Path, vocab_size: int = 600, template: bool = True) -> Path:
    """Train a small byte-level BPE on seeded English-like words and save it as a model folder (tokenizer.json,
    tokenizer_config.json with the chat template unless ``template`` is False). Returns the folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # the dependency

    rng = random.Random(7)
    endings = ["", "", "", "s", "ing", "ed", ",", ".", "?"]
    corpus = [" ".join(rng.choice(WORDS) + rng.choice(endings) for _ in range(40)) for _ in range(1500)]
    corpus += ["".join(chr(rng.randrange(32, 127)) for _ in range(60)) for _ in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", 0)])
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    if template:
        config["chat_template"] = CHAT_TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return folder


if __name__ == "__main__":  # python -m loadgen.scenario.sample_data [sharegpt.json] [--tokenizer FOLDER]
    args = sys.argv[1:]
    if args[:1] == ["--tokenizer"]:
        print(train_sample_tokenizer(args[1] if len(args) > 1 else "sample-tokenizer"))
    else:
        print(write_sharegpt_sample(args[0] if args else "sharegpt_small.json"))
