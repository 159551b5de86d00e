"""The same decoder-only transformer in torch: CUDA when available, else CPU with few threads.

Imported only when the torch backend is chosen (torch is an optional extra). Same weights file, same
maths as :mod:`reference_server.models.numpy_model`, so both backends produce the same tokens in fp32.

Precision: ``fp32``; ``bf16`` (native bfloat16 weights and activations, on CPU and CUDA); ``int8`` by
dynamic quantization of every linear layer (``torch.ao.quantization.quantize_dynamic``, CPU only: int8
weights, activations quantized per batch on the fly).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .modelspec import ModelSpec
from .positions import sinusoidal_positions


def _tensor(arr: np.ndarray) -> torch.Tensor:
    if arr.dtype == np.uint16:  # bfloat16 bit patterns from the weights file
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16).float()
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


def _linear(w: np.ndarray) -> nn.Linear:
    """nn.Linear computing ``x @ w`` for a (in, out) matrix ``w``."""
    layer = nn.Linear(w.shape[0], w.shape[1], bias=False)
    layer.weight = nn.Parameter(_tensor(w).t().contiguous(), requires_grad=False)
    return layer


class _Net(nn.Module):
    def __init__(self, spec: ModelSpec, w: dict[str, np.ndarray]):
        super().__init__()
        self.embed = nn.Parameter(_tensor(w["embed"]), requires_grad=False)
        self.norm1 = nn.ParameterList([nn.Parameter(_tensor(w[f"l{i}.norm1"]), requires_grad=False)
                                       for i in range(spec.n_layers)])
        self.norm2 = nn.ParameterList([nn.Parameter(_tensor(w[f"l{i}.norm2"]), requires_grad=False)
                                       for i in range(spec.n_layers)])
        self.wqkv = nn.ModuleList([_linear(w[f"l{i}.wqkv"]) for i in range(spec.n_layers)])
        self.wo = nn.ModuleList([_linear(w[f"l{i}.wo"]) for i in range(spec.n_layers)])
        self.w1 = nn.ModuleList([_linear(w[f"l{i}.w1"]) for i in range(spec.n_layers)])
        self.w2 = nn.ModuleList([_linear(w[f"l{i}.w2"]) for i in range(spec.n_layers)])
        self.norm_f = nn.Parameter(_tensor(w["norm_f"]), requires_grad=False)
        self.lm_head = _linear(w["lm_head"])
        self.pos = nn.Parameter(torch.from_numpy(sinusoidal_positions(spec.max_model_len, spec.d_model)),
                                requires_grad=False)


def _rmsnorm(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


class TorchSeqCache:
    """KV cache of one sequence on the model's device."""

    __slots__ = ("k", "v", "length")

    def __init__(self, spec: ModelSpec, capacity: int, dtype, device):
        shape = (spec.n_layers, spec.n_heads, capacity, spec.head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.length = 0


class TorchModel:
    """Forward passes with torch; the interface of :class:`~reference_server.models.numpy_model.NumpyModel`."""

    def __init__(self, spec: ModelSpec, weights: dict[str, np.ndarray], precision: str, device: str, threads: int):
        if device == "cpu":
            torch.set_num_threads(max(1, threads))
        self.spec, self.precision, self.device = spec, precision, device
        net = _Net(spec, weights).eval()
        self.dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        if precision == "int8":
            if device != "cpu":
                raise ValueError("int8 dynamic quantization is CPU-only in torch")
            with warnings.catch_warnings():  # torch.ao.quantization is deprecated upstream but still works
                warnings.simplefilter("ignore")
                net = torch.ao.quantization.quantize_dynamic(net, {nn.Linear}, dtype=torch.qint8)
            self.precision_note = "dynamic quantization (int8 weights, fp32 activations)"
        else:
            net = net.to(device=device, dtype=self.dtype)
            self.precision_note = "native"
        self.net = net
        self.scale = 1.0 / math.sqrt(spec.head_dim)

    def new_cache(self, capacity: int) -> TorchSeqCache:
        return TorchSeqCache(self.spec, capacity, self.dtype, self.device)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of keys and values one token holds in a cache (every layer)."""
        return 2 * self.spec.n_layers * self.spec.d_model * torch.empty((), dtype=self.dtype).element_size()

    def read_kv(self, cache: TorchSeqCache, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy (on the model's device) of the keys and values of positions ``[start, stop)`` of ``cache``."""
        return cache.k[:, :, start:stop].clone(), cache.v[:, :, start:stop].clone()

    def write_kv(self, cache: TorchSeqCache, start: int, kv: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Put keys and values from :meth:`read_kv` at positions ``start ..`` of ``cache`` (its length is the
        caller's to set)."""
        k, v = kv
        cache.k[:, :, start : start + k.shape[2]] = k
        cache.v[:, :, start : start + v.shape[2]] = v

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        n = self.net
        return x + n.w2[i](F.gelu(n.w1[i](_rmsnorm(x, n.norm2[i])), approximate="tanh"))

    def _logits(self, x: torch.Tensor) -> np.ndarray:
        return self.net.lm_head(_rmsnorm(x, self.net.norm_f)).float().cpu().numpy()

    def prefill(self, tokens: list[int], cache: TorchSeqCache) -> np.ndarray:
        """Run the prompt through the model into ``cache``, after what it holds (empty, or a prefix from the
        prefix cache); return the last logits (numpy)."""
        s, n_ = self.spec, self.net
        n, st = len(tokens), cache.length
        end = st + n
        with torch.inference_mode():
            ids = torch.tensor(tokens, device=self.device)
            x = n_.embed[ids] + n_.pos[st:end]
            # a continued prompt attends to the cached prefix too: row r sees columns [0, st + r]
            mask = (torch.arange(end, device=self.device)[None, :]
                    <= torch.arange(st, end, device=self.device)[:, None]) if st else None
            for i in range(s.n_layers):
                qkv = n_.wqkv[i](_rmsnorm(x, n_.norm1[i])).view(n, 3, s.n_heads, s.head_dim).permute(1, 2, 0, 3)
                cache.k[i, :, st:end] = qkv[1]
                cache.v[i, :, st:end] = qkv[2]
                if st:
                    att = F.scaled_dot_product_attention(qkv[0], cache.k[i, :, :end], cache.v[i, :, :end],
                                                         attn_mask=mask)
                else:
                    att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
                x = x + n_.wo[i](att.transpose(0, 1).reshape(n, s.d_model))
                x = self._mlp(i, x)
            cache.length = end
            return self._logits(x[-1:])[0]

    def decode(self, tokens: list[int], caches: list[TorchSeqCache]) -> np.ndarray:
        """One decode step for the batch; return (batch, vocab) logits (numpy)."""
        s, n_ = self.spec, self.net
        B = len(tokens)
        with torch.inference_mode():
            ids = torch.tensor(tokens, device=self.device)
            pos = torch.tensor([c.length for c in caches], device=self.device)
            x = n_.embed[ids] + n_.pos[pos]
            for i in range(s.n_layers):
                qkv = n_.wqkv[i](_rmsnorm(x, n_.norm1[i])).view(B, 3, s.n_heads, s.head_dim)
                outs = []
                for b, c in enumerate(caches):
                    t = c.length
                    c.k[i, :, t] = qkv[b, 1]
                    c.v[i, :, t] = qkv[b, 2]
                    q = qkv[b, 0].unsqueeze(1)  # (H, 1, hd)
                    outs.append(F.scaled_dot_product_attention(q, c.k[i, :, : t + 1], c.v[i, :, : t + 1]))
                att = torch.stack(outs).reshape(B, s.d_model)
                x = x + n_.wo[i](att)
                x = self._mlp(i, x)
            for c in caches:
                c.length += 1
            return self._logits(x)
