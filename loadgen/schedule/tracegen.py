"""Synthetic request traces in Mooncake's format: arrival times from latbench's own arrival processes, lengths
from normal distributions, and shared prefixes as hash ids.

**Prefixes.** ``groups`` shared prefixes (system prompts, documents) of ``prefix_tokens`` tokens each; a share
``prefix_share`` of the requests opens with one of them, drawn uniformly (or Zipf-like with ``zipf`` > 0: group
g drawn with weight 1 / (g + 1)^zipf). A request's ``input_length`` is its group's prefix plus its own part
(drawn from ``input_tokens``); requests without a group are their own part alone.

**Hash ids** follow Mooncake: block k of a prompt is tokens ``[k*B, (k+1)*B)``, and its id names the whole prompt
up to the block's end, so an id recurs only where two prompts agree on everything before and in it: the group's
whole blocks are the group's ids; every other block (a request's own, or the block where a prefix that is not a
whole number of blocks meets the request's own text) gets an id of its own. Ids are numbered from 0 in order
of first use.

**Times** are in whole milliseconds (as Mooncake's), from the arrival process of the seeded schedule
(:func:`loadgen.schedule.arrivals.arrivals`): ``poisson``, ``gamma`` (``burstiness``) or ``constant`` at ``qps``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from loadgen.scenario.model import TokenDist
from loadgen.scenario.prompts import draw_tokens
from loadgen.schedule.arrivals import PhasePlan, arrivals

__all__ = ["generate_trace", "write_trace"]


def _times_ms(n: int, qps: float, arrival: str, burstiness: float, seed: int) -> np.ndarray:
    horizon = n / qps * 4 + 60.0  # long enough for n arrivals of any of the processes, at any seed
    plan = PhasePlan(index=0, name="trace", start=0.0, end=horizon, rate_start=qps, rate_end=qps, arrival=arrival,
                     max_requests=n)
    times = np.concatenate(list(arrivals(plan, seed, burstiness)) or [np.zeros(0)])
    if len(times) < n:
        raise ValueError(f"the arrival process gave {len(times)} of {n} requests within {horizon:g} s")
    return np.rint(times[:n] * 1000.0)


def generate_trace(n: int, qps: float, *, input_tokens: TokenDist, output_tokens: TokenDist,
                   arrival: str = "poisson", burstiness: float = 1.0, groups: int = 8, prefix_tokens: int = 1024,
                   prefix_share: float = 1.0, zipf: float = 0.0, block_tokens: int = 512,
                   seed: int = 0) -> list[dict]:
    """``n`` requests, each ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}`` (see the module's
    docstring). ``input_tokens`` is each request's own part, after its group's prefix."""
    if n < 1 or qps <= 0 or block_tokens < 1 or groups < 0 or prefix_tokens < 0 or not 0 <= prefix_share <= 1:
        raise ValueError("expected n >= 1, qps > 0, block_tokens >= 1, groups >= 0, prefix_tokens >= 0 and "
                         "0 <= prefix_share <= 1")
    rng = np.random.default_rng([seed, 0x7EACE])
    times = _times_ms(n, qps, arrival, burstiness, seed)
    own = draw_tokens(input_tokens, n, rng)
    out = draw_tokens(output_tokens, n, rng)
    if groups and prefix_tokens:
        weights = 1.0 / np.arange(1, groups + 1) ** zipf
        group = rng.choice(groups, size=n, p=weights / weights.sum())
        group[rng.random(n) >= prefix_share] = -1
    else:
        group = np.full(n, -1)
    whole = prefix_tokens // block_tokens  # blocks a group's prefix fills: the only ones requests share
    group_ids: dict[int, list[int]] = {}
    next_id = 0
    rows = []
    for i in range(n):
        g = int(group[i])
        length = int(own[i]) + (prefix_tokens if g >= 0 else 0)
        blocks = math.ceil(length / block_tokens)
        ids: list[int] = []
        if g >= 0:
            if g not in group_ids:
                group_ids[g] = list(range(next_id, next_id + whole))
                next_id += whole
            ids = group_ids[g]  # the request's own part follows: it has more blocks than the prefix fills
        fresh = blocks - len(ids)
        ids = ids + list(range(next_id, next_id + fresh))
        next_id += fresh
        rows.append({"timestamp": int(times[i]), "input_length": length, "output_length": int(out[i]),
                     "hash_ids": ids})
    return rows


def write_trace(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` as JSON lines (Mooncake's format), or as CSV when ``path`` ends in ``.csv`` (hash ids
    separated by spaces)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["timestamp", "input_length", "output_length", "hash_ids"])
            for r in rows:
                w.writerow([r["timestamp"], r["input_length"], r["output_length"], " ".join(map(str, r["hash_ids"]))])
    else:
        with path.open("w") as f:
            for r in rows:
                f.write(json.dumps(r, separators=(", ", ": ")) + "\n")
    return path
