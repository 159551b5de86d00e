"""A load-generating worker that died before it finished its share, as summary.json keeps it (``lost_workers``).

The engine that saw it die makes one :class:`LostWorker`; the summary holds its JSON; the verdict names it in
an ``interrupted`` reason for its target, and the reports show that reason. :meth:`LostWorker.sentence` is
the one way it is written for people (the engine's note and the verdict's reason read the same).
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LostWorker:
    """``during``: ``start-up`` (before the run began: nothing was sent) or ``run``. ``index``: the worker's
    ``k`` (None when it died before it got one); ``at``: run seconds when it was found dead; ``records``: how
    many of its records reached the RunDir; ``exit_code``: its process's (negative: the signal that killed it;
    None when unknown, e.g. a remote worker whose heartbeat stopped)."""

    label: str
    during: str
    index: int | None = None
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    at: float | None = None
    records: int = 0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "LostWorker":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})

    def sentence(self) -> str:
        """One sentence for people, e.g. ``Locust worker local-1 (index 1) died mid-run at 2.1 s (killed by
        SIGKILL); its 80 records received are kept, its later ones are missing``."""
        how = exit_text(self.exit_code)
        if self.during == "start-up":
            return (f"Locust worker {self.label}" + (f" (pid {self.pid})" if self.pid else "")
                    + f" exited during start-up ({how}); nothing was sent")
        at = f" at {self.at:.1f} s" if self.at is not None else ""
        return (f"Locust worker {self.label}" + (f" (index {self.index})" if self.index is not None else "")
                + f" died mid-run{at} ({how}); its {self.records} records received are kept, its later ones "
                "are missing")


def exit_text(code: int | None) -> str:
    """``exit code 2``, ``killed by SIGKILL`` (a negative return code, as Popen gives it), or, unknown, that
    its heartbeat stopped."""
    if code is None:
        return "its heartbeat stopped"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
