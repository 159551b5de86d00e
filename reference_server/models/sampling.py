"""Turning logits into output: token sampling and stop-string conditions."""

from __future__ import annotations

import numpy as np

from .tokenizer import output_mask

_MASK = None


def _mask() -> np.ndarray:
    global _MASK
    if _MASK is None:
        _MASK = output_mask()
    return _MASK


def sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """Pick the next token from (vocab,) ``logits``: greedy when ``temperature`` is ~0, else sampled
    from the tempered softmax restricted to the ``top_p`` nucleus. Only printable tokens can be picked."""
    masked = np.asarray(logits, dtype=np.float64) + _mask()
    if temperature < 1e-5:
        return int(np.argmax(masked))
    z = masked / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1.0:
        order = np.argsort(-p)
        keep = np.cumsum(p[order]) - p[order] < top_p
        nucleus = np.zeros_like(p)
        nucleus[order[keep]] = p[order[keep]]
        p = nucleus / nucleus.sum()
    return int(min(np.searchsorted(np.cumsum(p), rng.random() * p.sum()), len(p) - 1))


class StopMatcher:
    """Applies stop strings to generated text, OpenAI-style: the stop string is not part of the output.

    Text that could still turn out to be the start of a stop string is held back until it cannot, so a
    stream never shows characters that a stop string later swallows.
    """

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """Add generated ``piece``; return (text safe to emit now, whether a stop string matched)."""
        if not self.stops:
            return piece, False
        self.pending += piece
        for stop in self.stops:
            at = self.pending.find(stop)
            if at >= 0:
                out, self.pending = self.pending[:at], ""
                return out, True
        hold = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:k]):
                    hold = max(hold, k)
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self) -> str:
        """Text still held back when generation ends without a stop match."""
        out, self.pending = self.pending, ""
        return out
