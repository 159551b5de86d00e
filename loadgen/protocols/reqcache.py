"""Request objects built once per prompt, when a protocol's requests depend on nothing else.

An :class:`~loadgen.protocols.base.ApiProtocol` builds request ``seq`` from ``prompts.get(seq)``; the prompt
sources give prompt ``seq % len(prompts)``. A protocol whose ``per_request`` is False (the OpenAI ones,
and ``http`` without ``{seq}``) builds the same request for the same prompt, so it is built once and the
same object is sent again: no prompt slicing, no JSON encoding, and the transport's encoded bytes (cached
by the Request's identity) reused. Anything else is built per request, as before.
"""

from __future__ import annotations

from loadgen.scenario.images import AttachedPrompts
from loadgen.scenario.prefix import PrefixedPrompts
from loadgen.scenario.prompts import ListPrompts, SyntheticPrompts

#: At most this many bytes of request bodies are kept; past it requests are built as they go.
MAX_CACHED_BYTES = 64 << 20


class RequestCache:
    """``get(seq)``: the Request of ``seq``, from the cache when the protocol allows it."""

    def __init__(self, protocol, prompts):
        self.protocol, self.prompts = protocol, prompts
        self._bytes = 0
        cacheable = (getattr(protocol, "per_request", True) is False  # sources whose request seq is prompt seq % len
                     and isinstance(prompts, (SyntheticPrompts, ListPrompts, PrefixedPrompts, AttachedPrompts)))
        self._n = len(prompts) if cacheable else 0
        self._cache: list | None = [None] * self._n if cacheable else None

    def get(self, seq: int):
        cache = self._cache
        if cache is None:
            return self.protocol.build(seq, self.prompts.get(seq))
        i = seq % self._n
        req = cache[i]
        if req is None:
            req = self.protocol.build(seq, self.prompts.get(seq))
            if self._bytes < MAX_CACHED_BYTES:
                cache[i] = req
                self._bytes += len(req.body) + 256
        return req
