"""Write a tiny Llama-shaped model folder that vLLM serves with ``--load-format dummy`` (no weights at all).

Run with a python that has the ``tokenizers`` library (the vLLM peer venv has it; latbench's own venv need
not): ``python benchmarks/tiny_llama.py model OUT_DIR CORPUS.txt``. It writes

- ``tokenizer.json``: a BPE tokenizer trained offline on ``CORPUS.txt`` (no download). A Metaspace
  pre-tokenizer, as Llama's SentencePiece tokenizers have, rather than a byte-level one: every token then
  decodes to whole characters, so the random tokens a dummy-weight model emits always decode to text
  (a byte-level vocabulary lets random tokens form invalid UTF-8, which the server holds back, and a
  streamed chunk would then carry no text for reasons that have nothing to do with the client).
- ``tokenizer_config.json`` with a ``chat_template`` (vLLM's chat endpoint and AIPerf need one) whose
  role markers are single special tokens, so the template adds a known, small number of tokens.
- ``config.json``: ``LlamaForCausalLM``, 4 layers, hidden size 256 (about 10 M parameters with the
  vocabulary), small enough that a 2-core machine decodes at a few ms per token.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 4096
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def train_tokenizer(corpus: Path):
    """A BPE tokenizer of ``VOCAB`` entries trained on the lines of ``corpus``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, min_frequency=2, show_progress=False)
    tok.train([str(corpus)], trainer)
    return tok


def write_model(out: Path, corpus: Path) -> dict:
    """Write the folder; returns its config (with the tokenizer's real vocabulary size)."""
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(corpus)
    tok.save(str(out / "tokenizer.json"))
    config = dict(CONFIG, vocab_size=tok.get_vocab_size())
    (out / "config.json").write_text(json.dumps(config, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>",
        "add_bos_token": False, "add_eos_token": False,
        "model_max_length": CONFIG["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    return config


def exact_prompts(model: Path, long_lines: Path, asked_lines: Path, out: Path, tokens: int) -> dict:
    """Cut each line of ``long_lines`` to exactly ``tokens`` tokens of the model's tokenizer; JSONL to ``out``.

    A cut falls on a token boundary and is kept only when the text it decodes to encodes back to the
    same count. Also counts how many tokens the lines of ``asked_lines`` (latbench's synthetic prompts
    asked for ``tokens`` tokens, made without a tokenizer) really are. Returns the counts.
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    kept = []
    for line in long_lines.read_text().splitlines():
        ids = tok.encode(line, add_special_tokens=False).ids
        if len(ids) < tokens:
            continue
        text = tok.decode(ids[:tokens])
        if len(tok.encode(text, add_special_tokens=False).ids) == tokens:
            kept.append(text)
    out.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in kept))
    asked = [len(tok.encode(x, add_special_tokens=False).ids) for x in asked_lines.read_text().splitlines() if x]
    return {"written": len(kept), "asked": tokens, "synthetic_tokens_mean": sum(asked) / max(1, len(asked)),
            "synthetic_tokens_min": min(asked, default=0), "synthetic_tokens_max": max(asked, default=0)}


if __name__ == "__main__":
    if sys.argv[1] == "model":
        cfg = write_model(Path(sys.argv[2]), Path(sys.argv[3]))
        print(json.dumps({"vocab_size": cfg["vocab_size"]}))
    elif sys.argv[1] == "prompts":
        model, long_lines, asked_lines, out, n = sys.argv[2:7]
        print(json.dumps(exact_prompts(Path(model), Path(long_lines), Path(asked_lines), Path(out), int(n))))
    else:
        sys.exit(f"usage: {sys.argv[0]} model OUT CORPUS | prompts MODEL LONG_LINES ASKED_LINES OUT TOKENS")
