"""Byte-level tokenizer and chat template: no vocabulary file, no download.

Prompt tokens are the UTF-8 bytes of the prompt. Generated tokens are restricted to printable ASCII
(bytes 32..126), so every generated token is exactly one character and streams can send one token per
chunk without ever splitting a multi-byte character.
"""

from __future__ import annotations

import numpy as np

from .modelspec import VOCAB_SIZE

PRINTABLE_LO, PRINTABLE_HI = 32, 126


def encode(text: str) -> list[int]:
    """Token ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode_token(token: int) -> str:
    """Text of one generated token (always a single printable ASCII character)."""
    return chr(token)


def output_mask() -> np.ndarray:
    """Additive logit mask: 0 for printable ASCII, -inf for every other byte."""
    mask = np.full(VOCAB_SIZE, -np.inf, dtype=np.float32)
    mask[PRINTABLE_LO : PRINTABLE_HI + 1] = 0.0
    return mask


def render_chat(messages: list[dict]) -> str:
    """Render chat messages into one prompt string (a fixed, ChatML-like template).

    ``messages`` are already validated: each has a string ``role`` and string ``content``.
    """
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    parts.append("<|assistant|>\n")
    return "".join(parts)
