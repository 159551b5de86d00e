"""The weights file: random weights from a fixed seed, written once, read from disk at every load.

Loading therefore costs real disk reads and deserialization, like a production model load, while needing
no download. The file is an uncompressed ``.npz``; bfloat16 tensors (GPU presets) are stored as their raw
uint16 bits because numpy has no bfloat16.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .modelspec import ModelSpec

FORMAT_VERSION = 2
ENV_CACHE_DIR = "LATBENCH_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$LATBENCH_CACHE_DIR`` when set, else ``~/.cache/latbench/weights``."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/latbench/weights").expanduser()


def weights_path(spec: ModelSpec, seed: int, cache_dir: Path) -> Path:
    """Where the weights of ``spec`` drawn from ``seed`` live inside ``cache_dir``."""
    return Path(cache_dir) / f"{spec.name}-seed{seed}-v{FORMAT_VERSION}.npz"


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (round to nearest even) and return the 16-bit patterns as uint16."""
    bits = x.astype(np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Inverse of the storage format: uint16 bfloat16 patterns to float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16, returned as float32 (bf16 emulation)."""
    return bf16_bits_to_float32(_to_bf16_bits(x))


def generate_weights(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Draw every tensor of ``spec`` from ``seed``: same seed, same weights, on every machine."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    resid_scale = 1.0 / np.sqrt(2.0 * spec.n_layers)
    for name, shape in spec.tensor_shapes().items():
        if len(shape) == 1:  # norm gains around 1
            w = 1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32)
        elif name == "embed":
            w = rng.standard_normal(shape, dtype=np.float32)
        else:
            std = 1.0 / np.sqrt(shape[0])
            if name == "lm_head":
                std *= 2.0  # logits with a standard deviation of about 2: varied, not uniform, output
            if name.endswith((".wo", ".w2")):
                std *= resid_scale
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        out[name] = _to_bf16_bits(w) if spec.weight_dtype == "bfloat16" else w.astype(np.float32)
    return out


def ensure_weights_file(spec: ModelSpec, seed: int, cache_dir: Path) -> Path:
    """Create the weights file if it does not exist yet (atomically) and return its path."""
    path = weights_path(spec, seed, cache_dir)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **generate_weights(spec, seed))
    os.replace(tmp, path)
    return path


def read_weights_file(path: Path) -> dict[str, np.ndarray]:
    """Read every tensor from ``path`` into memory (real disk + deserialization)."""
    with np.load(path, allow_pickle=False) as data:
        return {name: np.array(data[name]) for name in data.files}
