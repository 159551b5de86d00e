"""One generation request as the serving engine holds it, and the channel its events reach the event loop by.

The front ends make a :class:`GenRequest`, :meth:`~reference_server.serving.scheduler.ServingEngine.submit` it,
and read its events from its :class:`EventChannel`; the engine's worker fills the channel once per step.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..models.sampling import StopMatcher


class QueueFull(Exception):
    """The waiting queue holds ``max_queue_size`` requests already."""


class EngineFailed(Exception):
    """The model could not be loaded; the engine refuses work."""


class EventChannel:
    """A one-reader event buffer on the event loop, lighter than ``asyncio.Queue``.

    The worker's events of one step arrive in one loop callback; the reader takes everything buffered at
    once (:meth:`get_all`), so a stream that fell behind writes several tokens in one go.
    """

    __slots__ = ("items", "_waiter", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.items: deque = deque()
        self._waiter: asyncio.Future | None = None
        self._loop = loop

    def put_nowait(self, event: tuple) -> None:
        """Add ``event`` (call on the loop) and wake the reader."""
        self.items.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get_all(self) -> list[tuple]:
        """Every buffered event (at least one), oldest first."""
        while not self.items:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        out = list(self.items)
        self.items.clear()
        return out

    async def get(self) -> tuple:
        """The oldest buffered event."""
        if not self.items:
            self.items.extend(await self.get_all())
        return self.items.popleft()


@dataclass(eq=False)
class GenRequest:
    """One generation. Events: ("text", str), ("done", finish_reason, n_tokens), ("error", str)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    arrival: float = field(default_factory=time.perf_counter)
    events: EventChannel | None = None
    aborted: bool = False
    n_generated: int = 0
    prefilled: int = 0  # prompt tokens already in the cache (chunked prefill, or found in the prefix cache)
    block_hashes: list = field(default_factory=list)  # the prompt's block chain (with a prefix cache)
    cached_blocks: int = 0  # of those, blocks found in the prefix cache or stored in it
    last_token: int = 0
    last_time: float = 0.0
    cache: object = None
    stopper: StopMatcher | None = None
    rng: np.random.Generator | None = None
    images: list = field(default_factory=list)  # the request's images (api.media.ImageInput), encoded at its start
    image_spans: list = field(default_factory=list)  # each image's (start, length) in prompt_ids: placeholders
    media_cache_hits: int = 0  # of its images and clips, those whose encoder tokens the image cache held
