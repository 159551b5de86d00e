"""The decoder-only transformer in numpy, with a per-sequence KV cache.

Pre-norm blocks (RMSNorm, multi-head causal self-attention, GELU MLP), sinusoidal positions and an LM
head. :meth:`NumpyModel.step` is the one forward pass: it packs the
tokens of several sequences (whole prompts, prompt chunks, single decode tokens, mixed) into one matrix,
so every weight matmul runs once per step for all of them (the weights are read once per step, not once
per sequence, and the matmuls are large enough for BLAS to run near peak), and runs attention per
sequence against that sequence's own cache. ``prefill`` and ``decode`` are the two special cases.

Precision on numpy: ``fp32`` is native; ``bf16`` and ``int8`` are *emulated*: the weights are rounded to
bfloat16, or quantized to int8 with one scale per output channel and dequantized at load, so the
numerics are those of the low precision while compute stays float32 (no speed change).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .modelspec import ModelSpec
from .positions import sinusoidal_positions
from .weights import bf16_bits_to_float32, round_to_bf16

PRECISIONS = ("fp32", "bf16", "int8")
PARALLEL_MIN_TOKENS = 48  # a step splits across compute threads only with at least this many tokens per thread


def quantize_int8_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization of a (in, out) matrix with one scale per output channel."""
    scale = np.abs(w).max(axis=0) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


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
    """tanh-approximated GELU, computed in place in ``x`` (no temporaries the size of ``x`` but one)."""
    t = x * x
    t *= np.float32(0.044715)
    t += np.float32(1.0)
    t *= x
    t *= np.float32(0.7978845608)
    np.tanh(t, out=t)
    t += np.float32(1.0)
    x *= t
    x *= np.float32(0.5)
    return x


def _softmax_inplace(s: np.ndarray) -> np.ndarray:
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


