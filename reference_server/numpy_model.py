"""The decoder-only transformer in numpy, with a per-sequence KV cache.

Pre-norm blocks (RMSNorm, multi-head causal self-attention, GELU MLP), sinusoidal positions and an LM
head. A decode step runs the weight matmuls once for the whole batch (where
batching pays: the weights are read once per step, not once per sequence) and attention per sequence
against that sequence's own cache.

Precision on numpy: ``fp32`` is native; ``bf16`` and ``int8`` are *emulated*: the weights are rounded to
bfloat16, or quantized to int8 with one scale per output channel and dequantized at load, so the
numerics are those of the low precision while compute stays float32 (no speed change).
"""

from __future__ import annotations

import numpy as np

from .modelspec import ModelSpec
from .weights import bf16_bits_to_float32, round_to_bf16

PRECISIONS = ("fp32", "bf16", "int8")


def quantize_int8_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization of a (in, out) matrix with one scale per output channel."""
    scale = np.abs(w).max(axis=0) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def sinusoidal_positions(n: int, d: int) -> np.ndarray:
    """(n, d) float32 table of fixed sinusoidal position encodings."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(d // 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, 2 * i / d)
    table = np.zeros((n, d), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table.astype(np.float32)


class SeqCache:
    """KV cache of one sequence: keys and values of every layer, sized for its whole lifetime."""

    __slots__ = ("k", "v", "length")

    def __init__(self, spec: ModelSpec, capacity: int):
        shape = (spec.n_layers, spec.n_heads, capacity, spec.head_dim)
        self.k = np.empty(shape, dtype=np.float32)
        self.v = np.empty(shape, dtype=np.float32)
        self.length = 0


def _rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)) * g


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x)))


def _softmax_inplace(s: np.ndarray) -> np.ndarray:
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


class NumpyModel:
    """Forward passes of one model preset on the CPU with numpy (BLAS matmuls)."""

    device = "cpu"

    def __init__(self, spec: ModelSpec, weights: dict[str, np.ndarray], precision: str = "fp32"):
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        self.spec = spec
        self.precision = precision
        w = {k: (bf16_bits_to_float32(v) if v.dtype == np.uint16 else v.astype(np.float32)) for k, v in weights.items()}
        for name, arr in w.items():
            if arr.ndim == 2:
                if precision == "bf16":
                    w[name] = round_to_bf16(arr)
                elif precision == "int8":
                    q, scale = quantize_int8_per_channel(arr)
                    w[name] = q.astype(np.float32) * scale
        self.embed = w["embed"]
        self.lm_head = w["lm_head"]
        self.norm_f = w["norm_f"]
        self.layers = [
            tuple(w[f"l{i}.{n}"] for n in ("norm1", "wqkv", "wo", "norm2", "w1", "w2"))
            for i in range(spec.n_layers)
        ]
        self.pos = sinusoidal_positions(spec.max_model_len, spec.d_model)
        self.scale = np.float32(1.0 / np.sqrt(spec.head_dim))

    @property
    def precision_note(self) -> str:
        return "native" if self.precision == "fp32" else "emulated (weights rounded, fp32 compute)"

    def new_cache(self, capacity: int) -> SeqCache:
        """A KV cache for one sequence of at most ``capacity`` tokens."""
        return SeqCache(self.spec, capacity)

    def prefill(self, tokens: list[int], cache: SeqCache) -> np.ndarray:
        """Run the prompt ``tokens`` through the model into an empty ``cache``; return the last logits."""
        s = self.spec
        n, H, hd = len(tokens), s.n_heads, s.head_dim
        x = self.embed[np.asarray(tokens)] + self.pos[:n]
        causal = np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
        for li, (g1, wqkv, wo, g2, w1, w2) in enumerate(self.layers):
            qkv = (_rmsnorm(x, g1) @ wqkv).reshape(n, 3, H, hd)
            q = qkv[:, 0].transpose(1, 0, 2)
            cache.k[li, :, :n] = qkv[:, 1].transpose(1, 0, 2)
            cache.v[li, :, :n] = qkv[:, 2].transpose(1, 0, 2)
            scores = (q @ cache.k[li, :, :n].transpose(0, 2, 1)) * self.scale + causal
            att = _softmax_inplace(scores) @ cache.v[li, :, :n]
            x = x + att.transpose(1, 0, 2).reshape(n, s.d_model) @ wo
            x = x + _gelu(_rmsnorm(x, g2) @ w1) @ w2
        cache.length = n
        return (_rmsnorm(x[-1:], self.norm_f) @ self.lm_head)[0]

    def decode(self, tokens: list[int], caches: list[SeqCache]) -> np.ndarray:
        """One decode step: append one token to each sequence; return (batch, vocab) logits."""
        s = self.spec
        B, H, hd = len(tokens), s.n_heads, s.head_dim
        positions = np.fromiter((c.length for c in caches), dtype=np.int64, count=B)
        x = self.embed[np.asarray(tokens)] + self.pos[positions]
        att = np.empty((B, H, hd), dtype=np.float32)
        for li, (g1, wqkv, wo, g2, w1, w2) in enumerate(self.layers):
            qkv = (_rmsnorm(x, g1) @ wqkv).reshape(B, 3, H, hd)
            for i, c in enumerate(caches):
                t = c.length
                kc, vc = c.k[li], c.v[li]
                kc[:, t] = qkv[i, 1]
                vc[:, t] = qkv[i, 2]
                sc = (qkv[i, 0][:, None, :] @ kc[:, : t + 1].transpose(0, 2, 1)) * self.scale
                att[i] = (_softmax_inplace(sc) @ vc[:, : t + 1])[:, 0]
            x = x + att.reshape(B, s.d_model) @ wo
            x = x + _gelu(_rmsnorm(x, g2) @ w1) @ w2
        for c in caches:
            c.length += 1
        return _rmsnorm(x, self.norm_f) @ self.lm_head
