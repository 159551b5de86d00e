"""The engine: one worker thread that owns the model and schedules every forward pass.

Requests wait in a FIFO queue. At each step boundary the worker admits waiting requests into the running
batch (up to ``max_batch_size``), prefills each newcomer on its own (its first token comes out of the
prefill), then runs one decode step for the whole running batch: continuous batching. With
``max_batch_size=1`` this is one request at a time, a lock around the model. When nothing is running and
fewer than ``max_batch_size`` requests wait, the worker waits at most ``max_queue_delay_s`` after the oldest
one's arrival before starting (Triton's dynamic batcher); a full batch starts at once, and requests arriving
while a batch runs join at the next step boundary without waiting.

The HTTP side never blocks on the model: it submits a :class:`GenRequest` and reads events from the
request's asyncio queue, which the worker fills through ``call_soon_threadsafe`` once per step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .backends import ResolvedBackend, load_model
from .config import ServerConfig
from .faults import FaultInjector
from .metrics import Metrics
from .sampling import StopMatcher, sample
from .tokenizer import decode_token


class QueueFull(Exception):
    """The waiting queue holds ``max_queue_size`` requests already."""


class EngineFailed(Exception):
    """The model could not be loaded; the engine refuses work."""


@dataclass(eq=False)
class GenRequest:
    """One generation. Events on ``events``: ("text", str), ("done", finish_reason, n_tokens), ("error", str)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    arrival: float = field(default_factory=time.perf_counter)
    events: asyncio.Queue | None = None
    aborted: bool = False
    n_generated: int = 0
    last_token: int = 0
    last_time: float = 0.0
    cache: object = None
    stopper: StopMatcher | None = None
    rng: np.random.Generator | None = None


