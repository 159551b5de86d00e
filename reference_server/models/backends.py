"""Choosing a backend and loading a model onto it.

``resolve_backend`` decides, cheaply and before the server listens, which backend and model preset a
configuration means (``auto`` is torch when importable, else numpy). ``load_model`` does the expensive part:
it reads the weights file from disk and builds the model, and is what a lazy server runs on its first
request.
"""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..config import ServerConfig
from .modelspec import ModelSpec, get_spec
from .sim import SimProfile, get_profile
from .weights import default_cache_dir, ensure_weights_file, read_weights_file, weights_path

TORCH_HINT = "the torch backend needs torch: pip install 'latbench[torch]' (or use --backend numpy)"


@dataclass(frozen=True)
class ResolvedBackend:
    """What will run: ``label`` names it everywhere (header, metric label, log line)."""

    kind: str  # numpy | torch | sim
    label: str  # numpy | torch:cpu | torch:cuda | sim:<profile>
    device: str  # cpu | cuda
    spec: ModelSpec
    cache_dir: Path
    profile: SimProfile | None = None

    def to_dict(self) -> dict:
        out = {"backend": self.label, "device": self.device, "model_spec": self.spec.to_dict()}
        if self.profile is not None:
            out["sim"] = self.profile.to_dict()
        return out


def torch_available() -> bool:
    """Whether torch can be imported (checked without importing it)."""
    return importlib.util.find_spec("torch") is not None


def resolve_backend(config: ServerConfig) -> ResolvedBackend:
    """Resolve ``config.backend`` and ``config.model``; raise ValueError for impossible combinations."""
    cache_dir = Path(config.cache_dir).expanduser() if config.cache_dir else default_cache_dir()
    backend = config.backend
    if backend.startswith("sim:"):
        profile = get_profile(backend[4:])
        if config.model not in (None, "tiny"):
            raise ValueError(f"model: sim backends compute tokens with the tiny model, not {config.model!r}")
        if config.precision != "fp32":
            raise ValueError("precision: sim backends model bf16 step times and compute in fp32; leave it fp32")
        return ResolvedBackend("sim", backend, "cpu", get_spec("tiny"), cache_dir, profile)
    if backend == "auto":
        backend = "numpy"
        if torch_available():
            try:
                import torch  # noqa: F401
                backend = "torch"
            except ImportError:  # a broken torch install: fall back, as when it is absent
                pass
    if backend == "torch":
        if not torch_available():
            raise ValueError(TORCH_HINT)
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device = "cpu"
    spec = get_spec(config.model or ("1b" if device == "cuda" else "small"))
    if spec.gpu_only and device != "cuda":
        raise ValueError(f"model: {spec.name!r} is a GPU preset; it needs the torch backend on CUDA")
    if backend == "torch" and device == "cuda" and config.precision == "int8":
        raise ValueError("precision: int8 (dynamic quantization) is CPU-only in torch; use fp32 or bf16 on CUDA")
    label = backend if backend == "numpy" else f"torch:{device}"
    return ResolvedBackend(backend, label, device, spec, cache_dir)


def load_model(resolved: ResolvedBackend, config: ServerConfig):
    """Read the weights file (creating it once if missing) and build the model. Slow by design."""
    path = ensure_weights_file(resolved.spec, config.weights_seed, resolved.cache_dir)
    weights = read_weights_file(path)
    if resolved.kind == "torch":
        from .torch_model import TorchModel

        return TorchModel(resolved.spec, weights, config.precision, resolved.device, config.threads)
    from .numpy_model import NumpyModel

    model = NumpyModel(resolved.spec, weights, config.precision, config.step_threads)
    if resolved.kind == "sim":
        from .sim import SimModel

        return SimModel(model, resolved.profile)
    return model


def prepare_weights(config: ServerConfig, out: TextIO) -> int:
    """Write the weights file ``config`` would load, if it is missing, without starting a server; print
    ``LATBENCH_WEIGHTS={"path", "bytes", "generated_s"}`` (``generated_s`` null when it already existed).

    latbench runs this before the fresh starts of a cold-start study, so generating the weights is no part
    of any start, and it learns which file to drop from the page cache before each start.
    """
    resolved = resolve_backend(config)
    path = weights_path(resolved.spec, config.weights_seed, resolved.cache_dir)
    t0 = time.perf_counter()
    generated = not path.exists()
    ensure_weights_file(resolved.spec, config.weights_seed, resolved.cache_dir)
    info = {"path": str(path), "bytes": path.stat().st_size,
            "generated_s": time.perf_counter() - t0 if generated else None}
    out.write(f"LATBENCH_WEIGHTS={json.dumps(info)}\n")
    out.flush()
    return 0
