"""Model presets: the shapes of the decoder-only transformers the server can run.

Parameter counts are exact functions of the shape (see :meth:`ModelSpec.parameter_count`), so the resolved
configuration can report them without loading any weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

VOCAB_SIZE = 256  # byte-level tokenizer: one token per byte


@dataclass(frozen=True)
class ModelSpec:
    """Shape of one preset. ``gpu_only`` presets are accepted by the torch backend on CUDA only."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    max_model_len: int  # prompt + generated tokens, per sequence
    weight_dtype: str = "float32"  # how the weights file stores them: float32 or bfloat16
    gpu_only: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight tensor by name, in file order."""
        d, f = self.d_model, self.d_ff
        shapes: dict[str, tuple[int, ...]] = {"embed": (VOCAB_SIZE, d)}
        for i in range(self.n_layers):
            shapes[f"l{i}.norm1"] = (d,)
            shapes[f"l{i}.wqkv"] = (d, 3 * d)
            shapes[f"l{i}.wo"] = (d, d)
            shapes[f"l{i}.norm2"] = (d,)
            shapes[f"l{i}.w1"] = (d, f)
            shapes[f"l{i}.w2"] = (f, d)
        shapes["norm_f"] = (d,)
        shapes["lm_head"] = (d, VOCAB_SIZE)
        return shapes

    def parameter_count(self) -> int:
        """Number of parameters."""
        total = 0
        for shape in self.tensor_shapes().values():
            n = 1
            for s in shape:
                n *= s
            total += n
        return total

    def weight_bytes(self) -> int:
        """Bytes of weights as stored (4 per parameter for float32, 2 for bfloat16)."""
        return self.parameter_count() * (2 if self.weight_dtype == "bfloat16" else 4)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["parameter_count"] = self.parameter_count()
        return out


MODEL_PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("tiny", d_model=256, n_layers=6, n_heads=4, max_model_len=2048),  # ~4.8M
        ModelSpec("small", d_model=512, n_layers=7, n_heads=8, max_model_len=2048),  # ~22M
        ModelSpec("medium", d_model=768, n_layers=13, n_heads=12, max_model_len=2048),  # ~92M
        # ~126M parameters, 506 MB of float32 weights: the article's "500 MB model" whose load added ~2 s
        ModelSpec("large", d_model=1024, n_layers=10, n_heads=16, max_model_len=2048),
        ModelSpec("1b", 2048, 20, 16, 4096, weight_dtype="bfloat16", gpu_only=True),  # ~1.0B
        ModelSpec("3b", 3072, 26, 24, 4096, weight_dtype="bfloat16", gpu_only=True),  # ~2.9B
    )
}


def get_spec(name: str) -> ModelSpec:
    """Return the preset called ``name``; raise ValueError listing the valid names otherwise."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_PRESETS)}") from None
