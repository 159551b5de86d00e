"""The transport contract: what every transport gives the engine.

Every transport sends a :class:`~loadgen.protocols.base.Request` and fills an
:class:`~loadgen.records.schema.Outcome` (a failed request is an error class on it, never an exception).
A transport that can run requests without an asyncio Task each also offers ``submit`` (the callback path:
``submit(req, handler, out, on_done, ctx) -> call``, ``on_done(call)`` once it ended); the others set
``submit = None`` and the engine runs ``send`` in a Task per request.

One idea at several stages, each stage's contract, so one file name: :mod:`loadgen.protocols.base` (what a protocol
gives a transport), :mod:`loadgen.engine.base` (what an engine is given and returns).
"""

from __future__ import annotations

from typing import Callable, Protocol

from loadgen.protocols.base import Request, ResponseHandler
from loadgen.records.schema import Outcome
from loadgen.scenario.model import is_client_header


class Transport(Protocol):
    name: str
    submit: Callable | None  # the callback path, or None where only ``send`` exists

    async def start(self) -> None:
        """Open what the transport needs (a session, a resolver); before the first request."""

    async def close(self) -> None:
        """Release connections; after the last request."""

    async def send(self, req: Request, handler: ResponseHandler, out: Outcome) -> None:
        """Send ``req`` and fill ``out`` (times on the perf_counter clock, error class on failure)."""


def sendable(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """``headers`` less those the transport writes itself (Content-Length, Transfer-Encoding, Connection...:
    :data:`~loadgen.scenario.model.CLIENT_HEADERS`): a request never carries a framing header beside the
    transport's own (a Transfer-Encoding beside a Content-Length is a malformed request)."""
    if not any(is_client_header(k) for k, _ in headers):
        return headers
    return tuple((k, v) for k, v in headers if not is_client_header(k))
