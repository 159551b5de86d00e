"""How the server counts tokens for ``usage`` and serves ``/tokenize`` and ``/detokenize``.

The model always works on bytes (its vocabulary and weights never change, so its work per request is the
same whatever counts it reports). What it *reports* can be a real model's count: with ``--tokenizer PATH``
(a ``tokenizer.json`` or a model folder holding one, loaded with the ``tokenizers`` library) usage counts
prompts and answers as a server of that model would:

- completions: the prompt encoded with the tokenizer's special tokens (BOS, as vLLM encodes it);
- chat: the messages rendered with the folder's chat template (``tokenizer_config.json`` or
  ``chat_template.jinja``; jinja2, as Hugging Face renders it, generation prompt added) and encoded
  without special tokens (the template writes its own); without a template, the server's own fixed
  template text (:func:`reference_server.models.tokenizer.render_chat`) is counted;
- output: the generated text, encoded without special tokens.

Without ``--tokenizer`` the count is byte-level: one token per UTF-8 byte of the prompt, one per generated
character. ``/tokenize`` and ``/detokenize`` speak vLLM's format and count the same way as usage.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from ..models.tokenizer import encode, render_chat
from .media import IMAGE_MARK


class ByteCounter:
    """The default: tokens are UTF-8 bytes."""

    name = "bytes"

    def prompt(self, kind: str, prompt_ids: list[int], messages: list[dict] | None, media_tokens: int = 0) -> int:
        """The prompt's tokens; ``prompt_ids`` already hold the ``media_tokens`` of its images."""
        return len(prompt_ids)

    def output(self, text: str, generated: int) -> int:
        return generated

    def tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        return encode(text)

    def tokenize_chat(self, messages: list[dict], add_generation_prompt: bool, add_special_tokens: bool) -> list[int]:
        return encode(render_chat(messages))  # the fixed template always ends with the assistant's turn

    def detokenize(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")


def _raise(message):
    raise ValueError(f"the chat template raised: {message}")


def _template(folder: Path):
    """(compiled chat template or None, special tokens by name) of a model folder, as transformers reads them."""
    config: dict = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        f = folder / name
        if f.is_file():
            loaded = json.loads(f.read_text(encoding="utf-8"))
            config.update(loaded if isinstance(loaded, dict) else {})
    source = config.get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default") or next(iter(named.values()), None)
    if (folder / "chat_template.jinja").is_file():
        source = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    specials = {}
    for k, v in config.items():
        v = v.get("content") if isinstance(v, dict) else v
        if k.endswith("_token") and isinstance(v, str):
            specials[k] = v
    if not isinstance(source, str):
        return None, specials
    import jinja2.sandbox  # only with --tokenizer

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, separators=None, sort_keys=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source), specials


class TokenizerCounter:
    """Counts with a real tokenizer (``--tokenizer PATH``)."""

    def __init__(self, path: str):
        try:
            from tokenizers import Tokenizer  # only with --tokenizer
        except ImportError:
            raise ValueError("--tokenizer needs the tokenizers library: pip install tokenizers") from None
        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise ValueError(f"--tokenizer {path}: no tokenizer.json there")
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:
            raise ValueError(f"--tokenizer {path}: not a tokenizer.json: {exc}") from None
        self._chat, self._specials = _template(p if p.is_dir() else p.parent)
        self.name = str(file)

    def _ids(self, text: str, special: bool) -> list[int]:
        return self._tok.encode(text, add_special_tokens=special).ids

    def prompt(self, kind: str, prompt_ids: list[int], messages: list[dict] | None, media_tokens: int = 0) -> int:
        """The prompt's tokens as a server of the tokenizer's model counts them, plus ``media_tokens`` (its images',
        whose places in the messages are marked with IMAGE_MARK)."""
        if messages is None:  # completions: the prompt as text (ids given by the client are counted as they are)
            return len(self._ids(bytes(prompt_ids).decode("utf-8", "replace"), True))
        if media_tokens:
            messages = [{**m, "content": m["content"].replace(IMAGE_MARK, "")} for m in messages]
        return len(self.tokenize_chat(messages, True, False)) + media_tokens

    def output(self, text: str, generated: int) -> int:
        return len(self._ids(text, False))

    def tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        return self._ids(text, add_special_tokens)

    def tokenize_chat(self, messages: list[dict], add_generation_prompt: bool, add_special_tokens: bool) -> list[int]:
        if self._chat is None:
            text = render_chat(messages)
        else:
            text = self._chat.render(messages=messages, add_generation_prompt=add_generation_prompt, **self._specials)
        return self._ids(text, add_special_tokens)

    def detokenize(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def make_counter(path: str | None):
    """The counter for ``--tokenizer`` (None: byte-level). Raises ValueError for a path it cannot load."""
    return ByteCounter() if not path else TokenizerCounter(path)
