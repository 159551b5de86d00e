"""Ctrl-C and SIGTERM during a run: the first stops sending, a second aborts."""

from __future__ import annotations

import signal
from typing import Callable

from loadgen.engine.base import RunControl

_received = [0]  # SIGINT/SIGTERM the handlers took, in this process


def received() -> int:
    """How many SIGINT/SIGTERM the installed handlers have taken (0 when none are installed): a runner between
    two runs (a repeat's pause) stops when it grows."""
    return _received[0]


def install_signal_handlers(get_engine: Callable[[], RunControl | None], announce: Callable[[str], None],
                            on_sigterm: Callable[[], None] | None = None) -> None:
    """SIGINT/SIGTERM: the first stops sending and lets in-flight requests finish; a second aborts.

    Before an engine runs (a managed server still starting), a signal raises KeyboardInterrupt. ``on_sigterm``
    (once an engine runs) is called first at each SIGTERM, in the handler: it may only set flags (a watch's: no
    linger, since a service manager stopping it waits for no last scrape)."""
    count = [0]

    def handler(signum, frame):
        count[0] += 1
        _received[0] += 1
        eng = get_engine()
        if eng is None:
            raise KeyboardInterrupt
        if signum == signal.SIGTERM and on_sigterm is not None:
            on_sigterm()
        if count[0] == 1:
            announce("stopping: no new requests; waiting for those in flight (Ctrl-C again to abort)")
            eng.call_soon(eng.request_stop)
        else:
            announce("aborting: in-flight requests are recorded as cancelled")
            eng.call_soon(eng.abort)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
