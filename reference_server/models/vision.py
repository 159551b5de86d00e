"""The vision encoder: an image's pixels -> one prompt token per patch, with real matrix work per patch.

Like a ViT, an image is cut into patches of ``patch x patch`` pixels (its sides padded up to a multiple of the
patch), each patch is embedded linearly (``3 patch^2 -> d``), then ``layers`` residual MLP blocks
(``d -> 4d -> d``) run over every patch; each patch's vector is projected onto the byte vocabulary and its
largest entry is the patch's token, after each ``merge x merge`` neighbouring patches are averaged into one (as
Qwen2-VL merges 2 x 2). The language model then prefills those tokens with the prompt's text, so an image costs
encoder time and prefill time in proportion to its patches, hence to its pixels.

:class:`ImageCache` keeps each image's tokens by the SHA-256 of its bytes, least recently used evicted first: a
repeated image skips the decode and the encoder (vLLM caches multimodal encodings this way); its tokens are
still prefilled (the prefix cache, where on, may spare those).
"""

from __future__ import annotations

import io
import math
from collections import OrderedDict

import numpy as np

from .modelspec import VOCAB_SIZE


def patches_of(width: int, height: int, patch: int, merge: int = 1) -> int:
    """Prompt tokens an image of ``width`` x ``height`` pixels becomes: one per ``merge x merge`` patches (the
    sides rounded up at each step)."""
    return math.ceil(math.ceil(width / patch) / merge) * math.ceil(math.ceil(height / patch) / merge)


class VisionEncoder:
    """A patch encoder of width ``d`` with ``layers`` MLP blocks; random but fixed weights (``seed``)."""

    def __init__(self, patch: int, d: int, layers: int, seed: int = 0, merge: int = 1):
        rng = np.random.default_rng([seed, 0x7151])
        self.patch, self.d, self.merge = patch, d, merge
        k = 3 * patch * patch
        self.embed = (rng.standard_normal((k, d)) / math.sqrt(k)).astype(np.float32)
        self.blocks = [((rng.standard_normal((d, 4 * d)) / math.sqrt(d)).astype(np.float32),
                        (rng.standard_normal((4 * d, d)) / math.sqrt(4 * d)).astype(np.float32))
                       for _ in range(layers)]
        self.out = (rng.standard_normal((d, VOCAB_SIZE)) / math.sqrt(d)).astype(np.float32)

    def pixels(self, data: bytes) -> np.ndarray:
        """The RGB pixels (height x width x 3, uint8) of an encoded image."""
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))

    def tokens(self, rgb: np.ndarray) -> list[int]:
        """One token per ``merge x merge`` patches of ``rgb`` (row-major), from the encoder's real work."""
        p = self.patch
        h, w = rgb.shape[:2]
        ph, pw = math.ceil(h / p), math.ceil(w / p)
        padded = np.zeros((ph * p, pw * p, 3), dtype=np.float32)
        padded[:h, :w] = rgb
        x = padded.reshape(ph, p, pw, p, 3).transpose(0, 2, 1, 3, 4).reshape(ph * pw, 3 * p * p) / 255.0
        x = x @ self.embed
        for w1, w2 in self.blocks:
            x = x + np.maximum(x @ w1, 0.0) @ w2
        m = self.merge
        if m > 1:  # each m x m block of patches averaged into one token
            mh, mw = math.ceil(ph / m), math.ceil(pw / m)
            grid = np.zeros((mh * m, mw * m, self.d), dtype=np.float32)
            grid[:ph, :pw] = x.reshape(ph, pw, self.d)
            x = grid.reshape(mh, m, mw, m, self.d).mean(axis=(1, 3)).reshape(mh * mw, self.d)
        return (x @ self.out).argmax(axis=1).tolist()


class ImageCache:
    """Image tokens by the SHA-256 of the image's bytes; at most ``capacity`` images, least recently used out."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict[str, list[int]] = OrderedDict()

    def clear(self) -> int:
        """Drop every entry; returns how many there were."""
        n = len(self._items)
        self._items.clear()
        return n

    def get(self, key: str) -> list[int] | None:
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
        return hit

    def put(self, key: str, tokens: list[int]) -> None:
        self._items[key] = tokens
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
