"""LRU result cache: completed responses keyed by model + canonical request.

Only requests that finished normally (``length`` or ``stop``) are stored. A hit keeps the text pieces in
their original order so that a cached answer still streams chunk by chunk.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedResult:
    pieces: tuple[str, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


def cache_key(model: str, kind: str, canonical: dict) -> str:
    """A stable key: the model, the endpoint kind and the request fields that decide the output."""
    return json.dumps({"model": model, "kind": kind, "request": canonical}, sort_keys=True, separators=(",", ":"))


class ResultCache:
    """A bounded LRU map from :func:`cache_key` strings to :class:`CachedResult`. Event-loop only."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict[str, CachedResult] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> int:
        """Drop every entry; returns how many there were."""
        n = len(self._items)
        self._items.clear()
        return n

    def get(self, key: str) -> CachedResult | None:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def put(self, key: str, result: CachedResult) -> None:
        if self.capacity <= 0:
            return
        self._items[key] = result
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
