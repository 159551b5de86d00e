"""Conversations in the summary: the sessions, and latency and TTFT by turn index (``summary["conversations"]``).

A later turn resends a longer history, so its prefill is longer: TTFT by turn shows what the history costs
(and what a prefix cache saves). Over recorded phases; distributions over successful turns, as everywhere.

    sessions            sessions with a recorded turn
    turns_per_session   mean and max turns recorded per session
    ended_by_failure    sessions whose last recorded turn failed (an error ends a session)
    by_turn             per turn index: count, error_rate, latency and ttft (describe), prompt_tokens_mean

One idea at several stages, multi-turn conversations, so one file name: :mod:`loadgen.scenario.conversations` (the user
turns).
"""

from __future__ import annotations

import pandas as pd

from loadgen.analysis.stats import describe
from loadgen.records.results import Conversations, Spread, Turn

__all__ = ["TURN_PERCENTILES", "conversation_stats"]

TURN_PERCENTILES = (50.0, 90.0, 99.0)


def conversation_stats(df: pd.DataFrame) -> Conversations | None:
    """The conversations of a records frame (:func:`loadgen.analysis.metrics.records_frame`); None without any."""
    if "session" not in df or not (df["session"] >= 0).any():
        return None
    rec = df[df["recorded"] & (df["session"] >= 0) & ~df["aborted"]]
    if rec.empty:
        return Conversations(sessions=0, turns_per_session=None, ended_by_failure=0, by_turn=[])
    per = rec.sort_values(["session", "turn"]).groupby("session")
    counts = per.size()
    last_failed = per["failed"].last()
    by_turn = []
    for turn, g in rec.groupby("turn"):
        ok = g[g["ok"]]
        prompt = ok["prompt_tokens"][ok["prompt_tokens"] >= 0]
        by_turn.append(Turn(
            turn=int(turn),
            count=int(len(g)),
            ok=int(len(ok)),
            error_rate=float(g["failed"].mean()),
            latency=describe(ok["latency"].to_numpy(), TURN_PERCENTILES),
            ttft=describe(ok["ttft"].to_numpy(), TURN_PERCENTILES),
            prompt_tokens_mean=float(prompt.mean()) if len(prompt) else None,
        ))
    return Conversations(sessions=int(len(counts)),
                         turns_per_session=Spread(mean=float(counts.mean()), max=int(counts.max())),
                         ended_by_failure=int(last_failed.sum()),
                         by_turn=by_turn)
