"""How a sender waits for a request's due time: one rule for the asyncio and the gevent loops.

Event-loop timers fire up to a millisecond early or late (uvloop counts whole milliseconds), which would
show up as send lag; so the timer is set ``SPIN_S`` early and the last stretch is spent yielding to the
loop. A pure function: the loops differ (asyncio, gevent), what they compute does not.
"""

from __future__ import annotations

SPIN_S = 0.0015  # the last stretch before a due time is spent yielding, not in a timer
MAX_SLEEP_S = 0.05  # wake at least this often to notice a stop request
FLUSH_EVERY_S = 1.0  # seconds between writes of buffered records (native) or shipments (Locust workers)


def sleep_for(delay: float) -> float | None:
    """What to do ``delay`` seconds before a send is due: None = send now; 0.0 = yield once; else sleep that long."""
    if delay <= 0:
        return None
    if delay > SPIN_S:
        return min(delay - SPIN_S, MAX_SLEEP_S)
    return 0.0