class NumpyModel:
    """Forward passes of one model preset on the CPU with numpy (BLAS matmuls)."""

    device = "cpu"
    chunked_prefill = True  # step() takes prompt chunks that continue a partly filled cache

    def __init__(self, spec: ModelSpec, weights: dict[str, np.ndarray], precision: str = "fp32", threads: int = 1):
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
        self._causal = np.zeros((0, 0), dtype=np.float32)
        self.threads = max(1, int(threads))
        self._pool: ThreadPoolExecutor | None = None

    @property
    def precision_note(self) -> str:
        return "native" if self.precision == "fp32" else "emulated (weights rounded, fp32 compute)"

    def new_cache(self, capacity: int) -> SeqCache:
        """A KV cache for one sequence of at most ``capacity`` tokens."""
        return SeqCache(self.spec, capacity)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one token holds in a cache (every layer)."""
        return 2 * self.spec.n_layers * self.spec.d_model * 4

    def read_kv(self, cache: SeqCache, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """A copy of the keys and values of positions ``[start, stop)`` of ``cache`` (the prefix cache's blocks)."""
        return cache.k[:, :, start:stop].copy(), cache.v[:, :, start:stop].copy()

    def write_kv(self, cache: SeqCache, start: int, kv: tuple[np.ndarray, np.ndarray]) -> None:
        """Put keys and values from :meth:`read_kv` at positions ``start ..`` of ``cache`` (its length is the
        caller's to set)."""
        k, v = kv
        cache.k[:, :, start : start + k.shape[2]] = k
        cache.v[:, :, start : start + v.shape[2]] = v

    def _mask(self, rows: slice, cols: int) -> np.ndarray:
        """Causal mask rows ``rows`` (absolute positions) x columns ``[0, cols)``: -inf above the diagonal."""
        causal = self._causal  # one read: compute threads may grow it concurrently
        if causal.shape[0] < rows.stop:  # grown on demand, up to max_model_len
            n = min(self.spec.max_model_len, max(rows.stop, 2 * causal.shape[0], 256))
            causal = self._causal = np.triu(np.full((n, n), -np.inf, dtype=np.float32), k=1)
        return causal[rows, :cols]

    def step(self, segments: list[tuple[list[int], SeqCache]]) -> np.ndarray:
        """One forward pass over several sequences; with ``threads`` > 1 the segments are split into
        groups of about equal token counts, each run through :meth:`_forward` on its own thread (BLAS
        stays single-threaded: no thread pool spinning against the load generator for the cores)."""
        groups = self._split(segments)
        if len(groups) == 1:
            return self._forward(segments)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="refserver-compute")
        futures = [self._pool.submit(self._forward, [segments[i] for i in g]) for g in groups[1:]]
        parts = [self._forward([segments[i] for i in groups[0]])] + [f.result() for f in futures]
        out = np.empty((len(segments), parts[0].shape[1]), dtype=parts[0].dtype)
        for g, part in zip(groups, parts):
            out[g] = part
        return out

    def _split(self, segments) -> list[list[int]]:
        """Segment indices in ``threads`` groups of about equal token counts (one group for small steps)."""
        total = sum(len(t) for t, _ in segments)
        k = min(self.threads, len(segments), total // PARALLEL_MIN_TOKENS)
        if k <= 1:
            return [list(range(len(segments)))]
        loads, groups = [0] * k, [[] for _ in range(k)]
        for i in sorted(range(len(segments)), key=lambda i: -len(segments[i][0])):
            j = loads.index(min(loads))
            groups[j].append(i)
            loads[j] += len(segments[i][0])
        return [g for g in groups if g]

    def _forward(self, segments: list[tuple[list[int], SeqCache]]) -> np.ndarray:
        """One forward pass over several sequences at once; return (len(segments), vocab) logits.

        Segment ``(tokens, cache)`` appends ``tokens`` to ``cache`` at its current length: a whole prompt
        (prefill), a chunk of one (chunked prefill) or one token (decode). Every segment's rows go
        through each weight matmul together, packed into one (total tokens, d_model) matrix, so the
        weights are read once per step and the matmuls stay large; attention runs per segment against
        that segment's own cache (causal within the segment). Logits are those of each segment's last
        token.
        """
        s = self.spec
        H, hd, D = s.n_heads, s.head_dim, s.d_model
        lens = [len(t) for t, _ in segments]
        starts = [c.length for _, c in segments]
        offs = np.zeros(len(segments) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        N = int(offs[-1])
        if N == len(segments):  # decode only: one token each
            ids = np.fromiter((t[0] for t, _ in segments), dtype=np.int64, count=N)
            pos = np.asarray(starts, dtype=np.int64)
        else:
            ids = np.fromiter((tok for t, _ in segments for tok in t), dtype=np.int64, count=N)
            pos = np.concatenate([np.arange(st, st + n) for st, n in zip(starts, lens)])
        x = self.embed[ids] + self.pos[pos]
        att = np.empty((N, H, hd), dtype=np.float32)
        spans = [(int(offs[i]), int(offs[i + 1]), starts[i], c) for i, (_, c) in enumerate(segments)]
        for li, (g1, wqkv, wo, g2, w1, w2) in enumerate(self.layers):
            qkv = (_rmsnorm(x, g1) @ wqkv).reshape(N, 3, H, hd)
            q_all = qkv[:, 0] * self.scale  # (N, H, hd), scaled once here rather than every score
            for a, b, st, c in spans:
                end = st + b - a
                kc, vc = c.k[li], c.v[li]
                kc[:, st:end] = qkv[a:b, 1].transpose(1, 0, 2)
                vc[:, st:end] = qkv[a:b, 2].transpose(1, 0, 2)
                sc = q_all[a:b].transpose(1, 0, 2) @ kc[:, :end].transpose(0, 2, 1)  # (H, n, end)
                if b - a > 1:
                    sc += self._mask(slice(st, end), end)
                att[a:b] = (_softmax_inplace(sc) @ vc[:, :end]).transpose(1, 0, 2)
            x += att.reshape(N, D) @ wo
            x += _gelu(_rmsnorm(x, g2) @ w1) @ w2
        for (_, c), n in zip(segments, lens):
            c.length += n
        return _rmsnorm(x[offs[1:] - 1], self.norm_f) @ self.lm_head

    def prefill(self, tokens: list[int], cache: SeqCache) -> np.ndarray:
        """Run the prompt ``tokens`` through the model into an empty ``cache``; return the last logits."""
        return self.step([(tokens, cache)])[0]

    def decode(self, tokens: list[int], caches: list[SeqCache]) -> np.ndarray:
        """One decode step: append one token to each sequence; return (batch, vocab) logits."""
        return self.step([([t], c) for t, c in zip(tokens, caches)])
