"""Emptying the server's caches on request (``POST /reset_prefix_cache``, vLLM's name for it).

The prefix cache and the image cache belong to the engine's worker thread, which reads and fills them during a
step; so a reset asked from the event loop waits for the worker's next step boundary (:class:`CacheResets`),
where the worker empties them and answers how much each held. The result cache is the event loop's own and is
emptied there. Counters (hits, queries) are never reset: like vLLM's, they only grow.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future


class CacheResets:
    """Resets asked and not yet served, under the engine's lock ``cv`` (its worker waits on it for work)."""

    def __init__(self, cv: threading.Condition) -> None:
        self._cv = cv
        self._pending: list[Future] = []

    def ask(self) -> Future:
        """A reset to serve at the worker's next step boundary (call from the event loop); its future gives
        {cache: entries dropped}."""
        fut: Future = Future()
        with self._cv:
            self._pending.append(fut)
            self._cv.notify()
        return fut

    def serve(self, engine) -> None:
        """Empty ``engine``'s prefix and image caches and answer every reset asked: on its worker thread, holding
        the lock."""
        if not self._pending:
            return
        dropped = {"prefix_cache_blocks": engine.prefix.clear() if engine.prefix is not None else 0,
                   "image_cache": engine.image_cache.clear() if engine.image_cache is not None else 0}
        for fut in self._pending:
            fut.set_result(dropped)
        self._pending.clear()
