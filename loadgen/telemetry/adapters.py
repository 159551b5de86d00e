"""Which samples of an engine's ``/metrics`` give each server-side quantity, per engine: one adapter each.

A quantity (``server.queue_waiting``, ``gpu.utilization``..., declared in :mod:`loadgen.metric_registry`) is read
the first way its adapter lists whose samples were scraped. A :class:`Way` is one of:

- ``gauge``: the value at each scrape, summed over label sets (``agg="sum"``: requests of several engines) or
  averaged (``agg="mean"``: a usage fraction per engine), times ``scale``; per phase its mean and max;
- ``histogram``: a Prometheus histogram (``base``\\ ``_sum`` / ``_count`` / ``_bucket``); per phase the mean
  (delta sum / delta count) and the p50 / p99 interpolated within the buckets, as PromQL's
  ``histogram_quantile`` does; ``scale`` turns its unit into seconds;
- ``counter``: a cumulative count; per phase its rate per second;
- ``share``: delta of ``names[0]`` / delta of ``names[1]`` over the phase, times ``scale``, plus ``offset`` (prefix
  cache hits / queries; 1 + accepted / drafts is speculative decoding's acceptance length);
- ``ratio``: delta hits / (delta hits + delta misses) (a result cache's hit rate);
- ``gshare``: a gauge over a sum of gauges at each scrape (GPU memory used / (used + free)).

Names are the samples' names as latbench stores them: Prometheus's text parser names every counter's sample
``<family>_total``, also where the engine exposes it without the suffix (Triton, TGI). Each engine's names are
those of its source, named on each adapter; ``tests/data/*_metrics.txt`` hold a text of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

WayKind = Literal["gauge", "histogram", "counter", "share", "ratio", "gshare"]
MIB = float(1 << 20)


@dataclass(frozen=True)
class Way:
    """One way to read a quantity from samples (see the module docstring); ``den``: gshare's denominator names."""

    kind: WayKind
    names: tuple[str, ...]
    scale: float = 1.0
    offset: float = 0.0
    agg: Literal["sum", "mean"] = "sum"
    den: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """The source named beside every figure: the metric name, or ``a / b`` for a share or ratio."""
        if self.kind == "ratio":
            return f"{self.names[0]} / ({self.names[0]} + {self.names[1]})"
        if self.kind == "gshare":
            return f"{self.names[0]} / ({' + '.join(self.den)})"
        return (" + " if self.kind == "gauge" else " / ").join(self.names)

    def needs(self) -> tuple[str, ...]:
        """Sample names that must have been scraped for this way to be read."""
        if self.kind == "histogram":
            return (self.names[0] + "_sum", self.names[0] + "_count")
        return self.names + self.den


def gauge(name: str, scale: float = 1.0, agg: Literal["sum", "mean"] = "sum") -> Way:
    return Way("gauge", (name,), scale, agg=agg)


def hist(base: str, scale: float = 1.0) -> Way:
    return Way("histogram", (base,), scale)


def counter(name: str, scale: float = 1.0) -> Way:
    return Way("counter", (name,), scale)


def share(num: str, den: str, scale: float = 1.0, offset: float = 0.0) -> Way:
    return Way("share", (num, den), scale, offset)


def ratio(hits: str, misses: str) -> Way:
    return Way("ratio", (hits, misses))


def gshare(num: str, den: tuple[str, ...]) -> Way:
    return Way("gshare", (num,), den=den)


@dataclass(frozen=True)
class Adapter:
    """An engine's (or a GPU source's) names: ``prefixes`` recognise its /metrics; ``ways``: quantity -> ways, the
    first one scraped wins; ``source``: where its names were read (version and file)."""

    engine: str
    label: str
    prefixes: tuple[str, ...]
    ways: dict[str, tuple[Way, ...]] = field(default_factory=dict)
    source: str = ""


