"""Automatic prefix caching: the keys and values of prompt blocks other requests already computed.

Semantics after vLLM's automatic prefix caching (APC):

- A prompt's tokens are cut into blocks of :data:`BLOCK_TOKENS`; only full blocks are cached (a prompt's
  last, partial block never is).
- A block is known by a *hash chain*: the hash of its tokens together with the hash of the block before
  it, so a block hits only when the whole prefix up to and including it is the same. Two prompts that
  differ in their first token share nothing, however alike their later blocks are.
- When a request starts, its longest chain of cached blocks is copied into its KV cache and those tokens
  are not prefilled: the model computes only the rest, so the prefill time (and the time to first token
  of an otherwise idle server) falls in proportion to the cached share of the prompt. At least one
  prompt token is always computed, because the first output token needs its logits.
- As a prompt is prefilled (in chunks, or whole), each block it completes is stored, so a request that
  starts later can hit blocks of one still running. Generated tokens are not cached.
- Capacity is bounded in blocks; past it the least recently used block is evicted. A chain is touched
  from its last block to its first, so the first block is the most recent and a chain is evicted from its
  tail: what remains is still a usable prefix.

Blocks are copies (this server's KV caches are per sequence, not paged), so a cached block is never
shared with a running request and can be evicted at any time. Counted as vLLM counts them, in tokens:
``refserver:prefix_cache_queries`` (prompt tokens looked up) and ``refserver:prefix_cache_hits`` (of those,
the tokens found cached); their ratio is the hit rate. Used by the engine's worker thread only.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from .metrics import Metrics

#: Tokens per cached block (vLLM's default block size).
BLOCK_TOKENS = 16
#: Without --prefix-cache-blocks, the cache holds as many blocks as fit in this many bytes of keys and values.
DEFAULT_BUDGET_BYTES = 256 << 20
MIN_DEFAULT_BLOCKS = 64


def block_hashes(prompt_ids: list[int]) -> list[bytes]:
    """The chain hash of each full block of ``prompt_ids``: block i's covers tokens ``[0, (i + 1) * BLOCK_TOKENS)``."""
    ids = np.asarray(prompt_ids, dtype=np.int64)
    out: list[bytes] = []
    prev = b""
    for i in range(len(prompt_ids) // BLOCK_TOKENS):
        prev = hashlib.blake2b(prev + ids[i * BLOCK_TOKENS : (i + 1) * BLOCK_TOKENS].tobytes(),
                               digest_size=16).digest()
        out.append(prev)
    return out


def default_blocks(kv_bytes_per_token: int) -> int:
    """Blocks that fit in :data:`DEFAULT_BUDGET_BYTES` for a model keeping ``kv_bytes_per_token``."""
    return max(MIN_DEFAULT_BLOCKS, DEFAULT_BUDGET_BYTES // max(1, kv_bytes_per_token * BLOCK_TOKENS))


class PrefixCache:
    """A bounded LRU map from chain hashes to copies of one block's keys and values (every layer).

    ``model`` gives ``read_kv(cache, start, stop)`` (a copy of positions ``[start, stop)``) and
    ``write_kv(cache, start, kv)``; ``capacity`` is in blocks (0: :func:`default_blocks`)."""

    def __init__(self, model, metrics: Metrics, capacity: int = 0):
        self.model = model
        self.capacity = capacity if capacity > 0 else default_blocks(model.kv_bytes_per_token)
        self._blocks: OrderedDict[bytes, object] = OrderedDict()
        self.queries = self.hits = 0  # prompt tokens looked up, and found cached, since start
        self._metrics = metrics.add_prefix_cache(self.capacity)

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> int:
        """Drop every block (a reset: the next request finds nothing cached); returns how many there were."""
        n = len(self._blocks)
        self._blocks.clear()
        self._metrics.blocks.set(0)
        return n

    def attach(self, prompt_ids: list[int], cache) -> tuple[list[bytes], int]:
        """Look the prompt up and copy its cached prefix into ``cache`` (empty, sized for the prompt).

        Returns (the prompt's block hashes, tokens now in ``cache``: a multiple of BLOCK_TOKENS, less than
        the prompt's length). Counts the query and the hit."""
        hashes = block_hashes(prompt_ids)
        usable = (len(prompt_ids) - 1) // BLOCK_TOKENS  # one token at least is computed
        hit = 0
        while hit < usable and hashes[hit] in self._blocks:
            hit += 1
        self._touch(hashes[:hit])
        for i in range(hit):
            self.model.write_kv(cache, i * BLOCK_TOKENS, self._blocks[hashes[i]])
        cache.length = hit * BLOCK_TOKENS
        self.queries += len(prompt_ids)
        self.hits += hit * BLOCK_TOKENS
        self._metrics.queries.inc(len(prompt_ids))
        self._metrics.hits.inc(hit * BLOCK_TOKENS)
        self._metrics.hit_rate.set(self.hits / self.queries if self.queries else 0.0)
        return hashes, hit * BLOCK_TOKENS

    def store(self, hashes: list[bytes], cache, first: int, prefilled: int) -> int:
        """Store the blocks ``first ..`` that ``cache`` now holds in full (``prefilled`` prompt tokens computed);
        return the number of the prompt's blocks cached or stored so far (the next call's ``first``)."""
        done = min(len(hashes), prefilled // BLOCK_TOKENS)
        for i in range(first, done):
            h = hashes[i]
            if h in self._blocks:  # another request stored it meanwhile
                self._blocks.move_to_end(h)
                continue
            self._blocks[h] = self.model.read_kv(cache, i * BLOCK_TOKENS, (i + 1) * BLOCK_TOKENS)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)
                self._metrics.evictions.inc()
        if done > first:
            self._touch(hashes[:done])
        self._metrics.blocks.set(len(self._blocks))
        return max(first, done)

    def _touch(self, chain: list[bytes]) -> None:
        """Mark the chain's blocks used, the last first: its head ends the most recent, its tail goes first."""
        for h in reversed(chain):
            if h in self._blocks:
                self._blocks.move_to_end(h)
