"""The audio encoder: a clip's samples -> one prompt token per ``1 / tokens_per_s`` seconds, with real work.

The clip (a WAV file: 8- or 16-bit PCM, any rate, channels averaged) is resampled to 16 kHz and cut into frames of
``16000 / tokens_per_s`` samples (40 ms at the default 25 tokens a second, as Qwen2-Audio pools Whisper's
frames); each frame is embedded linearly, ``layers`` residual MLP blocks run over every frame, and each frame's
vector projected onto the byte vocabulary gives its token. So a clip costs encoder time and prefill time in
proportion to its duration.
"""

from __future__ import annotations

import io
import math
import wave

import numpy as np

from .modelspec import VOCAB_SIZE

RATE = 16_000


def wav_seconds(data: bytes) -> float:
    """The duration of a WAV file from its header; ValueError when it is not one."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            return w.getnframes() / w.getframerate()
    except (wave.Error, EOFError, ZeroDivisionError) as exc:
        raise ValueError(f"not a WAV file ({exc})") from None


def audio_tokens(seconds: float, tokens_per_s: int) -> int:
    """Prompt tokens a clip of ``seconds`` becomes (at least 1)."""
    return max(1, math.ceil(seconds * tokens_per_s))


class AudioEncoder:
    """A frame encoder of width ``d`` with ``layers`` MLP blocks; random but fixed weights (``seed``)."""

    def __init__(self, tokens_per_s: int, d: int, layers: int, seed: int = 0):
        rng = np.random.default_rng([seed, 0xA0D1])
        self.frame = max(1, RATE // tokens_per_s)
        self.tokens_per_s = tokens_per_s
        self.embed = (rng.standard_normal((self.frame, d)) / math.sqrt(self.frame)).astype(np.float32)
        self.blocks = [((rng.standard_normal((d, 4 * d)) / math.sqrt(d)).astype(np.float32),
                        (rng.standard_normal((4 * d, d)) / math.sqrt(4 * d)).astype(np.float32))
                       for _ in range(layers)]
        self.out = (rng.standard_normal((d, VOCAB_SIZE)) / math.sqrt(d)).astype(np.float32)

    def tokens(self, data: bytes) -> list[int]:
        """One token per frame of the clip ``data`` (a WAV file)."""
        with wave.open(io.BytesIO(data), "rb") as w:
            width, channels, rate, raw = w.getsampwidth(), w.getnchannels(), w.getframerate(), w.readframes(-1)
        dtype = {1: np.uint8, 2: "<i2", 4: "<i4"}.get(width)
        if dtype is None:
            raise ValueError(f"{8 * width}-bit samples are not read")
        x = np.frombuffer(raw, dtype=dtype).astype(np.float32)
        x = (x - 128) / 128 if width == 1 else x / float(2 ** (8 * width - 1))
        x = x.reshape(-1, channels).mean(axis=1) if channels > 1 else x
        n = audio_tokens(len(x) / rate, self.tokens_per_s)
        resampled = np.interp(np.arange(n * self.frame) * (rate / RATE), np.arange(len(x)), x, right=0.0)
        h = resampled.astype(np.float32).reshape(n, self.frame) @ self.embed
        for w1, w2 in self.blocks:
            h = h + np.maximum(h @ w1, 0.0) @ w2
        return (h @ self.out).argmax(axis=1).tolist()
