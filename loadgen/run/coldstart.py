"""Making each fresh start of a cold-start study (``load.starts: N``) really cold.

For the bundled reference server, before the first start latbench has the server write its weights file
(``--prepare-weights``), so drawing the random weights is no part of any start; before every start it
drops that file from the OS page cache (:mod:`loadgen.run.pagecache`) and checks with ``mincore`` how much
of it is left there. A start counts as cold when at most
:data:`~loadgen.analysis.coldstart.COLD_RESIDENT_MAX` of the file's pages were cached as it began: its
model load read the disk. Where the platform cannot evict or cannot tell, ``cold`` is ``None``
(unknown); a ``command:`` target's files are unknown to latbench, so its starts are unknown too.

One idea at several stages, cold-start studies, so one file name: :mod:`loadgen.analysis.coldstart` (the study summed
up).
"""

from __future__ import annotations

import json
import subprocess

from loadgen.analysis.coldstart import COLD_RESIDENT_MAX
from loadgen.engine.lifeline import Lifeline
from loadgen.records.results import PageCache, WeightsPrepared
from loadgen.run.pagecache import evict
from loadgen.run.targets import reference_argv
from loadgen.scenario.model import Target

PREPARE_TIMEOUT_S = 600.0


def prepare_weights(target: Target) -> WeightsPrepared | None:
    """Have the reference server write the weights file a start of ``target`` will read (when missing).

    Returns its ``path``, ``bytes`` and ``generated_s`` (None when the file existed), or the ``error`` that kept
    the server from preparing it; None for a target latbench does not know the files of.
    """
    if target.reference is None:
        return None
    lifeline = Lifeline()  # it ends with latbench, SIGKILL included (loadgen.engine.lifeline)
    argv = reference_argv(target.reference) + ["--prepare-weights", "--parent-fd", str(lifeline.child_fd)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S,
                              pass_fds=lifeline.pass_fds)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return WeightsPrepared(error=f"{type(exc).__name__}: {exc}")
    finally:
        lifeline.cut()
    for line in proc.stdout.splitlines():
        if line.startswith("LATBENCH_WEIGHTS="):
            return WeightsPrepared.model_validate(json.loads(line.split("=", 1)[1]))
    return WeightsPrepared(error=(proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1])


def make_cold(weights: WeightsPrepared | None) -> PageCache:
    """Drop the weights file from the page cache right before a start; what happened, as data.

    ``cold``: True when at most COLD_RESIDENT_MAX of the file is cached afterwards (checked with mincore),
    False when more is, None when latbench cannot tell (no weights file known, no posix_fadvise/mincore).
    """
    if weights is None or weights.path is None:
        return PageCache(cold=None, weights=None, reason=(weights.error if weights else None) or "files unknown")
    ev = evict(weights.path)
    after = ev.resident_after
    cold = None if after is None else after <= COLD_RESIDENT_MAX
    return PageCache(cold=cold, weights=ev.path, bytes=ev.bytes, evicted=ev.evicted, resident_before=ev.resident_before,
                     resident_after=ev.resident_after, method=ev.method, error=ev.error)
