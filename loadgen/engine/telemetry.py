"""Sample a target's own telemetry around one engine run, whatever the engine: its ``/metrics`` (into
``server_metrics.csv``), a DCGM exporter's for its GPUs (``gpu_metrics.csv``), or this host's GPUs through NVML.

The scrapers (:class:`~loadgen.engine.scrape.MetricsScraper`) run on an event loop in a thread of their own, so
that the one-process engine, the multi-process one, Locust's master in its own process, every capacity step and
a watch are sampled the same way and none of them carries the sampling in its loop. The engine fixes its t0 only
once it runs (Locust's master says it at the end): until then scrapes are timed from this sampler's start, on the
same ``time.perf_counter`` clock (CLOCK_MONOTONIC on Linux, one clock for every process of the host), and
:meth:`TelemetrySampler.write` moves them onto the run's t0 (:func:`~loadgen.engine.scrape.rebase`).

One idea at several stages, a target's own telemetry, so one file name: this module (sampling it),
:mod:`loadgen.telemetry` (the engines' names), :mod:`loadgen.analysis.telemetry` (the figures),
:mod:`reports.telemetry` (showing them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from loadgen.engine.gpu import GpuSampler
from loadgen.engine.scrape import INTERVAL, MetricsScraper, rebase
from loadgen.redact import Redactor


class TelemetrySampler:
    """``sources``: (Prometheus URL, CSV path) pairs scraped every ``interval`` seconds; ``nvml``: also sample this
    host's GPUs. ``start()`` returns at once; ``stop()`` takes the last scrape and ends the thread; ``write(t0)``
    puts every file on the run's clock (seconds since ``t0``, perf_counter) and returns what the samplers had to
    say (a /metrics that was not Prometheus text, stopped answering; a GPU that could not be read)."""

    def __init__(self, sources: list[tuple[str, Path]], nvml: bool = False, redactor: Redactor | None = None,
                 interval: float = INTERVAL, max_scrapes: int | None = None):
        self.scrapers = [(url, Path(path), MetricsScraper(interval, redactor=redactor, max_scrapes=max_scrapes))
                         for url, path in sources]
        self.gpu = GpuSampler(interval) if nvml else None
        self.origin = 0.0  # perf_counter at start(): the scrapes' clock until write()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Future | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "TelemetrySampler":
        self.origin = time.perf_counter()
        if self.scrapers:
            self._loop = asyncio.new_event_loop()
            self._done = self._loop.create_future()
            self._thread = threading.Thread(target=self._run, name="latbench-telemetry", daemon=True)
            self._thread.start()
        if self.gpu is not None:
            self.gpu.start()
        return self

    def _run(self) -> None:
        loop = self._loop
        try:
            loop.run_until_complete(self._main())
            loop.run_until_complete(loop.shutdown_default_executor())
        except Exception as exc:  # a bug here must not end the run: what was scraped stands, and it is said
            for _, _, s in self.scrapers:
                s.note = s.note or f"server metrics not scraped: {type(exc).__name__}: {exc}"
        finally:
            loop.close()

    async def _main(self) -> None:
        for url, path, s in self.scrapers:
            await s.start(url, path, self.origin)
        try:
            await self._done
        finally:
            for _, _, s in self.scrapers:
                await s.stop()  # one last scrape each: the state at the end of the run

    def stop(self) -> None:
        if self._thread is not None:
            self._loop.call_soon_threadsafe(lambda: self._done.done() or self._done.set_result(None))
            self._thread.join()
            self._thread = None
        if self.gpu is not None:
            self.gpu.stop()

    def write(self, t0: float, gpu_path: Path | None = None) -> list[str]:
        """Every scrape file rebased onto ``t0``, NVML's samples written to ``gpu_path``; the samplers' notes."""
        notes = []
        for _, path, s in self.scrapers:
            if t0:
                rebase(path, t0 - self.origin)
            if s.note:
                notes.append(s.note)
        if self.gpu is not None and gpu_path is not None:
            self.gpu.write(gpu_path, t0)
            if self.gpu.note and self.gpu.devices:  # no GPU on this host: nothing to say
                notes.append(self.gpu.note)
        return notes
