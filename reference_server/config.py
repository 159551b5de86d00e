"""ServerConfig: every architecture knob of the reference server, and the named presets.

Times are seconds inside the program (``max_queue_delay_s``, ``slow_s``, ``stall_s``...); the command line
takes milliseconds where the flag name says so (``--max-queue-delay-ms``) and converts at the edge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

ARCHS = ("naive", "optimized", "batching", "cache")
PRECISIONS = ("fp32", "bf16", "int8")


@dataclass
class ServerConfig:
    """The fully specified configuration of one server. Build it with :meth:`from_preset`."""

    arch: str = "naive"
    host: str = "127.0.0.1"
    port: int = 0
    grpc_port: int | None = None  # KServe v2 over gRPC on this port (0: a free one); None: no gRPC
    model: str | None = None  # None: small on CPU, 1b on CUDA, tiny for sim backends
    backend: str = "auto"  # auto | numpy | torch | sim:<profile>
    cache_dir: str | None = None  # None: $LATBENCH_CACHE_DIR or ~/.cache/latbench/weights
    served_model_name: str | None = None  # None: the model preset name
    weights_seed: int = 0
    tokenizer: str | None = None  # count usage with this tokenizer.json / model folder (None: bytes); counting only
    # architecture knobs
    preload: bool = False  # load the model at start (else the first request pays the load)
    warmup: bool = False  # run passes at each batch-size bucket before /health says ready
    max_batch_size: int = 1  # 1 = one request at a time
    max_queue_delay_s: float = 0.0  # Triton-style: wait at most this for the oldest request when idle
    max_step_tokens: int = 256  # tokens per forward pass (decodes + prompt chunks); bounds the inter-token gap
    cache_size: int = 0  # LRU result cache entries; 0 = off
    prefix_cache: bool = False  # keep prompt blocks' keys and values for later prompts (vLLM's prefix caching)
    prefix_cache_blocks: int = 0  # prefix cache capacity in blocks of 16 tokens; 0 = what 256 MiB of KV hold
    image_patch_size: int = 16  # pixels of a side of one image patch (the vision encoder's unit of work)
    image_merge: int = 2  # merge x merge patches become one prompt token (Qwen2-VL's spatial merge)
    image_encoder_layers: int = 4  # MLP blocks of the vision encoder (its work per patch)
    image_cache_size: int = 0  # images (and audio clips) whose encoder tokens are kept, by content hash; 0 = off
    audio_tokens_per_s: int = 25  # prompt tokens a second of audio (an audio clip's encoder frames)
    precision: str = "fp32"
    threads: int = 1  # torch's CPU intra-op threads (BLAS itself always runs one thread)
    step_threads: int = 1  # numpy backend: threads that split each forward pass by sequence
    # queue policy
    max_queue_size: int = 512  # waiting (not yet running) requests; beyond -> 429
    request_timeout_s: float = 600.0  # whole-request deadline; 0 = none
    # request limits
    default_max_tokens: int = 64
    max_body_bytes: int = 1 << 20
    # fault injection
    error_rate: float = 0.0  # fraction of requests answered 500
    slow_rate: float = 0.0  # fraction of requests delayed by slow_s before processing
    slow_s: float = 0.0
    cut_stream_rate: float = 0.0  # fraction of streams closed mid-way
    stall_s: float = 0.0  # all processing pauses for stall_s ...
    stall_every_s: float = 0.0  # ... every stall_every_s (0 = never)
    seed: int = 0  # seeds fault draws and sampling without a request seed
    extra: dict = field(default_factory=dict)  # free-form notes carried into the resolved config

    @classmethod
    def from_preset(cls, arch: str = "naive", **overrides) -> "ServerConfig":
        """The preset ``arch`` with ``overrides`` applied (field names; ``*_ms`` aliases convert).

        Presets: ``naive`` (lazy load, no warm-up, one request at a time, no cache), ``optimized``
        (preload, warm-up, continuous batching up to 32 with chunked prefill, each step split over 2
        compute threads on numpy, LRU result cache, prefix cache, image cache), ``batching`` (batching only: preloaded,
        no warm-up, no cache) and ``cache`` (result cache only, otherwise naive).
        """
        if arch not in ARCHS:
            raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
        base: dict = {"arch": arch}
        if arch in ("optimized", "batching"):
            base.update(preload=True, max_batch_size=32, max_queue_delay_s=0.002, step_threads=2)
        if arch == "optimized":
            base.update(warmup=True, cache_size=1024, prefix_cache=True, image_cache_size=256)
        if arch == "cache":
            base.update(cache_size=1024)
        names = {f.name for f in dataclasses.fields(cls)}
        for key, value in overrides.items():
            if key not in names and key.endswith("_ms") and key[:-3] + "_s" in names:
                key, value = key[:-3] + "_s", (None if value is None else value / 1000.0)
            if key not in names:
                raise ValueError(f"unknown server setting {key!r}; valid: {', '.join(sorted(names))}")
            base[key] = value
        config = cls(**base)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ValueError naming the first invalid setting."""
        if self.arch not in ARCHS:
            raise ValueError(f"arch: {self.arch!r} is not one of {', '.join(ARCHS)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if not (self.backend in ("auto", "numpy", "torch") or self.backend.startswith("sim:")):
            raise ValueError(f"backend: {self.backend!r} is not auto, numpy, torch or sim:<profile>")
        for name in ("max_batch_size", "max_queue_size", "default_max_tokens", "max_body_bytes", "threads",
                     "max_step_tokens", "step_threads", "image_patch_size", "image_merge", "audio_tokens_per_s"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")
        for name in ("max_queue_delay_s", "request_timeout_s", "slow_s", "stall_s", "stall_every_s"):
            if float(getattr(self, name)) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        for name in ("error_rate", "slow_rate", "cut_stream_rate"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"{name}: must be within [0, 1], got {getattr(self, name)!r}")
        if self.prefix_cache_blocks < 0:
            raise ValueError(f"prefix_cache_blocks: must be >= 0, got {self.prefix_cache_blocks!r}")
        if self.image_cache_size < 0 or self.image_encoder_layers < 0:
            raise ValueError("image_cache_size and image_encoder_layers: must be >= 0")
        if self.cache_size < 0:
            raise ValueError(f"cache_size: must be >= 0, got {self.cache_size!r}")
        if self.grpc_port is not None and not 0 <= int(self.grpc_port) <= 65535:
            raise ValueError(f"grpc_port: must be within [0, 65535], got {self.grpc_port!r}")
        if not 0 <= int(self.port) <= 65535:
            raise ValueError(f"port: must be within [0, 65535], got {self.port!r}")

    def to_dict(self) -> dict:
        """All knobs as a JSON-ready dict."""
        return dataclasses.asdict(self)
