"""How a run is split between senders (generator processes, Locust workers): pure functions, no clock.

Open loop: the run has ONE arrival schedule (``loadgen.schedule.arrivals.arrivals`` with the scenario's seed);
sender ``k`` of ``n`` sends arrivals ``k, k+n, k+2n, ...`` of each phase. The union over workers is
exactly the native engine's schedule, request for request, and ``seq`` is the same number the native
engine gives that arrival (its index among all arrivals of the run), so request ``seq`` carries the
same prompt under both engines. A trace replay's arrivals are dealt the same way (every sender reads the
trace file itself, at the path the phase plan names).

Closed loop: the phase's ``concurrency`` users (and its ``max_requests`` budget) are dealt across the
senders as evenly as integers allow. Across Locust workers their ``seq`` cannot be dense without
coordination, so it is unique but sparse: ``CLOSED_SEQ_BASE + phase * 2**32 + j * n + k`` for the
``j``-th request of worker ``k`` (the multi-process engine renumbers its merged records instead).

The in-flight cap (``max_in_flight``) is dealt across workers the same way: past its share a worker
records ``dropped``, never delays.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterator

import numpy as np

from loadgen.scenario.trace import TraceSlice
from loadgen.schedule.arrivals import PhasePlan, arrivals

CLOSED_SEQ_BASE = 1 << 40


def share(total: int, k: int, n: int) -> int:
    """Worker ``k``'s part of ``total`` items dealt over ``n`` workers (the first ones get the remainder)."""
    return total // n + (1 if k < total % n else 0)


def open_counts(plans: list[PhasePlan], seed: int, burstiness: float) -> list[int]:
    """Number of arrivals of each phase (0 for closed-loop phases)."""
    return [sum(len(c) for c in arrivals(p, seed, burstiness)) for p in plans]


def seq_bases(counts: list[int]) -> list[int]:
    """The ``seq`` of each phase's first arrival: arrivals of earlier phases, counted."""
    out, total = [], 0
    for c in counts:
        out.append(total)
        total += c
    return out


def shard_arrivals(plan: PhasePlan, k: int, n: int, seed: int, burstiness: float,
                   base: int = 0) -> Iterator[tuple[np.ndarray, int, int]]:
    """Sender ``k``'s share of an open phase's arrivals, ascending, in chunks of ``(times, first seq, stride)``.

    Arrival ``i`` of the phase (counted from 0) goes to sender ``i % n`` and has ``seq = base + i``, so the
    chunk's j-th time has ``seq = first + j * stride``. ``base`` is the phase's first seq (``seq_bases``).
    """
    g = 0  # index of the chunk's first arrival within the phase
    for times in arrivals(plan, seed, burstiness):
        first = (k - g) % n
        if first < len(times):
            yield times[first::n], base + g + first, n
        g += len(times)


def closed_seq(phase: int, j: int, k: int, n: int) -> int:
    """The ``seq`` of the ``j``-th closed-loop request of worker ``k`` in a phase."""
    return CLOSED_SEQ_BASE + (phase << 32) + j * n + k


def plans_to_wire(plans: list[PhasePlan]) -> list[dict]:
    return [asdict(p) for p in plans]


def plans_from_wire(data: list[dict]) -> list[PhasePlan]:
    return [PhasePlan(**{**d, "trace": TraceSlice(**d["trace"]) if d.get("trace") else None}) for d in data]
