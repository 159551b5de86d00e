"""Client-side aborts (``workload.cancel``): which requests, and the handler that says when enough tokens came.

The engine aborts a chosen request ``after`` seconds from its send (a loop timer) or once ``after_tokens`` token
chunks arrived (:class:`AbortAfterTokens` wraps the protocol's handler and asks the engine to abort, on the
next loop turn: never from inside a transport's read). The request is then recorded as ``aborted``
(:data:`~loadgen.records.schema.ABORTED`): its connection is closed, as a browser closing a tab does.
"""

from __future__ import annotations

from typing import Callable

from loadgen.protocols.base import ResponseHandler
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Cancel

_GOLDEN = 0.6180339887498949  # (sqrt 5 - 1) / 2: consecutive multiples are spread evenly over [0, 1)


def chosen(seq: int, cancel: Cancel | None, seed: int = 0) -> bool:
    """Whether request ``seq`` is one the client aborts: the same requests in every run of a seed and whichever
    process sends them; over any N consecutive requests the share is ``fraction`` within a few / N (a Kronecker
    sequence: multiples of the golden ratio, modulo 1)."""
    if cancel is None:
        return False
    return ((seq + 1 + seed) * _GOLDEN) % 1.0 < cancel.fraction


class AbortAfterTokens(ResponseHandler):
    """Wraps a protocol's handler; calls ``fire`` once, when ``n`` token chunks have arrived."""

    __slots__ = ("inner", "n", "fire")

    def __init__(self, inner: ResponseHandler, n: int, fire: Callable[[], None]):
        self.inner, self.n, self.fire = inner, n, fire

    def on_status(self, status: int, out: Outcome) -> None:
        self.inner.on_status(status, out)

    def on_body(self, data: bytes, now: float, out: Outcome) -> None:
        self.inner.on_body(data, now, out)
        if self.fire is not None and len(out.token_times) >= self.n:
            fire, self.fire = self.fire, None
            fire()

    def on_end(self, out: Outcome) -> None:
        self.inner.on_end(out)
