"""summary.json: a target's summary, and its blocks besides the scopes (the time series, spikes and recovery, a
headroom step, conversations, the host, the generator, tokens, a trace replay, failures, the pre-flight). Part of
:mod:`loadgen.records.results`."""

from __future__ import annotations

from typing import Any

from loadgen.records.result_base import Num, ResultFile, ResultModel
from loadgen.records.summary_scope import MetricStats, Percentile, Scope, ShortPhase, SloResult, Spread
from loadgen.records.summary_telemetry import TelemetrySummary


class RecoveryWindows(ResultModel):
    """The sliding windows of a recovery: each window's start (seconds from the run's start) and its p99."""

    start: list[Num] | None = None
    p99: list[Num] | None = None


class Recovery(ResultModel):
    """How long the latency took to get back under its objective after a spike (``windows``: the sliding p99s)."""

    spike: str | None = None
    phase: str | None = None
    threshold: Num = None
    window_s: Num = None
    step_s: Num = None
    window_requests: Num = None
    seconds: Num = None
    recovered: bool | None = None
    measured: bool | None = None
    windows: RecoveryWindows | None = None


class BurstTail(ResultModel):
    """A spike's p99 (``stat``) against its baseline's, and their ratio."""

    stat: str | None = None
    spike: Percentile | None = None
    baseline: Percentile | None = None
    ratio: Percentile | None = None
    interval_needs: int | None = None


class InFlight(ResultModel):
    """Requests in flight around a spike: the peak, the baseline's peak, the time to drain back to it."""

    peak: Num = None
    baseline_peak: Num = None
    drain_s: Num = None


class Burst(ResultModel):
    """One spike of the run: its phase, the phases before and after it, its tail and its recovery."""

    spike: str | None = None
    spike_qps: Num = None
    start: Num = None
    end: Num = None
    after: str | None = None
    after_end: Num = None
    baseline: str | None = None
    baseline_qps: Num = None
    tail: BurstTail | None = None
    in_flight: InFlight | None = None
    recovery: Recovery | None = None


class HeadroomLevel(ResultModel):
    """One side of a headroom comparison: its phase, rate (and share of the expected rate), p99."""

    phase: str | None = None
    qps: Num = None
    share: Num = None
    p99: Percentile | None = None


class HeadroomObjective(ResultModel):
    """An SLO scoped to one of the headroom's phases (``slo``: its index in the summary's ``slo``)."""

    slo: int | None = None
    expr: str | None = None
    phase: str | None = None
    passed: bool | None = None


class HeadroomCapacity(ResultModel):
    """Where the high phase sits on a capacity search's curve (``rundir``: the search)."""

    rundir: str | None = None
    knee_qps: Num = None
    max_sustainable_qps: Num = None
    first_failing_qps: Num = None
    share_of_knee: Num = None
    share_of_sustainable: Num = None


class Headroom(ResultModel):
    """A load step above the expected rate: p99 at the base and high phases, their ratio, the objectives."""

    base: HeadroomLevel | None = None
    high: HeadroomLevel | None = None
    ratio: Percentile | None = None
    interval_needs: int | None = None
    objectives: list[HeadroomObjective] | None = None
    holds: bool | None = None
    holds_at_base: bool | None = None
    capacity: HeadroomCapacity | None = None


class Turn(ResultModel):
    """One turn index of a conversation run: its counts, latency and TTFT, and the mean prompt."""

    turn: int | None = None
    count: int | None = None
    ok: int | None = None
    error_rate: Num = None
    latency: MetricStats | None = None
    ttft: MetricStats | None = None
    prompt_tokens_mean: Num = None


class Conversations(ResultModel):
    """A conversation run: its sessions, turns a session, and the statistics of each turn index."""

    sessions: int | None = None
    turns_per_session: Spread | None = None
    ended_by_failure: int | None = None
    by_turn: list[Turn] | None = None


class Timeseries(ResultModel):
    """The run in bins of ``step_s`` seconds from its start (``t``: each bin's start): counts, latency p50/p99
    of the requests completed in it, requests in flight at its end (``in_flight``) and the most at any moment of it
    (``in_flight_peak``), and errors by class."""

    t: list[Num] | None = None
    step_s: Num = None
    completed: list[Num] | None = None
    ok: list[Num] | None = None
    sent: list[Num] | None = None
    errors: dict[str, list[Num]] | None = None
    latency_p50: list[Num] | None = None
    latency_p99: list[Num] | None = None
    in_flight: list[Num] | None = None
    target_qps: list[Num] | None = None
    in_flight_peak: list[Num] | None = None


class HostTree(ResultModel):
    """One process tree over a phase (host.csv's source: ``server``, ``latbench``): its CPU seconds and the seconds
    it waited for a CPU, the CPUs it kept busy, its wait share (of the time it had work), the mean wait before each
    run on a CPU (ms), the seconds a cgroup throttled it, the most CPUs and threads it had."""

    cpu_s: Num = None
    wait_s: Num = None
    busy: Num = None
    wait_share: Num = None
    wait_per_run_ms: Num = None
    throttled_s: Num = None
    cpus: Num = None
    threads: Num = None


class HostPhase(ResultModel):
    """The host over one phase (run seconds ``start``..``end``): each process tree, the host's CPU steal share
    and its highest load average and runnable count."""

    start: Num = None
    end: Num = None
    recorded: bool | None = None
    processes: dict[str, HostTree | None] | None = None
    steal_share: Num = None
    load1_max: Num = None
    runnable_max: Num = None


