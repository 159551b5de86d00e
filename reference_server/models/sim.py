"""``sim:<gpu>-<model>`` backends: real tokens from the tiny model, step times from a GPU roofline.

A decode step of a memory-bound LLM reads every weight once, plus the KV cache of every sequence, so its
time is ``bytes / memory bandwidth`` unless the batch is large enough to become compute bound
(``2 x params x batch / FLOPS``). A prefill of ``n`` tokens costs ``2 x params x n / FLOPS``. The simulated
model computes its tokens with the tiny numpy model and then sleeps until the modelled time has passed, so
latency *shapes* (batching gains, prefill vs decode) look like the named GPU. When the tiny model's own
compute takes longer than the modelled step, the step takes the compute time and the excess is counted in
``overrun_s`` (exported as a metric) so the distortion is visible, never silent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

# memory bandwidth (bytes/s), dense bf16 tensor FLOPS, memory (bytes); vendor datasheet figures
GPUS: dict[str, tuple[float, float, float]] = {
    "h200": (4.8e12, 989e12, 141e9),
    "h100": (3.35e12, 989e12, 80e9),
    "a100": (2.039e12, 312e12, 80e9),
    "l40s": (0.864e12, 362e12, 48e9),
    "a10g": (0.6e12, 125e12, 24e9),
    "l4": (0.3e12, 121e12, 24e9),
    "t4": (0.32e12, 65e12, 16e9),
}
# parameters, layers, KV width per layer (GQA heads x head dim) of Llama-3-shaped models
MODELS: dict[str, tuple[float, int, int]] = {
    "1b": (1.24e9, 16, 512),
    "3b": (3.21e9, 28, 1024),
    "8b": (8.03e9, 32, 1024),
    "70b": (70.6e9, 80, 1024),
}
BANDWIDTH_EFFICIENCY = 0.8  # achievable fraction of datasheet bandwidth
COMPUTE_EFFICIENCY = 0.5  # achievable fraction of datasheet FLOPS (MFU)
STEP_OVERHEAD_S = 0.0003  # kernel launches, scheduling, sampling per step
BYTES_PER_PARAM = 2  # bf16


@dataclass(frozen=True)
class SimProfile:
    """Roofline of one model on one GPU. All times in seconds."""

    name: str
    bandwidth: float
    flops: float
    params: float
    layers: int
    kv_width: int

    @property
    def weight_bytes(self) -> float:
        return self.params * BYTES_PER_PARAM

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_width * BYTES_PER_PARAM

    def decode_time(self, batch: int, context_tokens: int) -> float:
        """Seconds for one decode step of ``batch`` sequences holding ``context_tokens`` in total."""
        memory = ((self.weight_bytes + self.kv_bytes_per_token * context_tokens)
                  / (self.bandwidth * BANDWIDTH_EFFICIENCY))
        compute = 2 * self.params * batch / (self.flops * COMPUTE_EFFICIENCY)
        return max(memory, compute) + STEP_OVERHEAD_S

    def step_time(self, decodes: int, context_tokens: int, prompt_tokens: int) -> float:
        """Seconds for one mixed pass: ``decodes`` decode tokens over ``context_tokens`` of KV cache plus
        ``prompt_tokens`` prompt tokens. Equals ``decode_time`` without prompt tokens and ``prefill_time``
        without decodes."""
        memory = ((self.weight_bytes + self.kv_bytes_per_token * context_tokens)
                  / (self.bandwidth * BANDWIDTH_EFFICIENCY))
        compute = 2 * self.params * (decodes + prompt_tokens) / (self.flops * COMPUTE_EFFICIENCY)
        return max(memory, compute) + STEP_OVERHEAD_S

    def prefill_time(self, tokens: int) -> float:
        """Seconds to prefill a prompt of ``tokens`` tokens."""
        compute = 2 * self.params * tokens / (self.flops * COMPUTE_EFFICIENCY)
        memory = self.weight_bytes / (self.bandwidth * BANDWIDTH_EFFICIENCY)
        return max(memory, compute) + STEP_OVERHEAD_S

    def to_dict(self) -> dict:
        return {
            "profile": self.name,
            "memory_bandwidth_bytes_per_s": self.bandwidth,
            "flops": self.flops,
            "modelled_parameters": self.params,
            "decode_step_s_batch1": self.decode_time(1, 0),
            "prefill_s_per_1k_tokens": self.prefill_time(1000),
        }


def get_profile(name: str) -> SimProfile:
    """Parse ``<gpu>-<model>`` (e.g. ``h200-8b``); raise ValueError listing the choices otherwise."""
    gpu, _, model = name.partition("-")
    if gpu not in GPUS or model not in MODELS:
        raise ValueError(
            f"unknown sim profile {name!r}: use <gpu>-<model> with gpu in {', '.join(GPUS)} "
            f"and model in {', '.join(MODELS)} (e.g. h200-8b, t4-1b)"
        )
    bandwidth, flops, memory = GPUS[gpu]
    params, layers, kv_width = MODELS[model]
    if params * BYTES_PER_PARAM > 0.9 * memory:
        raise ValueError(f"sim profile {name!r}: {model} in bf16 does not fit in the memory of one {gpu}")
    return SimProfile(name, bandwidth, flops, params, layers, kv_width)


class SimModel:
    """Wraps a real (tiny) model; pads each step with sleep up to the profile's modelled time."""

    def __init__(self, inner, profile: SimProfile):
        self.inner = inner
        self.spec = inner.spec
        self.profile = profile
        self.device = "cpu"
        self.precision = inner.precision
        self.precision_note = "tokens computed in fp32; step times modelled for bf16"
        self.overrun_s = 0.0
        self.chunked_prefill = True

    def new_cache(self, capacity: int):
        return self.inner.new_cache(capacity)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.inner.kv_bytes_per_token

    def read_kv(self, cache, start: int, stop: int):
        """The tiny model's keys and values: a prefix-cache hit skips their compute, and the modelled time of
        a step counts only the prompt tokens it computes, so a hit is as much shorter as it would be on the GPU."""
        return self.inner.read_kv(cache, start, stop)

    def write_kv(self, cache, start: int, kv) -> None:
        self.inner.write_kv(cache, start, kv)

    def _pad(self, start: float, target: float) -> None:
        elapsed = time.perf_counter() - start
        if elapsed < target:
            time.sleep(target - elapsed)
        else:
            self.overrun_s += elapsed - target

    def prefill(self, tokens, cache):
        start = time.perf_counter()
        logits = self.inner.prefill(tokens, cache)
        self._pad(start, self.profile.prefill_time(len(tokens)))
        return logits

    def decode(self, tokens, caches):
        start = time.perf_counter()
        context = sum(c.length for c in caches)
        logits = self.inner.decode(tokens, caches)
        self._pad(start, self.profile.decode_time(len(tokens), context))
        return logits

    def step(self, segments):
        """One mixed pass (see :meth:`NumpyModel.step`), padded to the profile's modelled time."""
        start = time.perf_counter()
        decodes = [c for t, c in segments if len(t) == 1 and c.length > 0]
        prompt = sum(len(t) for t, c in segments) - len(decodes)
        context = sum(c.length for c in decodes)
        logits = self.inner.step(segments)
        self._pad(start, self.profile.step_time(len(decodes), context, prompt))
        return logits
