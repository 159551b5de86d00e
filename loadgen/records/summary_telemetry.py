"""summary.json's ``telemetry``: what the engine and the GPU said of themselves during the run, per phase, beside
the client's figures; the article's checklist answered; and, for a spike or a load step, the server-side quantity
that moved most. Part of :mod:`loadgen.records.results`.

Every figure names its ``source``: the engine's own metric name (``vllm:num_requests_waiting``), or a share of two
(``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``). Units are the metric registry's: seconds,
fractions 0-1, bytes, watts, MHz, requests; ``time.csv``-shaped series of each quantity are in the target's
``telemetry.csv``.
"""

from __future__ import annotations

from typing import Literal

from loadgen.records.result_base import Num, ResultModel


class TelemetryStat(ResultModel):
    """One quantity over one phase, read from ``source`` (a ``kind`` of way: gauge, histogram, counter, share, ratio,
    gshare): ``mean`` (a gauge's mean over its scrapes, a histogram's mean, a counter's rate per second, a share),
    ``max`` (gauges), ``p50`` / ``p99`` (a histogram's, interpolated within its buckets), ``count`` (a histogram's
    observations in the phase), ``samples`` (a gauge's scrapes in the phase)."""

    source: str | None = None
    kind: str | None = None
    unit: str | None = None
    mean: Num = None
    max: Num = None
    p50: Num = None
    p99: Num = None
    count: Num = None
    samples: int | None = None


class TelemetryPhase(ResultModel):
    """The server-side quantities over one phase (run seconds ``start``..``end``), by registry name
    (``server.queue_waiting``...); ``energy_j``: GPU energy over the phase (power integrated, joules),
    ``output_tokens``: the client's output tokens of the phase's successful requests, ``energy_per_token_j``."""

    start: Num = None
    end: Num = None
    recorded: bool | None = None
    quantities: dict[str, TelemetryStat] | None = None
    energy_j: Num = None
    output_tokens: Num = None
    energy_per_token_j: Num = None


class ChecklistItem(ResultModel):
    """One line of the article's checklist: ``status`` met | not_met | not_measurable, the ``figure`` it was judged
    on (``unit``), the rule (``target``), where the figure came from (``source``: a phase and a metric name) and a
    ``text`` for people."""

    name: str
    status: Literal["met", "not_met", "not_measurable"]
    figure: Num = None
    unit: str | None = None
    target: str | None = None
    source: str | None = None
    phase: str | None = None
    text: str | None = None


class TelemetryMove(ResultModel):
    """The server-side quantity that moved most from a ``baseline`` phase to a ``phase`` (a spike, a step above the
    expected rate): its figure (``stat``) in each, and where it came from."""

    phase: str
    baseline: str
    quantity: str
    source: str | None = None
    stat: str | None = None
    unit: str | None = None
    before: Num = None
    after: Num = None


class TelemetrySummary(ResultModel):
    """The target's own telemetry: ``engine`` (the adapter its /metrics was read with: vllm, sglang, tgi, triton,
    refserver; ``engine_chosen``: auto or scenario), ``gpu`` (nvml, dcgm, or the engine's own GPU metrics), the
    ``phases`` and ``overall`` (the recorded phases together), the ``checklist``, the ``moves`` of spikes and
    steps, and ``notes`` (what could not be read, counter resets, a /metrics that stopped answering)."""

    measured: bool | None = None
    engine: str | None = None
    engine_label: str | None = None
    engine_chosen: str | None = None
    gpu: str | None = None
    scrapes: int | None = None
    gpu_samples: int | None = None
    phases: dict[str, TelemetryPhase] | None = None
    overall: TelemetryPhase | None = None
    checklist: list[ChecklistItem] | None = None
    moves: list[TelemetryMove] | None = None
    batch_timeout_s: Num = None
    notes: list[str] | None = None
