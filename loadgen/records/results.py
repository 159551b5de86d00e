"""The result files of a RunDir as typed models (pydantic v2): what summary.json, metrics.json, meta.json,
repeats.json, cold_start.json, capacity.json, regression.json and watch.json hold.

Each model names the fields that readers use; every model allows extra keys, so a file written by an older
latbench (fewer keys) or a newer one (more keys) still reads, and a key that a writer adds before a model names
it is kept, not dropped. Analysis may build a plain dict; the RunDir validates it into the file's model at the
write (:func:`loadgen.records.rundir.write_result`), so what is written is what the model allows, and the JSON
Schemas of ``latbench schema --results`` (and the files under ``schemas/``) are generated from these models.

A model dumps only the keys that were given (``exclude_unset``): validating a dict and dumping it gives the same
JSON back. Numbers are as :func:`loadgen.units.json_num` writes them: a float, an int, null, or the strings
``"inf"`` / ``"-inf"``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from loadgen.records.definitions import SCHEMA_VERSION

#: A number as a result file carries it (json_num: NaN is null, an infinity is a string).
Num = int | float | Literal["inf", "-inf"] | None


class ResultModel(BaseModel):
    """A JSON object of a result file: named fields typed, any other key kept as it is."""

    model_config = ConfigDict(extra="allow")
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler):
        # pydantic dumps named fields first, extras after; the file keeps the order its writer gave the keys
        obj = handler(data)
        if isinstance(data, dict):
            obj._order = [str(k) for k in data]
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        # a key set after construction is written after the ones given, in the order they were set
        super().__setattr__(name, value)
        if not name.startswith("_") and name not in self._order:
            self._order.append(name)

    def to_json(self) -> dict[str, Any]:
        """The object as written: the keys it was given (named or extra), in the order given, nothing added by
        defaults (a key set afterwards comes last, in the order set)."""
        given = self.model_fields_set | set(self.__pydantic_extra__ or ())
        keys = [k for k in dict.fromkeys([*self._order, *sorted(given)]) if k in given]
        return {k: _plain(getattr(self, k)) for k in keys}


def _plain(v: Any) -> Any:
    if isinstance(v, ResultModel):
        return v.to_json()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


class ResultFile(ResultModel):
    """A whole result file: every one carries ``schema_version`` (absent from files written before 0.2)."""

    schema_version: int = SCHEMA_VERSION


# --- summary.json ---------------------------------------------------------------------------------------------

class Percentile(ResultModel):
    """One percentile of a metric (or a ratio of two): its value and its confidence interval; ``n`` where the
    percentile is of a sample of its own (a burst's tail)."""

    value: Num = None
    ci: list[Num] | None = None
    too_few_samples: bool | None = None
    n: int | None = None


class MetricStats(ResultModel):
    """One metric over one scope: sample count, mean, extremes and percentiles (``p50``, ``p99``...)."""

    n: int | None = None
    mean: Num = None
    min: Num = None
    max: Num = None
    percentiles: dict[str, Percentile | None] | None = None

    def pct(self, p: str) -> Percentile:
        """Percentile ``p`` ('p99'): an empty one when it was not computed."""
        return (self.percentiles or {}).get(p) or Percentile()

    def stat(self, stat: str) -> float | None:
        """Statistic ``stat`` ('mean', 'min', 'max', 'p99', any pNN) as a number ('inf' as infinity): what
        :func:`loadgen.analysis.stats.stat_value` reads from the JSON."""
        v = getattr(self, stat) if stat in ("mean", "min", "max") else self.pct(stat).value
        return math.inf if v == "inf" else v


class Spread(ResultModel):
    """The least, mean and most of a count (tokens added a request, turns a session)."""

    min: Num = None
    mean: Num = None
    max: Num = None


class UsageVsCounted(ResultModel):
    """How often the server's usage agreed with latbench's own token count (``min_diff``/``max_diff``: its usage
    less latbench's count, in tokens)."""

    n: int | None = None
    equal: int | None = None
    min_diff: int | None = None
    max_diff: int | None = None


class ScopeTokens(ResultModel):
    """A scope's token counts: successful requests by how their prompt and output tokens were counted, the mean
    prompt, what the server added to a request, how its usage agrees with latbench's count."""

    prompt_tokens_source: dict[str, int] | None = None
    output_tokens_source: dict[str, int] | None = None
    input_tokens_mean: Num = None
    added_tokens: Spread | None = None
    usage_vs_counted: UsageVsCounted | None = None


class Chunks(ResultModel):
    """How many tokens the chunks of successful streams carried after their first, and how that is known
    (``sources``: streams per ``chunk_tokens_source``)."""

    tokens_per_chunk: Num = None
    multi_token_fraction: Num = None
    sources: dict[str, int] | None = None


class Reasoning(ResultModel):
    """Reasoning tokens of successful requests: how many requests reasoned, their tokens in all and a request."""

    requests: int | None = None
    tokens: int | None = None
    tokens_mean: Num = None


class Gap(ResultModel):
    """The client's own gap between an answer and the next request of its user (seconds)."""

    n: int | None = None
    p50: Num = None
    p99: Num = None


class ClosedLoop(ResultModel):
    """A closed-loop phase: the concurrency asked and held (``measure``: of requests in flight, or of sessions in
    progress; over ``window``, run seconds), and the client's gap between an answer and the next request."""

    asked: Num = None
    requests_in_flight: Num = None
    sessions_in_progress: Num = None
    held: Num = None
    measure: str | None = None
    fraction: Num = None
    window: list[Num] | None = None
    gap: Gap | None = None
    limited: bool | None = None


class ShortPhase(ResultModel):
    """A closed-loop phase that held less of its concurrency than asked (the generator's ``closed_loop_short``)."""

    phase: str | None = None
    asked: Num = None
    held: Num = None
    fraction: Num = None
    measure: str | None = None


class Scope(ResultModel):
    """The whole run (``overall``) or one phase: counts, rates, and each metric's statistics."""

    start: Num = None
    end: Num = None
    duration_s: Num = None
    count: int | None = None
    ok: int | None = None
    errors: dict[str, int] | None = None
    error_rate: Num = None
    aborted: int | None = None
    aborted_rate: Num = None
    target_qps: Num = None
    sent_qps: Num = None
    achieved_qps: Num = None
    input_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    goodput: Any = None
    goodput_qps: Num = None
    chunks: Chunks | None = None
    reasoning: Reasoning | None = None
    output_tokens_per_s_per_user: MetricStats | None = None
    tokens: ScopeTokens | None = None
    metrics: dict[str, MetricStats | None] | None = None
    latency_errors_inf: dict[str, Percentile | None] | None = None
    recorded: bool | None = None
    concurrency: int | None = None
    closed_loop: ClosedLoop | None = None

    @property
    def is_recorded(self) -> bool:
        """Whether the phase's requests count (a warm-up's do not); the overall scope always does."""
        return self.recorded is not False

    def metric(self, name: str) -> MetricStats | None:
        """Metric ``name``'s statistics over this scope (None when it was not measured)."""
        return (self.metrics or {}).get(name)

    def value(self, name: str) -> Any:
        """The scope's own figure ``name`` ('error_rate', 'achieved_qps'...), a named field or a key the file had;
        None when it has none."""
        if name in type(self).model_fields:
            return getattr(self, name)
        return (self.__pydantic_extra__ or {}).get(name)


class SloResult(ResultModel):
    """One SLO as judged against the run: the value measured, its interval, whether it held (``applies``
    false: the SLO's scope did not run)."""

    expr: str | None = None
    metric: str | None = None
    stat: str | None = None
    op: str | None = None
    threshold: Num = None
    scope: str | None = None
    passed: bool | None = None
    applies: bool | None = None
    value: Num = None
    ci: list[Num] | None = None
    reason: str | None = None
    ci_sectioned: list[Num] | None = None  # a capacity step's: see loadgen.analysis.capacity


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
    of the requests completed in it, requests in flight at its end, and errors by class."""

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


class HostSummary(ResultModel):
    """The host during the run: whether it was measured, which process tree is judged, the wait share limit
    (``phases``: per phase, what each tree waited; ``contended``: the phases over the limit)."""

    measured: bool | None = None
    note: str | None = None
    judged: str | None = None
    labels: dict[str, str] | None = None
    wait_share_limit: Num = None
    min_busy: Num = None
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
    recovery: list[Any] | None = None
    conversations: Conversations | None = None
    slo: list[SloResult] | None = None
    passed: bool | None = None
    burst: list[Burst] | None = None
    headroom: Headroom | None = None
    model: str | None = None
    engine: str | None = None
    lost_workers: list[Any] | None = None
    host: HostSummary | None = None
    run_name: str | None = None
    failures: Failures | None = None
    preflight: Preflight | None = None
    trace: Trace | None = None
    server_exit: ServerExited | None = None
    mode: str | None = None

    def scopes(self) -> list[tuple[str, str, Scope]]:
        """(label, its path in the file, scope) of the overall scope and each phase, in run order."""
        out = [("overall", "overall", self.overall or Scope())]
        return out + [(name, f"phases/{name}", ph or Scope()) for name, ph in (self.phases or {}).items()]


# --- metrics.json ---------------------------------------------------------------------------------------------

class MetricDefinitions(ResultFile):
    """metrics.json: each metric's definition and unit, by name."""

    metrics: dict[str, Any] | None = None


# --- meta.json ------------------------------------------------------------------------------------------------

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
    watch: dict[str, Any] | None = None


# --- the other result files -----------------------------------------------------------------------------------

class RunStat(ResultModel):
    """One statistic over a repeated target's runs: each run's value (None: that run did not measure it), their
    median, and their between-run 95% interval around ``centre`` (the geometric mean on a ``log`` scale)."""

    values: list[Num] | None = None
    n: int | None = None
    median: Num = None
    centre: Num = None
    ci: list[Num] | None = None
    scale: str | None = None


class RepeatSlo(SloResult):
    """An SLO judged over a repeated target's runs (``judge``: median or upper): the value of each run, their
    between-run figures (as a :class:`RunStat`), and the basis of the judgement."""

    judge: str | None = None
    values: list[Num] | None = None
    median: Num = None
    centre: Num = None
    scale: str | None = None
    basis: str | None = None


class RepeatRun(ResultModel):
    """One run of a repeated target: its repetition, its folder, whether it ran and completed."""

    repetition: int | None = None
    dir: str | None = None
    ran: bool | None = None
    complete: bool | None = None


class RepeatTarget(ResultModel):
    """A repeated target: its runs, each statistic over them (by ``latency.p99``-style key), its SLOs."""

    runs: list[RepeatRun] | None = None
    stats: dict[str, RunStat | None] | None = None
    slo: list[RepeatSlo] | None = None
    passed: bool | None = None

    def stat(self, key: str) -> RunStat:
        """Statistic ``key`` over the runs (an empty one when it was not measured)."""
        return (self.stats or {}).get(key) or RunStat()


class Repeats(ResultFile):
    """repeats.json: between-run statistics of a repeated run, per target group."""

    runs: int | None = None
    judge: str | None = None
    confidence: Num = None
    method: str | None = None
    order: list[str] | None = None
    targets: dict[str, RepeatTarget] | None = None


class StartSpread(ResultModel):
    """One figure over an architecture's starts: how many starts measured it, their median and range."""

    n: int | None = None
    median: Num = None
    min: Num = None
    max: Num = None


class StartRow(ResultModel):
    """One fresh start: its number and target, time to listen and to ready, the server's model load, whether it
    was cold (and the page-cache check behind it), its first request, steady latency and warm-up (seconds), and
    the latency of each of its requests in send order (a failed one 'inf')."""

    start: int | None = None
    target: str | None = None
    listen_s: Num = None
    ready_s: Num = None
    model_load_s: Num = None
    cold: bool | None = None
    page_cache: PageCache | None = None
    first_latency_s: Num = None
    first_ttft_s: Num = None
    steady_latency_s: Num = None
    penalty_s: Num = None
    first_steady_request: int | None = None
    latencies_s: list[Num] | None = None


class ColdRules(ResultModel):
    """The rules a cold-start study applied: the page-cache share under which a start is cold, and how close to
    its steady latency a request is warm."""

    cold_resident_max: Num = None
    steady_within: Num = None


class WeightsFile(ResultModel):
    """The weights file an architecture's starts read."""

    path: str | None = None
    bytes: int | None = None


class StartGroup(ResultModel):
    """An architecture's fresh starts: each start's figures (``per_start``, and as lists), the median warm-up curve
    over them, the weights file and how it was prepared, how many starts were cold, and each figure's spread over
    the starts (``over_starts``, by figure name)."""

    starts: int | None = None
    listen_s: list[Num] | None = None
    ready_s: list[Num] | None = None
    first_latency_s: list[Num] | None = None
    first_ttft_s: list[Num] | None = None
    warmup_curve_s: list[Num] | None = None
    steady_latency_s: Num = None
    per_start: list[StartRow] | None = None
    weights: WeightsFile | None = None
    weights_prepared: WeightsPrepared | None = None
    cold_starts: int | None = None
    cold_unknown: int | None = None
    rules: ColdRules | None = None
    over_starts: dict[str, StartSpread] | None = None

    def spread(self, figure: str) -> StartSpread:
        """Figure ``figure``'s spread over the starts (an empty one when not computed)."""
        return (self.over_starts or {}).get(figure) or StartSpread()


class ColdStart(ResultFile):
    """cold_start.json: each architecture's starts, under ``groups`` (a file from before 0.2 was the groups
    itself; :meth:`from_file` reads either)."""

    groups: dict[str, StartGroup] | None = None

    @classmethod
    def from_file(cls, data: dict) -> "ColdStart":
        """cold_start.json as read: since 0.2 (``schema_version``) its groups are under ``groups``, before they
        were the file itself."""
        return cls.model_validate(data if "schema_version" in data else {"groups": data})


class CapacitySearch(ResultModel):
    """How a capacity search was run: its rate range and steps (req/s, seconds, the bracket's tolerance), and how
    long it took."""

    qps_min: Num = None
    qps_max: Num = None
    step_duration_s: Num = None
    warmup_s: Num = None
    tolerance: Num = None
    seconds: Num = None


class RepeatedSearch(ResultModel):
    """One search of a repeated capacity search (``latbench capacity --repeat``): its folder, bracket, knee, how
    many steps and seconds it took, whether it completed."""

    search: int | None = None
    dir: str | None = None
    bracket: list[Any] | None = None
    max_sustainable_qps: Num = None
    first_failing_qps: Num = None
    knee_qps: Num = None
    steps: int | None = None
    seconds: Num = None
    complete: bool | None = None


class CapacityStep(ResultModel):
    """One step of a capacity search: the rate offered and completed (req/s), its latency and TTFT (seconds) and
    error rate, whether it held and why not (``reasons``; ``inconclusive``: its intervals straddled an objective),
    its folder."""

    qps: Num = None
    passed: bool | None = None
    achieved_qps: Num = None
    latency_p50: Num = None
    latency_p99: Num = None
    ttft_p99: Num = None
    error_rate: Num = None
    stopped_early: bool | None = None
    reasons: list[str] | None = None
    dir: str | None = None
    inconclusive: bool | None = None
    unreachable: bool | None = None
    contended: str | None = None


class CapacityTarget(ResultModel):
    """The target a capacity search measured: its name, where it was reached, its model and server."""

    name: str | None = None
    url: str | None = None
    model: str | None = None
    server: ServerInfo | None = None


class SearchSpread(ResultModel):
    """How repeated capacity searches differ: the rate each held and the first it failed, over the searches (as a
    :class:`RunStat`), each search's bracket, the headroom over the expected rate at the median and at the
    interval's lower bound."""

    searches: int | None = None
    method: str | None = None
    held: RunStat | None = None
    failing: RunStat | None = None
    brackets: list[list[Num] | None] | None = None
    headroom: Num = None
    headroom_low: Num = None


class Capacity(ResultFile):
    """capacity.json: a capacity search's steps and what they found (or, for a repeated search, its searches
    and their spread)."""

    scenario: str | None = None
    target: CapacityTarget | None = None
    slo: list[str] | None = None
    knee_qps: Num = None
    max_sustainable_qps: Num = None
    first_failing_qps: Num = None
    expected_qps: Num = None
    headroom: Num = None
    limited_by_generator: bool | None = None
    complete: bool | None = None
    host_contended: str | None = None
    unreachable: bool | None = None
    search: CapacitySearch | None = None
    bracket: list[Num] | None = None
    steps: list[CapacityStep] | None = None
    repeats: int | None = None
    searches: list[RepeatedSearch] | None = None
    spread: SearchSpread | None = None
    server_exit: ServerExited | None = None


class Check(ResultModel):
    """One regression check of a target against the baseline: a percentile (``stat``) of a metric, or the error
    rate (``stat`` None), the baseline's and the current value, their ratio (or difference) with its interval,
    whether it is significant and whether it regressed; ``skipped`` says why it was not tested.

    Within-run checks bootstrap the requests (a 95% interval of the ratio); between-run ones (``method``) test the
    per-run values (``current_runs``, ``baseline_runs``) with Welch's t-test at ``alpha`` (0.05 over ``checks``),
    an interval at ``ci_level``."""

    metric: str | None = None
    stat: str | None = None
    method: str | None = None
    current_runs: list[Num] | None = None
    baseline_runs: list[Num] | None = None
    skipped: str | None = None
    baseline: Num = None
    current: Num = None
    ratio: Num = None
    difference: Num = None
    ci: list[Num] | None = None
    ci_level: Num = None
    p_value: Num = None
    alpha: Num = None
    checks: int | None = None
    df: Num = None
    test: str | None = None
    significant: bool | None = None
    regressed: bool | None = None


class RunCounts(ResultModel):
    """How many runs each side of a between-run comparison had."""

    current: int | None = None
    baseline: int | None = None


class Regression(ResultFile):
    """regression.json: a run compared with a baseline RunDir, per target (each a list of checks; ``methods``:
    within-run or between-run, by target)."""

    baseline: str | None = None
    max_regression: Num = None
    targets: dict[str, list[Check]] | None = None
    missing: list[str] | None = None
    notes: list[str] | None = None
    methods: dict[str, str] | None = None
    runs: dict[str, RunCounts] | None = None
    repeated: bool | None = None
    passed: bool | None = None


class WatchTarget(ResultModel):
    """One watched target of watch.json: requests by error class, the window's last judgement, and what the
    rotation of its records wrote, deleted and keeps on disk."""

    name: str | None = None
    requests: dict[str, int] | None = None
    window: dict[str, Any] | None = None
    rows_written: int | None = None
    rows_deleted: int | None = None
    segments_deleted: int | None = None
    rotations: int | None = None
    disk_bytes: int | None = None


class Watch(ResultFile):
    """watch.json: a watch's settings and what each watched target did."""

    settings: dict[str, Any] | None = None
    targets: list[WatchTarget] | None = None


#: Result file name -> its model (the names are loadgen.records.rundir's RESULT_FILES).
RESULT_MODELS: dict[str, type[ResultFile]] = {
    "summary.json": Summary,
    "metrics.json": MetricDefinitions,
    "meta.json": Meta,
    "repeats.json": Repeats,
    "cold_start.json": ColdStart,
    "capacity.json": Capacity,
    "regression.json": Regression,
    "watch.json": Watch,
}


def result_schemas() -> dict[str, dict]:
    """The JSON Schema of each result file, by file name (validation mode: what a reader may meet)."""
    return {name: {"$id": schema_file(name), **model.model_json_schema()} for name, model in RESULT_MODELS.items()}


def schema_file(name: str) -> str:
    """The file that holds result file ``name``'s schema in the repository's ``schemas/``: ``meta.schema.json``."""
    return name.removesuffix(".json") + ".schema.json"
