"""Whether a closed loop held its concurrency (a phase's ``closed_loop`` in summary.json: a
:class:`~loadgen.records.results.ClosedLoop`).

A closed loop has no send schedule, so send lag cannot see a generator that falls behind: its users wait on
the client, not on the server, and fewer requests are in flight than were asked for. The records say how
many were (Little's law: each request's time in flight, summed, over the window's length). Seconds throughout.

    asked                 the phase's concurrency
    requests_in_flight    time-average of requests in flight (sent -> done) over the window
    sessions_in_progress  conversations: time-average of sessions in progress (first turn sent -> last turn
                          done, think times included) over the window; None without conversations
    held                  what is judged against ``asked``: sessions_in_progress with conversations (a user
                          holds one session at a time), else requests_in_flight
    measure               "sessions" or "requests": which of the two ``held`` is
    fraction              held / asked
    window                [start, end] run seconds: from the moment every user has sent its first request to
                          the phase's end, or to the first user's last answer when it stopped before (a budget
                          ran out, the run stopped); records without a user column (older RunDirs): from the
                          asked-th send of the phase
    gap                   the client's own time from a user's answer (done) to its next request (sent): n, p50,
                          p99; a conversation's later turn counts from its due time (the think time is asked
                          for, not the client's); None where the records name no user (older RunDirs)
    limited               held below ``HELD_MIN`` of asked in a recorded phase: the numbers describe the
                          generator (judged only when the phase's budget lets every user send)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.analysis.stats import nearest_rank
from loadgen.records.results import ClosedLoop, Gap, ShortPhase
from loadgen.schedule.arrivals import PhasePlan

__all__ = ["HELD_MIN", "closed_loop_stats", "held_share", "held_text"]

#: Below this share of its concurrency, a closed loop did not hold it: the run is generator-limited.
HELD_MIN = 0.95


def _time_average(starts: np.ndarray, ends: np.ndarray, a: float, b: float) -> float:
    """Mean number of intervals ``[starts, ends]`` open over ``[a, b]``."""
    overlap = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0.0, None)
    return float(overlap.sum() / (b - a))


def _gaps(df: pd.DataFrame) -> np.ndarray:
    """Per user, the time from each answer to the user's next send (a later turn: from its due time)."""
    # by worker, user, scheduled (a stable sort, NaN last): of the columns it needs, not of the whole frame
    order = np.lexsort((df["scheduled"].to_numpy(), df["user"].to_numpy(), df["worker"].to_numpy()))
    worker, user, sched, sent, done, turn = (df[c].to_numpy()[order]
                                             for c in ("worker", "user", "scheduled", "sent", "done", "turn"))
    same = (worker[1:] == worker[:-1]) & (user[1:] == user[:-1])
    sent, sched = sent[1:], sched[1:]
    since = np.where(turn[1:] > 0, sched, done[:-1])
    gaps = (sent - since)[same]
    return np.sort(gaps[np.isfinite(gaps)])


def closed_loop_stats(df: pd.DataFrame, plan: PhasePlan, end: float) -> ClosedLoop:
    """The closed-loop figures (see the module's docstring) of one closed phase's records (a records frame,
    :func:`loadgen.analysis.metrics.records_frame`); ``end``: the phase's end, or the run's when it stopped first."""
    asked = plan.concurrency
    sent, done = df["sent"].to_numpy(), df["done"].to_numpy()
    keep = np.isfinite(sent) & np.isfinite(done)
    # the columns the per-user figures read, not a copy of every column of every request
    users = df.loc[keep & (df["user"].to_numpy() >= 0), ["worker", "user", "scheduled", "sent", "done", "turn"]]
    conversations = bool((df["session"] >= 0).any())
    start, gap = plan.start, None
    every_user = plan.max_requests is None or plan.max_requests >= asked
    if not users.empty:
        per_user = users.groupby(["worker", "user"])
        if per_user.ngroups >= asked:
            start = float(per_user["sent"].min().max())
        end = min(end, float(per_user["done"].max().min()))
        g = _gaps(users)
        gap = Gap(n=int(g.size), p50=nearest_rank(g, 50), p99=nearest_rank(g, 99)) if g.size else None
    elif keep.sum() >= asked:  # no user column: the asked-th send of the phase
        start = float(np.sort(sent[keep])[asked - 1])
    out = ClosedLoop(asked=asked, requests_in_flight=None, sessions_in_progress=None, held=None,
                     measure="sessions" if conversations else "requests", fraction=None, window=[start, end],
                     gap=gap, limited=False)
    if end <= start or asked <= 0:
        return out
    out.requests_in_flight = _time_average(sent[keep], done[keep], start, end)
    if conversations:
        turns = df[keep & (df["session"].to_numpy() >= 0)]
        s = turns.groupby("session").agg(first=("sent", "min"), last=("done", "max"))
        out.sessions_in_progress = _time_average(s["first"].to_numpy(), s["last"].to_numpy(), start, end)
    out.held = out.sessions_in_progress if conversations else out.requests_in_flight
    out.fraction = out.held / asked
    out.limited = bool(plan.recorded and every_user and out.fraction < HELD_MIN)
    return out


def held_share(fraction: float) -> str:
    """A held fraction as a whole percentage, '18%'; just below ``HELD_MIN``, rounded down with a decimal
    ('94.9%', not '95%': a share shown as the threshold must not read as having met it)."""
    text = f"{fraction:.0%}"
    if fraction < HELD_MIN <= round(fraction, 2):
        text = f"{math.floor(fraction * 1000) / 10:.1f}%"
    return text


def held_text(phase: str, cl: ClosedLoop | ShortPhase) -> str:
    """'closed loop held 5.9 of 32 in flight (18%) in phase steady' (sessions: 'sessions in progress')."""
    what = "sessions in progress" if cl.measure == "sessions" else "in flight"
    frac = cl.fraction
    share = f" ({held_share(frac)})" if frac is not None and not math.isnan(frac) else ""
    return f"closed loop held {cl.held:.1f} of {cl.asked} {what}{share} in phase {phase}"
