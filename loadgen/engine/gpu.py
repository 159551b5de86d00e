"""Sample the latbench host's NVIDIA GPUs with NVML during a run, into ``<target>/gpu_metrics.csv``.

NVML comes from nvidia-ml-py (the ``gpu`` extra: ``pip install latbench[gpu]``), imported when a sampler starts,
never at import. Each sample reads, per device (label ``gpu="<index>"``): utilization (percent of the last
sample period in which a kernel ran), memory used and total (bytes), power draw (watts; NVML reports milliwatts)
and the SM clock (MHz), stored as raw samples named ``nvml:gpu_utilization_percent``, ``nvml:memory_used_bytes``,
``nvml:memory_total_bytes``, ``nvml:power_watts`` and ``nvml:sm_clock_mhz`` in the scraper's format (time, metric,
labels, value; :mod:`loadgen.engine.scrape`), so that NVML and a DCGM exporter are read by one path
(:mod:`loadgen.telemetry.adapters` ``NVML`` / ``DCGM``).

Without the library, a driver, or a device, nothing is sampled and :attr:`GpuSampler.note` says why; a read that
fails mid-run (a device lost) is skipped, and a sampler that fails entirely stops without ending the run.
"""

from __future__ import annotations

import csv
import importlib
import time
from pathlib import Path

from loadgen.engine.host import Periodic
from loadgen.engine.scrape import HEADER, canonical_labels

INTERVAL = 1.0  # seconds between samples, as the /metrics scraper
HINT = "pip install 'latbench[gpu]' (nvidia-ml-py)"


def load_nvml():
    """The ``pynvml`` module (nvidia-ml-py), or None when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class GpuSampler(Periodic):
    """A thread reading every device's NVML counters every ``interval`` seconds, into memory.

    ``start()`` initialises NVML and takes the first sample (``note`` says why not, when it cannot); ``stop()``
    takes a last one and shuts NVML down; ``write(path, t0)`` writes the samples with times since ``t0``
    (perf_counter)."""

    what = "GPU"

    def __init__(self, interval: float = INTERVAL):
        self.interval = interval
        self.rows: list[tuple[float, str, str, float]] = []  # (perf_counter, name, labels, value)
        self.note: str | None = None
        self.devices = 0
        self._nvml = None
        self._handles: list = []

    def start(self) -> "GpuSampler":
        nvml = load_nvml()
        if nvml is None:
            self.note = f"GPU not sampled: NVML is not installed ({HINT})"
            return self
        try:
            nvml.nvmlInit()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception as exc:  # no driver, no device: the run goes on without GPU figures
            self.note = f"GPU not sampled: NVML did not start ({type(exc).__name__}: {exc})"
            return self
        self._nvml, self.devices = nvml, len(self._handles)
        if not self._handles:
            self.note = "GPU not sampled: NVML sees no device"
            self._shutdown()
            return self
        self._start_thread("latbench-gpu")
        return self

    def stop(self) -> None:
        super().stop()
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def sample(self) -> None:
        """One reading of every device, appended to :attr:`rows` (a device whose read fails is skipped)."""
        nvml, t = self._nvml, time.perf_counter()
        if nvml is None:
            return
        for i, h in enumerate(self._handles):
            labels = canonical_labels({"gpu": str(i)})
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                power = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0  # milliwatts
                clock = nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)
            except Exception:
                continue
            self.rows += [(t, "nvml:gpu_utilization_percent", labels, float(util)),
                          (t, "nvml:memory_used_bytes", labels, float(mem.used)),
                          (t, "nvml:memory_total_bytes", labels, float(mem.total)),
                          (t, "nvml:power_watts", labels, float(power)),
                          (t, "nvml:sm_clock_mhz", labels, float(clock))]

    def write(self, path: Path, t0: float) -> Path | None:
        """The samples as gpu_metrics.csv (the scraper's columns), times since ``t0``; None when none were taken."""
        if not self.rows or not t0:
            return None
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(HEADER)
            w.writerows((f"{t - t0:.4f}", name, labels, repr(v)) for t, name, labels, v in self.rows)
        return Path(path)
