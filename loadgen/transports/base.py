"""The transport contract: what every transport gives the engine.

Every transport sends a :class:`~loadgen.protocols.base.Request` and fills an
:class:`~loadgen.records.schema.Outcome` (a failed request is an error class on it, never an exception).
A transport that can run requests without an asyncio Task each also offers ``submit`` (the callback path:
``submit(req, handler, out, on_done, ctx) -> call``, ``on_done(call)`` once it ended); the others set
``submit = None`` and the engine runs ``send`` in a Task per request.
"""

from __future__ import annotations

from typing import Callable, Protocol

from loadgen.protocols.base import Request, ResponseHandler
from loadgen.records.schema import Outcome


class Transport(Protocol):
    name: str
    submit: Callable | None  # the callback path, or None where only ``send`` exists

    async def start(self) -> None:
        """Open what the transport needs (a session, a resolver); before the first request."""

    async def close(self) -> None:
        """Release connections; after the last request."""

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req`` and fill ``out`` (times on the perf_counter clock, error class on failure)."""