class Engine:
    """Owns the model, the queue and the worker thread. ``state``: lazy, loading, warming, ready, failed."""

    def __init__(self, config: ServerConfig, resolved: ResolvedBackend, metrics: Metrics,
                 faults: FaultInjector, log: logging.LoggerAdapter):
        self.config, self.resolved, self.metrics, self.faults, self.log = config, resolved, metrics, faults, log
        self.state = "loading" if config.preload else "lazy"
        self.model = None
        self.error: str | None = None
        self._cv = threading.Condition()
        self._waiting: deque[GenRequest] = deque()
        self._running: list[GenRequest] = []
        self._outbox: list[tuple[GenRequest, tuple]] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = time.perf_counter()
        self._counter = 0
        self._overrun = 0.0

    # ---- event-loop side -------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the worker thread; with ``preload`` it loads (and warms) the model first."""
        self._loop = loop
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="refserver-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the worker after its current step."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def submit(self, req: GenRequest) -> None:
        """Queue ``req`` (call from the event loop). Raises QueueFull or EngineFailed."""
        with self._cv:
            if self.state == "failed":
                raise EngineFailed(self.error or "model failed to load")
            if len(self._waiting) >= self.config.max_queue_size:
                raise QueueFull()
            req.events = asyncio.Queue()
            self._waiting.append(req)
            self.metrics.waiting.set(len(self._waiting))
            self._cv.notify()

    def abort(self, req: GenRequest) -> None:
        """Drop ``req`` wherever it is; a running request leaves the batch at the next step boundary."""
        with self._cv:
            req.aborted = True
            try:
                self._waiting.remove(req)
            except ValueError:
                pass
            self.metrics.waiting.set(len(self._waiting))

    def _deliver(self, items: list[tuple[GenRequest, tuple]]) -> None:
        for req, event in items:
            if req.events is not None:
                req.events.put_nowait(event)

    # ---- worker side -----------------------------------------------------------------------------
    def _run(self) -> None:
        if self.config.preload:
            self._load_and_warm()
        while True:
            admitted = self._admit()
            if admitted is None:
                return
            self._stall()
            if self.model is None and not self._load_and_warm():
                self._fail_all(admitted)
                continue
            self._running = [r for r in self._running if not r.aborted]
            decoding = list(self._running)  # a snapshot: finishing requests leave self._running mid-step
            for req in admitted:
                self._guarded(self._prefill, [req])
            if decoding:
                self._guarded(self._decode, decoding)
            self.metrics.running.set(len(self._running))
            self._flush()

    def _load_and_warm(self) -> bool:
        try:
            self.state = "loading"
            t0 = time.perf_counter()
            self.model = load_model(self.resolved, self.config)
            load_s = time.perf_counter() - t0
            self.metrics.model_load.set(load_s)
            self.log.info("model %s loaded in %.3f s (%s)", self.resolved.spec.name, load_s, self.model.precision_note)
            if self.config.warmup:
                self.state = "warming"
                t0 = time.perf_counter()
                self._warmup()
                self.metrics.warmup.set(time.perf_counter() - t0)
                self.log.info("warm-up done in %.3f s", time.perf_counter() - t0)
            self.state = "ready"
            return True
        except Exception as exc:  # a broken cache dir or weights file: refuse work, keep serving errors
            self.state, self.error = "failed", f"model load failed: {exc}"
            self.log.exception("model load failed")
            return False

    def _warmup(self, passes: int = 2) -> None:
        """A few prefill + decode passes at each batch-size bucket (powers of two up to the max)."""
        buckets = sorted({1 << i for i in range(16) if (1 << i) <= self.config.max_batch_size} | {self.config.max_batch_size})
        for batch in buckets:
            for _ in range(passes):
                caches = [self.model.new_cache(16) for _ in range(batch)]
                for c in caches:
                    self.model.prefill([72, 105, 33, 32, 104, 101, 108, 108], c)
                for step in range(3):
                    self.model.decode([32 + step] * batch, caches)

    def _admit(self) -> list[GenRequest] | None:
        """Block until there is work; return the requests to admit now (possibly []), None to stop."""
        cfg = self.config
        with self._cv:
            while True:
                if self._stopping:
                    return None
                free = cfg.max_batch_size - len(self._running)
                if self._waiting and free > 0:
                    if not self._running and len(self._waiting) < cfg.max_batch_size and cfg.max_queue_delay_s > 0:
                        remaining = self._waiting[0].arrival + cfg.max_queue_delay_s - time.perf_counter()
                        if remaining > 0:
                            self._cv.wait(remaining)
                            continue
                    admitted = [self._waiting.popleft() for _ in range(min(free, len(self._waiting)))]
                    self.metrics.waiting.set(len(self._waiting))
                    return admitted
                if self._running:
                    return []
                self._cv.wait()

    def _stall(self) -> None:
        remaining = self.faults.stall_remaining(time.perf_counter() - self._started)
        if remaining > 0:
            self.metrics.fault("stall")
            time.sleep(remaining)

    def _guarded(self, step, reqs: list[GenRequest]) -> None:
        try:
            step(reqs)
        except Exception as exc:  # a bug or OOM in one step fails its requests, not the server
            self.log.exception("model step failed")
            for req in reqs:
                self._finish(req, None, error=f"model step failed: {exc}")
        overrun = getattr(self.model, "overrun_s", 0.0)
        if overrun > self._overrun:
            self.metrics.sim_overrun.inc(overrun - self._overrun)
            self._overrun = overrun

    def _prefill(self, reqs: list[GenRequest]) -> None:
        req = reqs[0]
        start = time.perf_counter()
        self.metrics.queue_time.observe(start - req.arrival)
        self._counter += 1
        seed = req.seed if req.seed is not None else (self.config.seed, self._counter)
        req.rng = np.random.default_rng(seed)
        req.stopper = StopMatcher(req.stop)
        req.cache = self.model.new_cache(len(req.prompt_ids) + req.max_tokens)
        logits = self.model.prefill(req.prompt_ids, req.cache)
        now = time.perf_counter()
        self.metrics.prefill_step.observe(now - start)
        self.metrics.prompt_tokens.inc(len(req.prompt_ids))
        self.metrics.ttft.observe(now - req.arrival)
        req.last_time = now
        self._running.append(req)
        self._emit(req, sample(logits, req.temperature, req.top_p, req.rng))

    def _decode(self, reqs: list[GenRequest]) -> None:
        start = time.perf_counter()
        logits = self.model.decode([r.last_token for r in reqs], [r.cache for r in reqs])
        now = time.perf_counter()
        self.metrics.decode_step.observe(now - start)
        self.metrics.batch_size.observe(len(reqs))
        for req, row in zip(reqs, logits):
            self.metrics.itl.observe(now - req.last_time)
            req.last_time = now
            self._emit(req, sample(row, req.temperature, req.top_p, req.rng))

    def _emit(self, req: GenRequest, token: int) -> None:
        req.last_token = token
        req.n_generated += 1
        self.metrics.generation_tokens.inc()
        text, stopped = req.stopper.feed(decode_token(token))
        if text:
            self._outbox.append((req, ("text", text)))
        if stopped:
            self._finish(req, "stop")
        elif req.n_generated >= req.max_tokens:
            tail = req.stopper.flush()
            if tail:
                self._outbox.append((req, ("text", tail)))
            self._finish(req, "length")

    def _finish(self, req: GenRequest, reason: str | None, error: str | None = None) -> None:
        if req in self._running:
            self._running.remove(req)
        req.cache = None
        self._outbox.append((req, ("error", error) if error else ("done", reason, req.n_generated)))

    def _fail_all(self, reqs: list[GenRequest]) -> None:
        for req in reqs:
            self._outbox.append((req, ("error", self.error or "model failed to load")))
        with self._cv:
            while self._waiting:
                self._outbox.append((self._waiting.popleft(), ("error", self.error or "model failed")))
        self._flush()

    def _flush(self) -> None:
        if not self._outbox or self._loop is None:
            return
        items, self._outbox = self._outbox, []
        try:
            self._loop.call_soon_threadsafe(self._deliver, items)
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass
