"""Prometheus metrics of one server, named after vLLM's (``vllm:`` becomes ``refserver:``).

Each server owns its own registry (nothing global), and every metric carries ``backend="<label>"`` so a
simulated figure is never taken for a measured one. Latency buckets start at 0.5 ms with 0.5-1 ms steps up
to 10 ms, fine enough to tell 1 ms inter-token gaps apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

FINE_BUCKETS = (
    0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01,
    0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0,
)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)


@dataclass(frozen=True)
class PrefixCacheMetrics:
    """The prefix cache's metrics (:meth:`Metrics.add_prefix_cache`), bound to the backend label."""

    queries: object  # Counter: prompt tokens looked up
    hits: object  # Counter: of those, tokens found cached (not prefilled)
    blocks: object  # Gauge: blocks held
    evictions: object  # Counter: blocks evicted (least recently used first)
    hit_rate: object  # Gauge: hits / queries since start


class Metrics:
    """The server's metrics; children are pre-bound to the backend label."""

    def __init__(self, backend: str):
        self.backend = backend
        self.registry = CollectorRegistry(auto_describe=True)
        r, lb = self.registry, ["backend"]

        def hist(name, doc, buckets=FINE_BUCKETS, labels=()):
            return Histogram(f"refserver:{name}", doc, lb + list(labels), registry=r, buckets=buckets)

        def bound(metric):
            return metric.labels(backend=backend)

        self.running = bound(Gauge("refserver:num_requests_running", "Requests in the decode batch.", lb, registry=r))
        self.waiting = bound(Gauge("refserver:num_requests_waiting", "Requests queued, not yet running.", lb,
                                   registry=r))
        self.queue_time = bound(hist("request_queue_time_seconds", "Arrival to start of prefill."))
        self.ttft = bound(hist("time_to_first_token_seconds", "Arrival to first generated token."))
        self.itl = bound(hist("inter_token_latency_seconds", "Gap between consecutive tokens of a request."))
        self.e2e = bound(hist("e2e_request_latency_seconds", "Arrival to last byte of a successful request."))
        self.batch_size = bound(hist("batch_size", "Sequences in each decode step.", BATCH_BUCKETS))
        self._step = hist("step_duration_seconds", "Model time of one step (phase: prefill only, decode only, "
                          "or mixed: decodes and prompt chunks in one pass).", labels=["phase"])
        self._steps = {ph: self._step.labels(backend=backend, phase=ph) for ph in ("prefill", "decode", "mixed")}
        self.prefill_step, self.decode_step = self._steps["prefill"], self._steps["decode"]
        self.cache_hits = bound(Counter("refserver:cache_hits", "Result cache hits.", lb, registry=r))
        self.cache_misses = bound(Counter("refserver:cache_misses", "Result cache misses.", lb, registry=r))
        self.prompt_tokens = bound(Counter("refserver:prompt_tokens", "Prompt tokens prefilled.", lb, registry=r))
        self.generation_tokens = bound(Counter("refserver:generation_tokens", "Tokens generated.", lb, registry=r))
        self._requests = Counter("refserver:requests", "Finished HTTP API requests by status.", lb + ["status"],
                                 registry=r)
        self.model_load = bound(Gauge("refserver:model_load_seconds", "Seconds the last model load took.", lb,
                                      registry=r))
        self.warmup = bound(Gauge("refserver:warmup_seconds", "Seconds the warm-up took.", lb, registry=r))
        self.faults = Counter("refserver:injected_faults", "Faults injected, by kind.", lb + ["kind"], registry=r)
        self.sim_overrun = bound(Counter("refserver:sim_overrun_seconds",
                                         "Sim steps' compute beyond the modelled time.", lb, registry=r))
        self.images = bound(Counter("refserver:images", "Images received in prompts.", lb, registry=r))
        self.image_cache_hits = bound(Counter("refserver:image_cache_hits",
                                              "Images whose encoder tokens the image cache held.", lb, registry=r))
        self.image_encoder = bound(hist("image_encoder_seconds",
                                        "Decode and vision-encoder time of one request's images (cache misses)."))

    def add_prefix_cache(self, capacity_blocks: int) -> PrefixCacheMetrics:
        """Register the prefix cache's metrics (only a server with one exports them), named as vLLM's:
        ``prefix_cache_queries`` and ``prefix_cache_hits`` count tokens; ``prefix_cache_hit_rate`` is their
        ratio over the server's life (vLLM's older ``gpu_prefix_cache_hit_rate``)."""
        r, lb, b = self.registry, ["backend"], self.backend
        out = PrefixCacheMetrics(
            Counter("refserver:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", lb,
                    registry=r).labels(backend=b),
            Counter("refserver:prefix_cache_hits", "Prompt tokens found in the prefix cache (not prefilled).", lb,
                    registry=r).labels(backend=b),
            Gauge("refserver:prefix_cache_blocks", "Blocks held by the prefix cache.", lb, registry=r).labels(
                backend=b),
            Counter("refserver:prefix_cache_evictions", "Prefix cache blocks evicted (least recently used).", lb,
                    registry=r).labels(backend=b),
            Gauge("refserver:prefix_cache_hit_rate", "Prefix cache hits / queries (tokens, 0-1), since start.", lb,
                  registry=r).labels(backend=b))
        Gauge("refserver:prefix_cache_capacity_blocks", "Blocks the prefix cache may hold.", lb,
              registry=r).labels(backend=b).set(capacity_blocks)
        return out

    def step(self, phase: str):
        """The step-duration histogram child of ``phase`` (prefill, decode or mixed)."""
        return self._steps[phase]

    def request_done(self, status: int) -> None:
        """Count one finished API request with HTTP ``status``."""
        self._requests.labels(backend=self.backend, status=str(status)).inc()

    def fault(self, kind: str) -> None:
        self.faults.labels(backend=self.backend, kind=kind).inc()

    def add_gpu_collector(self) -> None:
        """Export GPU utilization and memory through nvidia-ml-py, when it is installed and sees a GPU."""
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no nvidia-ml-py or no GPU: nothing to export
            return
        backend = self.backend

        class _Gpu:
            def collect(self):
                util = GaugeMetricFamily("refserver:gpu_utilization_percent", "GPU utilization.", labels=["backend"])
                mem = GaugeMetricFamily("refserver:gpu_memory_used_bytes", "GPU memory used.", labels=["backend"])
                util.add_metric([backend], pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                mem.add_metric([backend], pynvml.nvmlDeviceGetMemoryInfo(handle).used)
                return [util, mem]

        self.registry.register(_Gpu())

    def render(self) -> bytes:
        """Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
