"""The serving engine (:class:`ServingEngine`): one worker thread that owns the model and schedules every forward pass.

Requests wait in a FIFO queue. Each scheduler iteration is one forward pass (:meth:`ServingEngine._iterate`)
built like vLLM's chunked-prefill scheduler:

1. every running (decoding) sequence gets its next token: decode is never starved by queued prefills;
2. the rest of the step's token budget (``max_step_tokens``) goes to prompts, oldest first: the one
   still being prefilled, then newly admitted requests while the running set is below
   ``max_batch_size``; a prompt longer than what is left is cut into chunks over several steps (when the
   model supports chunked prefill), so one long prompt cannot stall every stream;
   a request's first step looks its prompt up in the prefix cache, when the server has one
   (:mod:`reference_server.serving.prefix_cache`): the blocks found are copied into its KV cache and only the rest
   of the prompt is prefilled; the blocks each pass completes are stored;
3. all of it runs as *one* pass (``model.step``): decode tokens and prompt chunks packed into one matrix
   for every weight matmul, attention per sequence. A sequence whose prompt completes gets its first
   token from that pass.

With ``max_batch_size=1`` this is one request at a time, a lock around the model (whole prompts, no
chunking). When nothing is running and fewer than ``max_batch_size`` requests wait, the worker waits at
most ``max_queue_delay_s`` after the oldest one's arrival before starting (Triton's dynamic batcher); a
full batch starts at once, and requests arriving while a batch runs join at the next step boundary
without waiting.

The HTTP side never blocks on the model: it submits a :class:`GenRequest` and reads events from the
request's :class:`EventChannel`, which the worker fills through one ``call_soon_threadsafe`` per step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque

import numpy as np

from ..config import ServerConfig
from ..models.audio import AudioEncoder
from ..models.backends import ResolvedBackend, load_model
from ..models.sampling import StopMatcher, sample
from ..models.tokenizer import decode_token
from ..models.vision import ImageCache, VisionEncoder
from .cache_reset import CacheResets
from .faults import FaultInjector
from .gen_request import EngineFailed, EventChannel, GenRequest, QueueFull
from .metrics import Metrics
from .prefix_cache import BLOCK_TOKENS, PrefixCache


class ServingEngine:
    """Owns the model, the queue and the worker thread. ``state``: lazy, loading, warming, ready, failed."""

    def __init__(self, config: ServerConfig, resolved: ResolvedBackend, metrics: Metrics,
                 faults: FaultInjector, log: logging.LoggerAdapter):
        self.config, self.resolved, self.metrics, self.faults, self.log = config, resolved, metrics, faults, log
        self.state = "loading" if config.preload else "lazy"
        self.model = None
        self.prefix: PrefixCache | None = None  # made with the model, when config.prefix_cache
        self.vision: VisionEncoder | None = None  # made at the first image
        self.image_cache: ImageCache | None = None  # with it, when config.image_cache_size
        self.audio: AudioEncoder | None = None  # made at the first audio clip
        self.error: str | None = None
        self._cv = threading.Condition()
        self.resets = CacheResets(self._cv)  # asked from the event loop, served by the worker between two steps
        self._waiting: deque[GenRequest] = deque()
        self._prefilling: list[GenRequest] = []  # admitted, prompt not (fully) in the cache yet
        self._running: list[GenRequest] = []  # decoding
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
            req.events = EventChannel(asyncio.get_running_loop())
            self._waiting.append(req)
            self.metrics.waiting.set(len(self._waiting))
            self._cv.notify()

    def abort(self, req: GenRequest) -> None:
        """Drop ``req`` wherever it is; an admitted request leaves the batch at the next step boundary."""
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
            if not self._wait_for_work():
                return
            self._stall()
            if self.model is None and not self._load_and_warm():
                self._fail_all()
                continue
            self._guarded(self._iterate)
            self.metrics.running.set(len(self._running) + len(self._prefilling))
            self._flush()

    def _load_and_warm(self) -> bool:
        try:
            self.state = "loading"
            t0 = time.perf_counter()
            self.model = load_model(self.resolved, self.config)
            load_s = time.perf_counter() - t0
            self.metrics.model_load.set(load_s)
            self.log.info("model %s loaded in %.3f s (%s)", self.resolved.spec.name, load_s, self.model.precision_note)
            if self.config.prefix_cache:
                self.prefix = PrefixCache(self.model, self.metrics, self.config.prefix_cache_blocks)
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
        """A few passes at each batch-size bucket (powers of two up to the max) and at the step budget:
        the shapes the scheduler will run, so BLAS buffers and the allocator are warm."""
        cfg, step = self.config, model_step(self.model)
        buckets = sorted({1 << i for i in range(16) if (1 << i) <= cfg.max_batch_size} | {cfg.max_batch_size})
        prompt = [72, 105, 33, 32, 104, 101, 108, 108]
        for batch in buckets:
            for _ in range(passes):
                caches = [self.model.new_cache(len(prompt) + 3) for _ in range(batch)]
                step([(prompt, c) for c in caches])
                for i in range(3):
                    step([([32 + i], c) for c in caches])
        if cfg.max_batch_size > 1 and getattr(self.model, "chunked_prefill", False):
            for _ in range(passes):
                step([(prompt * (cfg.max_step_tokens // len(prompt) + 1),
                       self.model.new_cache(cfg.max_step_tokens + 8))])

    def _wait_for_work(self) -> bool:
        """Block until there is work (admitting what may start now); False to stop."""
        cfg = self.config
        with self._cv:
            while True:
                if self._stopping:
                    return False
                self.resets.serve(self)
                self._drop_aborted()
                free = cfg.max_batch_size - len(self._running) - len(self._prefilling)
                busy = self._running or self._prefilling
                if self._waiting and free > 0:
                    if not busy and len(self._waiting) < cfg.max_batch_size and cfg.max_queue_delay_s > 0:
                        remaining = self._waiting[0].arrival + cfg.max_queue_delay_s - time.perf_counter()
                        if remaining > 0:
                            self._cv.wait(remaining)
                            continue
                    self._prefilling.extend(self._waiting.popleft() for _ in range(min(free, len(self._waiting))))
                    self.metrics.waiting.set(len(self._waiting))
                    return True
                if busy:
                    return True
                self._cv.wait()

    def _drop_aborted(self) -> None:
        dropped = False
        for group in (self._running, self._prefilling):
            if any(r.aborted for r in group):
                for req in [r for r in group if r.aborted]:
                    group.remove(req)
                    req.cache = None
                dropped = True
        if dropped:  # the gauge is otherwise set after a step, and none may follow (every client left)
            self.metrics.running.set(len(self._running) + len(self._prefilling))

    def _stall(self) -> None:
        remaining = self.faults.stall_remaining(time.perf_counter() - self._started)
        if remaining > 0:
            self.metrics.fault("stall")
            time.sleep(remaining)

    def _guarded(self, step) -> None:
        try:
            step()
        except Exception as exc:  # a bug or OOM in one step fails its requests, not the server
            self.log.exception("model step failed")
            for req in list(self._running) + list(self._prefilling):
                self._finish(req, None, error=f"model step failed: {exc}")
        overrun = getattr(self.model, "overrun_s", 0.0)
        if overrun > self._overrun:
            self.metrics.sim_overrun.inc(overrun - self._overrun)
            self._overrun = overrun

    def _plan(self) -> list[tuple[GenRequest, int]]:
        """The prompt work of this step: (request, tokens to prefill now), oldest request first."""
        cfg = self.config
        chunked = cfg.max_batch_size > 1 and getattr(self.model, "chunked_prefill", False)
        budget = max(cfg.max_step_tokens - len(self._running), MIN_PREFILL_CHUNK)
        # with several compute threads, several prompts share a step (a step splits by sequence)
        cap = max(budget // cfg.step_threads, MIN_PREFILL_CHUNK) if len(self._prefilling) > 1 else budget
        plan = []
        for req in list(self._prefilling):  # a request whose images cannot be decoded leaves it in _start
            if req.cache is None and not self._start(req):
                continue
            left = len(req.prompt_ids) - req.prefilled
            take = min(left, budget, cap) if chunked else left
            if take <= 0 or (not chunked and plan and take > budget):
                break
            plan.append((req, take))
            budget -= take
        return plan

    def _start(self, req: GenRequest) -> bool:
        """A request's first work: its queue time, its images encoded into its prompt, sampling state and KV
        cache, which the prefix cache fills with the prompt's first blocks where it holds them (those tokens are
        then not prefilled). False when it ended instead (an image that cannot be decoded)."""
        self.metrics.queue_time.observe(time.perf_counter() - req.arrival)
        if req.images and not self._encode_images(req):
            return False
        self._counter += 1
        req.rng = np.random.default_rng(req.seed if req.seed is not None else (self.config.seed, self._counter))
        req.stopper = StopMatcher(req.stop)
        req.cache = self.model.new_cache(len(req.prompt_ids) + req.max_tokens)
        if self.prefix is not None:
            req.block_hashes, req.prefilled = self.prefix.attach(req.prompt_ids, req.cache)
            req.cached_blocks = req.prefilled // BLOCK_TOKENS
        return True

    def _encode_images(self, req: GenRequest) -> bool:
        """Fill the request's image placeholders with each image's tokens: from the image cache, or decoded and
        run through the vision encoder (on this thread: the step waits for it, as a model runner's does)."""
        cfg = self.config
        if self.vision is None:
            self.vision = VisionEncoder(cfg.image_patch_size, min(self.resolved.spec.d_model, 512),
                                        cfg.image_encoder_layers, cfg.weights_seed, cfg.image_merge)
            self.image_cache = ImageCache(cfg.image_cache_size) if cfg.image_cache_size > 0 else None
        t0, encoded = time.perf_counter(), False
        for image, (start, n) in zip(req.images, req.image_spans):
            self.metrics.images.inc()
            tokens = self.image_cache.get(image.sha256) if self.image_cache is not None else None
            if tokens is not None:
                self.metrics.image_cache_hits.inc()
                req.media_cache_hits += 1
            else:
                try:
                    if image.kind == "audio":  # api.media's AudioInput (ImageInput's kind is "image")
                        if self.audio is None:
                            self.audio = AudioEncoder(cfg.audio_tokens_per_s, self.vision.d, cfg.image_encoder_layers,
                                                      cfg.weights_seed)
                        tokens = self.audio.tokens(image.data)[:n]
                    else:
                        tokens = self.vision.tokens(self.vision.pixels(image.data))
                except Exception as exc:  # a header that read but data that does not decode
                    self._finish(req, None, error=f"an image could not be decoded: {type(exc).__name__}")
                    return False
                encoded = True
                if self.image_cache is not None:
                    self.image_cache.put(image.sha256, tokens)
            req.prompt_ids[start : start + n] = tokens
        if encoded:
            self.metrics.image_encoder.observe(time.perf_counter() - t0)
        req.images = []  # their bytes are not needed any more
        return True

    def _iterate(self) -> None:
        """One scheduler iteration: every decode, plus as much prompt work as the budget allows, in one pass."""
        decoding = list(self._running)  # a snapshot: finishing requests leave self._running mid-step
        plan = self._plan()
        start = time.perf_counter()
        segments = [([r.last_token], r.cache) for r in decoding]
        for req, take in plan:
            segments.append((req.prompt_ids[req.prefilled : req.prefilled + take], req.cache))
        if not segments:
            return
        logits = model_step(self.model)(segments)
        now = time.perf_counter()
        phase = "decode" if not plan else ("prefill" if not decoding else "mixed")
        self.metrics.step(phase).observe(now - start)
        if decoding:
            self.metrics.batch_size.observe(len(decoding))
        for req, row in zip(decoding, logits):
            self.metrics.itl.observe(now - req.last_time)
            req.last_time = now
            self._emit(req, row)
        for (req, take), row in zip(plan, logits[len(decoding):]):
            req.prefilled += take
            self.metrics.prompt_tokens.inc(take)
            if self.prefix is not None:  # the blocks this pass completed, for the requests that follow
                req.cached_blocks = self.prefix.store(req.block_hashes, req.cache, req.cached_blocks, req.prefilled)
            if req.prefilled < len(req.prompt_ids):
                continue
            self._prefilling.remove(req)
            self.metrics.ttft.observe(now - req.arrival)
            req.last_time = now
            self._running.append(req)
            self._emit(req, row)

    def _emit(self, req: GenRequest, logits: np.ndarray) -> None:
        token = sample(logits, req.temperature, req.top_p, req.rng)
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
        for group in (self._running, self._prefilling):
            if req in group:
                group.remove(req)
        req.cache = None
        self._outbox.append((req, ("error", error) if error else ("done", reason, req.n_generated)))

    def _fail_all(self) -> None:
        for req in self._prefilling:
            self._outbox.append((req, ("error", self.error or "model failed to load")))
        self._prefilling.clear()
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


MIN_PREFILL_CHUNK = 16  # prompt tokens a step takes even when decodes alone fill the budget


def model_step(model):
    """``model.step`` (one pass over (tokens, cache) segments), or the same built from the model's
    ``prefill`` and ``decode`` for models without one (whole prompts, or what follows a cached prefix, then one
    decode batch)."""
    step = getattr(model, "step", None)
    if step is not None:
        return step

    def fallback(segments):
        # one token after a filled cache is a decode; anything else a prompt (whole, or its part after a prefix
        # the prefix cache filled in)
        decode = [(i, t[0], c) for i, (t, c) in enumerate(segments) if len(t) == 1 and c.length > 0]
        out: list = [None] * len(segments)
        for i, (tokens, cache) in enumerate(segments):
            if len(tokens) > 1 or cache.length == 0:
                out[i] = model.prefill(tokens, cache)
        if decode:
            rows = model.decode([t for _, t, _ in decode], [c for _, _, c in decode])
            for (i, _, _), row in zip(decode, rows):
                out[i] = row
        return np.stack(out)

    return fallback
