"""meta.json: the run, its targets in run order (each with its server and what its run measured), its verdict.
Part of :mod:`loadgen.records.results`."""

from __future__ import annotations

from typing import Any

from loadgen.records.result_base import Num, ResultFile, ResultModel
from loadgen.records.summary_file import Preflight, StateReset


class ServerInfo(ResultModel):
    """What a target's ``server`` entry says of the server: a managed reference server's settings (arch,
    backend, model...) plus its ``listen_s`` / ``ready_s``, or an external one's scraped facts. One shape; a
    field a kind of server does not have is absent."""

    arch: str | None = None
    backend: str | None = None
    model: str | None = None
    device: str | None = None
    host: str | None = None
    port: int | None = None
    listen_s: Num = None
    ready_s: Num = None


class PageCache(ResultModel):
    """A fresh start's weights file dropped from the OS page cache just before it (``cold``: at most
    :data:`~loadgen.analysis.coldstart.COLD_RESIDENT_MAX` of it still cached after; None: latbench cannot tell,
    ``reason`` says why): the shares (0..1) cached before and after, how, and what failed."""

    cold: bool | None = None
    weights: str | None = None
    reason: str | None = None
    bytes: int | None = None
    evicted: bool | None = None
    resident_before: Num = None
    resident_after: Num = None
    method: str | None = None
    error: str | None = None


class WeightsPrepared(ResultModel):
    """The weights file the starts of a cold-start study read, written before the first (``generated_s``: how
    long drawing it took; None: it existed), or why it could not be (``error``)."""

    path: str | None = None
    bytes: int | None = None
    generated_s: Num = None
    error: str | None = None


class MetaTarget(ResultModel):
    """One target of meta.json: its name and folder (``dir``, a folder of the RunDir), where it was reached,
    and what its run measured."""

    name: str
    dir: str
    url: str | None = None
    model: str | None = None
    server: ServerInfo | None = None
    preflight: Preflight | None = None
    reset: StateReset | None = None
    wall_start: Num = None
    t0_monotonic: Num = None
    duration_s: Num = None
    requests: int | None = None
    server_log: str | None = None
    group: str | None = None
    repetition: int | None = None
    start: int | None = None
    cold: PageCache | None = None
    weights_prepared: WeightsPrepared | None = None
    qps: Num = None
    search: int | None = None
    bracket: list[Num] | None = None


class CapacityRef(ResultModel):
    """A capacity search a run was given (``--capacity RUNDIR``): its folder's name, the target and objectives it
    searched, and what it found (req/s)."""

    rundir: str | None = None
    target: str | None = None
    slo: list[str] | None = None
    knee_qps: Num = None
    max_sustainable_qps: Num = None
    first_failing_qps: Num = None


class MetaWatch(ResultModel):
    """A watch's settings as meta.json holds them: its probe rate (req/s), window and rotation (seconds), the
    segments kept, how long it ran (None: until stopped), and where its /metrics was served."""

    qps: Num = None
    window_s: Num = None
    rotate_every_s: Num = None
    keep: int | None = None
    duration_s: Num = None
    metrics_url: str | None = None


class Meta(ResultFile):
    """meta.json: the run's version, engine, host and start time, its targets in run order, its verdict."""

    latbench_version: str | None = None
    engine: str | None = None
    preflight: bool | None = None
    host: str | None = None
    platform: str | None = None
    python: str | None = None
    started: str | None = None
    scenario: str | None = None
    targets: list[MetaTarget] = []
    complete: bool | None = None
    exit_code: int | None = None
    verdict: dict[str, Any] | None = None
    capacity: CapacityRef | list[Num] | None = None  # a run's --capacity, or a capacity search's bracket
    repeat: dict[str, Any] | None = None
    kind: str | None = None
    mode: str | None = None
    watch: MetaWatch | None = None