class Contended(ResultModel):
    """A recorded phase in which the judged process tree waited for a CPU over the limit: the run is invalid."""

    phase: str | None = None
    source: str | None = None
    label: str | None = None
    wait_share: Num = None
    busy: Num = None
    #: set where the tree was nearly idle (under ``min_busy``): its mean wait for a CPU each time it woke, judged
    wait_per_run_ms: Num = None


class HostSummary(ResultModel):
    """The host during the run: whether it was measured, which process tree is judged, the wait share limit
    (``phases``: per phase, what each tree waited; ``contended``: the phases over the limit)."""

    measured: bool | None = None
    note: str | None = None
    judged: str | None = None
    labels: dict[str, str] | None = None
    wait_share_limit: Num = None
    min_busy: Num = None
    wait_per_run_limit_ms: Num = None
    phases: dict[str, HostPhase] | None = None
    contended: list[Contended] | None = None


class TokenInfo(ResultModel):
    """How a target's tokens were counted: the tokenizer (``server``: the target's /tokenize; none: 4 characters
    a token) and the special tokens it adds."""

    tokenizer: str | None = None
    special_tokens: list[str] | None = None


class Trace(ResultModel):
    """A trace replay: the slice of the trace (its first request ``start_s`` into the trace, ``span_s`` long), the
    speed, the model length and what was clipped to fit it, the tokens sent, and the prefix blocks of
    ``block_tokens`` tokens the requests share."""

    file: str | None = None
    requests: int | None = None
    trace_requests: int | None = None
    speed: Num = None
    start_s: Num = None
    span_s: Num = None
    block_tokens: int | None = None
    too_long: str | None = None
    max_model_len: int | None = None
    max_model_len_source: str | None = None
    max_input_tokens: int | None = None
    added_tokens: int | None = None
    clipped: int | None = None
    clipped_input_tokens: int | None = None
    clipped_output_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    blocks: int | None = None
    distinct_blocks: int | None = None
    shared_blocks: int | None = None
    block_reuse: Num = None


class Generator(ResultModel):
    """A summary's ``generator``: whether latbench itself kept up (send lag, its CPU, closed-loop sessions short of
    what was asked), and how it read arrival times (``receive_stamps``)."""

    send_lag_p99: Num = None
    send_lag_threshold: Num = None
    cpu_utilization: Num = None
    lagging: bool | None = None
    cpu_saturated: bool | None = None
    closed_loop_short: list[ShortPhase] | None = None
    receive_stamps: str | None = None


class FailureGroup(ResultModel):
    """Failed requests of one error class and HTTP status (0: none)."""

    error: str | None = None
    status: int | None = None
    count: int | None = None


class Failures(ResultModel):
    """A target's failed requests (aborted ones not counted): how many, the commonest classes and statuses (up to
    five, commonest first), and the first failure as the engine kept it (its class, status, first bytes)."""

    count: int | None = None
    by_status: list[FailureGroup] | None = None
    example: dict[str, Any] | None = None


class ServerExited(ResultModel):
    """A managed server that exited during the run: what it was, its exit code, when (seconds into the run, the
    phase) and a sentence saying so."""

    what: str | None = None
    code: int | None = None
    t: Num = None
    phase: str | None = None
    text: str | None = None


class StateReset(ResultModel):
    """Server state emptied before a run (``target.reset``): what, at which engine and endpoint (its URL without
    userinfo or query), when (``at``: wall-clock seconds since the epoch; ``seconds``: how long the call took), the
    HTTP status, whether it was done, and when not, why (``reason``); ``text``: the sentence the summary shows."""

    what: str | None = None
    done: bool | None = None
    engine: str | None = None
    found_by: str | None = None
    url: str | None = None
    status: int | None = None
    at: Num = None
    seconds: Num = None
    reason: str | None = None
    text: str | None = None


class Preflight(ResultModel):
    """What the check of a target before its load found (``ok`` None and ``skipped``: not checked): where it was
    reached, the problem that stopped the run (of ``kind``), notes, the models listed and the one used, whether the
    minimal request was sent, and the seconds it all took."""

    ok: bool | None = None
    url: str | None = None
    problem: str | None = None
    kind: str | None = None
    notes: list[str] | None = None
    models: list[str] | None = None
    model: str | None = None
    generated: bool | None = None
    seconds: Num = None
    skipped: bool | None = None


class Summary(ResultFile):
    """A target's summary.json: per scope (overall and each phase), with the generator's health, errors, SLOs."""

    scenario: str | None = None
    target: str | None = None
    complete: bool | None = None
    failed_fast: str | None = None
    notes: list[Any] | None = None
    duration_s: Num = None
    generator: Generator | None = None
    generator_limited: bool | None = None
    error_classes: list[str] | None = None
    tokens: TokenInfo | None = None
    overall: Scope | None = None
    phases: dict[str, Scope | None] | None = None
    timeseries: Timeseries | None = None
    recovery: list[Recovery] | None = None
    conversations: Conversations | None = None
    slo: list[SloResult] | None = None
    passed: bool | None = None
    burst: list[Burst] | None = None
    headroom: Headroom | None = None
    model: str | None = None
    engine: str | None = None
    lost_workers: list[Any] | None = None
    host: HostSummary | None = None
    telemetry: TelemetrySummary | None = None
    run_name: str | None = None
    failures: Failures | None = None
    preflight: Preflight | None = None
    trace: Trace | None = None
    server_exit: ServerExited | None = None
    reset: StateReset | None = None
    mode: str | None = None

    def scopes(self) -> list[tuple[str, str, Scope]]:
        """(label, its path in the file, scope) of the overall scope and each phase, in run order."""
        out = [("overall", "overall", self.overall or Scope())]
        return out + [(name, f"phases/{name}", ph or Scope()) for name, ph in (self.phases or {}).items()]