VLLM = Adapter("vllm", "vLLM", ("vllm:",), {
    "server.requests_running": (gauge("vllm:num_requests_running"),),
    "server.queue_waiting": (gauge("vllm:num_requests_waiting"),),
    "server.kv_cache_usage": (gauge("vllm:kv_cache_usage_perc", agg="mean"),
                              gauge("vllm:gpu_cache_usage_perc", agg="mean")),  # before the v1 engine
    "server.prefix_cache_hit_rate": (share("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
                                     share("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
                                     gauge("vllm:gpu_prefix_cache_hit_rate", agg="mean")),
    "server.preemptions": (counter("vllm:num_preemptions_total"),),
    "server.batch_size": (gauge("vllm:num_requests_running"),),  # continuous batching: the running requests
    "server.spec_acceptance_rate": (share("vllm:spec_decode_num_accepted_tokens_total",
                                          "vllm:spec_decode_num_draft_tokens_total"),
                                    gauge("vllm:spec_decode_draft_acceptance_rate", agg="mean")),
    "server.spec_acceptance_length": (share("vllm:spec_decode_num_accepted_tokens_total",
                                            "vllm:spec_decode_num_drafts_total", offset=1.0),),
    "server.ttft": (hist("vllm:time_to_first_token_seconds"),),
    "server.itl": (hist("vllm:inter_token_latency_seconds"), hist("vllm:time_per_output_token_seconds")),
    "server.e2e": (hist("vllm:e2e_request_latency_seconds"),),
    "server.queue_time": (hist("vllm:request_queue_time_seconds"),),
}, "vLLM 0.32 (v1 engine: vllm/v1/metrics/loggers.py; the v0 names too); tests/data/vllm_metrics.txt is a capture")

SGLANG = Adapter("sglang", "SGLang", ("sglang:",), {
    "server.requests_running": (gauge("sglang:num_running_reqs"),),
    "server.queue_waiting": (gauge("sglang:num_queue_reqs"),),
    "server.kv_cache_usage": (gauge("sglang:token_usage", agg="mean"),),
    "server.prefix_cache_hit_rate": (gauge("sglang:cache_hit_rate", agg="mean"),),
    "server.preemptions": (counter("sglang:num_retracted_requests_total"),),
    "server.batch_size": (gauge("sglang:num_running_reqs"),),
    "server.spec_acceptance_rate": (gauge("sglang:spec_accept_rate", agg="mean"),),
    "server.spec_acceptance_length": (gauge("sglang:spec_accept_length", agg="mean"),),
    "server.ttft": (hist("sglang:time_to_first_token_seconds"),),
    "server.itl": (hist("sglang:inter_token_latency_seconds"), hist("sglang:time_per_output_token_seconds")),
    "server.e2e": (hist("sglang:e2e_request_latency_seconds"),),
    "server.queue_time": (hist("sglang:queue_time_seconds"),),
}, "SGLang (python/sglang/srt/metrics/collector.py, SchedulerMetricsCollector and TokenizerMetricsCollector)")

TGI = Adapter("tgi", "TGI", ("tgi_",), {
    "server.requests_running": (gauge("tgi_batch_current_size"),),
    "server.queue_waiting": (gauge("tgi_queue_size"),),
    "server.batch_size": (hist("tgi_batch_next_size"), gauge("tgi_batch_current_size")),
    "server.itl": (hist("tgi_request_mean_time_per_token_duration"),),
    "server.e2e": (hist("tgi_request_duration"),),
    "server.queue_time": (hist("tgi_request_queue_duration"),),
}, "Text Generation Inference 3.x (docs/source/reference/metrics.md; router/src/server.rs, infer/, queue.rs)")

TRITON = Adapter("triton", "Triton/KServe", ("nv_inference_",), {
    "server.queue_waiting": (gauge("nv_inference_pending_request_count"),),
    "server.batch_size": (share("nv_inference_count_total", "nv_inference_exec_count_total"),),
    # cumulative microseconds over successful requests: a mean per request (cached requests included)
    "server.e2e": (share("nv_inference_request_duration_us_total", "nv_inference_request_success_total", 1e-6),),
    "server.queue_time": (share("nv_inference_queue_duration_us_total", "nv_inference_request_success_total", 1e-6),),
    "server.ttft": (hist("nv_inference_first_response_histogram_ms", scale=1e-3),),
    "server.result_cache_hit_rate": (ratio("nv_cache_num_hits_per_model_total",
                                           "nv_cache_num_misses_per_model_total"),),
    "gpu.utilization": (gauge("nv_gpu_utilization", agg="mean"),),
    "gpu.memory_used": (gauge("nv_gpu_memory_used_bytes"),),
    "gpu.memory_total": (gauge("nv_gpu_memory_total_bytes"),),
    "gpu.memory_share": (gshare("nv_gpu_memory_used_bytes", ("nv_gpu_memory_total_bytes",)),),
    "gpu.power": (gauge("nv_gpu_power_usage"),),
}, "Triton Inference Server 2.x (docs/user_guide/metrics.md); KServe's Triton runtime serves the same")

REFSERVER = Adapter("refserver", "the reference server", ("refserver:",), {
    "server.requests_running": (gauge("refserver:num_requests_running"),),
    "server.queue_waiting": (gauge("refserver:num_requests_waiting"),),
    "server.prefix_cache_hit_rate": (share("refserver:prefix_cache_hits_total",
                                           "refserver:prefix_cache_queries_total"),),
    "server.result_cache_hit_rate": (ratio("refserver:cache_hits_total", "refserver:cache_misses_total"),),
    "server.batch_size": (hist("refserver:batch_size"),),
    "server.ttft": (hist("refserver:time_to_first_token_seconds"),),
    "server.itl": (hist("refserver:inter_token_latency_seconds"),),
    "server.e2e": (hist("refserver:e2e_request_latency_seconds"),),
    "server.queue_time": (hist("refserver:request_queue_time_seconds"),),
    "gpu.utilization": (gauge("refserver:gpu_utilization_percent", 0.01, agg="mean"),),
    "gpu.memory_used": (gauge("refserver:gpu_memory_used_bytes"),),
}, "latbench's reference_server/serving/metrics.py")

DCGM = Adapter("dcgm", "DCGM exporter", ("DCGM_FI_",), {
    "gpu.utilization": (gauge("DCGM_FI_DEV_GPU_UTIL", 0.01, agg="mean"),),
    "gpu.memory_used": (gauge("DCGM_FI_DEV_FB_USED", MIB),),
    "gpu.memory_total": (Way("gauge", ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"), MIB),),
    "gpu.memory_share": (gshare("DCGM_FI_DEV_FB_USED", ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")),),
    "gpu.power": (gauge("DCGM_FI_DEV_POWER_USAGE"),),
    "gpu.sm_clock": (gauge("DCGM_FI_DEV_SM_CLOCK", agg="mean"),),
}, "dcgm-exporter (etc/default-counters.csv): framebuffer in MiB, power in W, clocks in MHz")

NVML = Adapter("nvml", "NVML", ("nvml:",), {
    "gpu.utilization": (gauge("nvml:gpu_utilization_percent", 0.01, agg="mean"),),
    "gpu.memory_used": (gauge("nvml:memory_used_bytes"),),
    "gpu.memory_total": (gauge("nvml:memory_total_bytes"),),
    "gpu.memory_share": (gshare("nvml:memory_used_bytes", ("nvml:memory_total_bytes",)),),
    "gpu.power": (gauge("nvml:power_watts"),),
    "gpu.sm_clock": (gauge("nvml:sm_clock_mhz", agg="mean"),),
}, "latbench's NVML sampler (nvidia-ml-py on the latbench host), loadgen/engine/gpu.py")

ENGINES = (VLLM, SGLANG, TGI, TRITON, REFSERVER)
GPU_SOURCES = (DCGM, NVML)
BY_NAME = {a.engine: a for a in ENGINES + GPU_SOURCES}
#: How a name given in ``target.telemetry.names`` is read, by quantity: a histogram's base name, a counter, or a
#: gauge (a share or ratio quantity overridden by one gauge of the same meaning, 0-1).
OVERRIDE_KIND: dict[str, WayKind] = {"server.ttft": "histogram", "server.itl": "histogram",
                                     "server.e2e": "histogram", "server.queue_time": "histogram",
                                     "server.preemptions": "counter"}


def detect(names: set[str], adapters: tuple[Adapter, ...] = ENGINES) -> Adapter | None:
    """The adapter whose names ``/metrics`` exposes most (``names``: every sample name scraped), or None."""
    best, hits = None, 0
    for a in adapters:
        n = sum(1 for name in names if name.startswith(a.prefixes))
        if n > hits:
            best, hits = a, n
    return best


def with_overrides(adapter: Adapter | None, names: dict[str, str]) -> Adapter | None:
    """``adapter`` with the scenario's per-quantity names first (``target.telemetry.names``)."""
    if not names:
        return adapter
    base = adapter or Adapter("custom", "custom names", ())
    ways = dict(base.ways)
    for q, name in names.items():
        kind = OVERRIDE_KIND.get(q, "gauge")
        ways[q] = (Way(kind, (name,), agg="mean" if q.endswith(("usage", "rate", "utilization")) else "sum"),)
        ways[q] += base.ways.get(q, ())
    return Adapter(base.engine, base.label, base.prefixes, ways, base.source)


def pick(adapter: Adapter, quantity: str, names: set[str]) -> Way | None:
    """The first way of ``quantity`` whose samples were scraped."""
    for way in adapter.ways.get(quantity, ()):
        if all(n in names for n in way.needs()):
            return way
    return None
