"""Which runs a scenario makes, in which order: one model for repeated runs and cold-start studies.

A scenario runs each target once, or several times from a fresh start of its server: ``repeat.runs``
(between-run statistics: folders ``<target>-rep{k}``, meta.json entries with ``group`` and ``repetition``)
or ``load.starts`` (a cold-start study: folders ``<target>-start{k}``, entries with ``group`` and ``start``;
only targets latbench starts itself have a start to study). Runs are interleaved across targets, round by
round (A1 B1 A2 B2 ...), so a machine that drifts during the session drifts under every target alike.

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.scenario.model import Target


@dataclass(frozen=True)
class Slot:
    """One run of one target: its position in the scenario, its name in the RunDir, and what it repeats."""

    index: int  # the target's position in the scenario (the Locust master re-reads the file by it)
    target: Target
    name: str  # its name and folder in the RunDir
    group: str | None = None  # the target it is one run of, when there are several
    start: int | None = None  # cold-start studies: which fresh start (1-based)
    repetition: int | None = None  # repeated runs: which repetition (1-based)

    def meta_fields(self) -> dict:
        """What meta.json's entry for this run says about the repetition it is (empty for a single run)."""
        if self.group is None:
            return {}
        key, k = ("repetition", self.repetition) if self.repetition is not None else ("start", self.start)
        return {"group": self.group, key: k}


def managed(target: Target) -> bool:
    """latbench starts this target itself (so each run can start it afresh)."""
    return target.reference is not None or target.command is not None


def plan_runs(targets: list[Target], starts: int = 1, repeats: int = 1) -> list[Slot]:
    """Every run of a scenario in the order it happens: round k holds each target's k-th run.

    ``repeats`` > 1 runs every target that many times; ``starts`` > 1 runs each managed target that many
    times (a plain URL has no fresh start to measure: it runs once). The two are one model: give one."""
    if starts > 1 and repeats > 1:
        raise ValueError("repeat.runs and load.starts both repeat the run: give one of them")
    rounds = max(starts, repeats, 1)
    out = []
    for k in range(1, rounds + 1):
        for index, t in enumerate(targets):
            if repeats > 1:
                out.append(Slot(index, t, f"{t.name}-rep{k}", t.name, repetition=k))
            elif starts > 1 and managed(t):
                out.append(Slot(index, t, f"{t.name}-start{k}", t.name, start=k))
            elif k == 1:
                out.append(Slot(index, t, t.name))
    return out
