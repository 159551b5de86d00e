"""``target.telemetry``: which engine's names a target's /metrics is read with, per-quantity overrides, and
whether the latbench host's GPUs are sampled (NVML). Validated like the rest of the scenario: a wrong engine, an
unknown quantity or a blank name is an error with its file, line and field."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from loadgen import metric_registry
from loadgen.scenario.strict import Strict
from loadgen.telemetry.adapters import ENGINES

ENGINE_NAMES = ("auto",) + tuple(a.engine for a in ENGINES)


class Telemetry(Strict):
    """How the target's own telemetry is read (summary.json's ``telemetry``, the report's server panels)."""

    engine: Literal["auto", "vllm", "sglang", "tgi", "triton", "refserver"] = Field(
        "auto", description="whose metric names /metrics holds; auto: the engine whose names it exposes most")
    names: dict[str, str] = Field(
        default_factory=dict, examples=[{"server.queue_waiting": "my_engine_queue_depth"}],
        description="per quantity (server.queue_waiting, server.ttft, ...), the sample name to read it from: a "
                    "gauge, a histogram's base name for server.ttft/itl/e2e/queue_time, a counter for "
                    "server.preemptions; tried before the engine's own")
    nvml: bool = Field(True, description="sample the latbench host's NVIDIA GPUs with NVML (nvidia-ml-py, the 'gpu' "
                                         "extra) when there are any and no gpu_metrics_url is set")

    @field_validator("names")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        known = [m.name for m in metric_registry.telemetry_quantities() if m.name != "gpu.energy_per_token"]
        for q, name in v.items():
            if q not in known:
                raise ValueError(f"unknown quantity {q!r}; expected one of {', '.join(known)}")
            if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
                raise ValueError(f"{q}: expected a metric name without spaces, got {name!r}")
        return v
