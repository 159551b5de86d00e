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


class Spread(ResultModel):
    """The least, mean and most of a count (tokens added a request, turns a session)."""

    min: Num = None
    mean: Num = None
    max: Num = None


class UsageVsCounted(ResultModel):
    """How often the server's usage agreed with latbench's own token count."""

    n: int | None = None
    equal: int | None = None


class ScopeTokens(ResultModel):
    """A scope's token counts: what the server added to a request, how its usage agrees with latbench's count."""

    added_tokens: Spread | None = None
    usage_vs_counted: UsageVsCounted | None = None


class Gap(ResultModel):
    """The client's own gap between an answer and the next request of its user (seconds)."""

    n: int | None = None
    p50: Num = None
    p99: Num = None


class ClosedLoop(ResultModel):
    """A closed-loop phase: the concurrency asked and held, and the client's gap between an answer and the next
    request."""

    asked: Num = None
    held: Num = None
    fraction: Num = None
    limited: bool | None = None
    requests_in_flight: Num = None
    sessions_in_progress: Num = None
    gap: Gap | None = None


class ImageSizeRow(ResultModel):
    """The requests of one image size (their images' pixels, summed): how many, and their TTFT and latency."""

    image_pixels: int | None = None
    n: int | None = None
    ttft: MetricStats | None = None
    latency: MetricStats | None = None


class ScopeImages(ResultModel):
    """A scope's requests that sent images (workload.images): how many, their images, mean pixels and bytes per
    request (known sizes: a URL's are not), and TTFT by image size."""

    requests: int | None = None
    images: int | None = None
    pixels_mean: Num = None
    bytes_mean: Num = None
    by_size: list[ImageSizeRow] | None = None


class ToolCountRow(ResultModel):
    """The requests offered one number of tools: how many, their TTFT and time to the first tool-call token."""

    tools: int | None = None
    n: int | None = None
    ttft: MetricStats | None = None
    ttftc: MetricStats | None = None


class ScopeToolCalls(ResultModel):
    """A scope's successful requests offered tools (workload.tools): how many called one (``tool_call_rate``),
    the calls, their argument tokens, and TTFT by the number of tools offered."""

    requests: int | None = None
    called: int | None = None
    tool_call_rate: Num = None
    calls: int | None = None
    argument_tokens: int | None = None
    argument_tokens_mean: Num = None
    by_tools: list[ToolCountRow] | None = None


class ScopeStructured(ResultModel):
    """A scope's answers checked against workload.response_format: how many, how many parsed as JSON, how many
    were checked against a schema and matched it, and the two rates."""

    checked: int | None = None
    json_valid: int | None = None
    json_valid_rate: Num = None
    schema_checked: int | None = None
    schema_valid: int | None = None
    schema_valid_rate: Num = None


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
    target_qps: Num = None
    sent_qps: Num = None
    achieved_qps: Num = None
    goodput: Any = None
    metrics: dict[str, MetricStats | None] | None = None
    recorded: bool | None = None
    aborted_rate: Num = None
    input_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    output_tokens_per_s_per_user: MetricStats | None = None
    goodput_qps: Num = None
    tokens: ScopeTokens | None = None
    closed_loop: ClosedLoop | None = None
    images: ScopeImages | None = None
    tool_calls: ScopeToolCalls | None = None
    tool_call_rate: Num = None
    structured: ScopeStructured | None = None
    json_valid_rate: Num = None
    schema_valid_rate: Num = None

    @property
    def is_recorded(self) -> bool:
        """Whether the phase's requests count (a warm-up's do not); the overall scope always does."""
        return self.recorded is not False

    def metric(self, name: str) -> MetricStats | None:
        """Metric ``name``'s statistics over this scope (None when it was not measured)."""
        return (self.metrics or {}).get(name)


class SloResult(ResultModel):
    """One SLO as judged against the run: the value measured, its interval, whether it held (``applies``
    false: the SLO's scope did not run)."""

    expr: str | None = None
    metric: str | None = None
    stat: str | None = None
    op: str | None = None
    passed: bool | None = None
    applies: bool | None = None
    value: Num = None
    ci: list[Num] | None = None
    reason: str | None = None


class RecoveryWindows(ResultModel):
    """The sliding windows of a recovery: each window's start (seconds from the run's start) and its p99."""

    start: list[Num] | None = None
    p99: list[Num] | None = None


class Recovery(ResultModel):
    """How long the latency took to get back under its objective after a spike (``windows``: the sliding p99s)."""

    phase: str | None = None
    measured: bool | None = None
    recovered: bool | None = None
    threshold: Num = None
    seconds: Num = None
    window_s: Num = None
    step_s: Num = None
    window_requests: Num = None
    windows: RecoveryWindows | None = None


class BurstTail(ResultModel):
    """A spike's p99 against its baseline's, and their ratio."""

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
    baseline: str | None = None
    after: str | None = None
    start: Num = None
    end: Num = None
    after_end: Num = None
    spike_qps: Num = None
    baseline_qps: Num = None
    recovery: Recovery | None = None
    tail: BurstTail | None = None
    in_flight: InFlight | None = None


class HeadroomLevel(ResultModel):
    """One side of a headroom comparison: its phase, rate (and share of the expected rate), p99."""

    phase: str | None = None
    qps: Num = None
    share: Num = None
    p99: Percentile | None = None


class HeadroomObjective(ResultModel):
    """An SLO scoped to one of the headroom's phases (``slo``: its index in the summary's ``slo``)."""

    expr: str | None = None
    phase: str | None = None
    passed: bool | None = None
    slo: int | None = None


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
    holds: bool | None = None
    holds_at_base: bool | None = None
    interval_needs: int | None = None
    objectives: list[HeadroomObjective] | None = None
    capacity: HeadroomCapacity | None = None


class Turn(ResultModel):
    """One turn index of a conversation run: its counts, latency and TTFT, and the mean prompt."""

    turn: int | None = None
    count: int | None = None
    ok: int | None = None
    error_rate: Num = None
    prompt_tokens_mean: Num = None
    latency: MetricStats | None = None
    ttft: MetricStats | None = None


class Conversations(ResultModel):
    """A conversation run: its sessions, turns a session, and the statistics of each turn index."""

    sessions: int | None = None
    ended_by_failure: int | None = None
    turns_per_session: Spread | None = None
    by_turn: list[Turn] | None = None


class Timeseries(ResultModel):
    """The run in bins of ``step_s`` seconds from its start (``t``: each bin's start): counts, latency p50/p99
    of the requests completed in it, the most requests in flight at any moment of it, and errors by class."""

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


class HostSummary(ResultModel):
    """The host during the run: whether it was measured, which process tree is judged, the wait share limit
    (``phases``: per phase, what each tree waited)."""

    measured: bool | None = None
    judged: str | None = None
    labels: dict[str, str] | None = None
    wait_share_limit: Num = None
    min_busy: Num = None
    note: str | None = None
    phases: dict[str, Any] | None = None


class TokenInfo(ResultModel):
    """How a target's tokens were counted: the tokenizer (``server``: the target's /tokenize; none: 4 characters
    a token) and the special tokens it adds."""

    tokenizer: str | None = None
    special_tokens: list[str] | None = None


class Trace(ResultModel):
    """A trace replay: the slice of the trace, the speed, the model length and what was clipped to fit it."""

    file: str | None = None
    requests: int | None = None
    trace_requests: int | None = None
    speed: Num = None
    max_model_len: int | None = None
    max_model_len_source: str | None = None
    clipped: int | None = None
    too_long: str | None = None
    shared_blocks: int | None = None
    distinct_blocks: int | None = None


class Generator(ResultModel):
    """A summary's ``generator``: whether latbench itself kept up (send lag, its CPU, closed-loop sessions short of
    what was asked), and how it read arrival times (``receive_stamps``)."""

    send_lag_p99: Num = None
    send_lag_threshold: Num = None
    cpu_utilization: Num = None
    lagging: bool | None = None
    cpu_saturated: bool | None = None
    closed_loop_short: list[Any] | None = None
    receive_stamps: str | None = None


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
    failures: dict[str, Any] | None = None
    preflight: dict[str, Any] | None = None
    trace: Trace | None = None
    server_exit: dict[str, Any] | None = None
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


class MetaTarget(ResultModel):
    """One target of meta.json: its name and folder (``dir``, a folder of the RunDir), where it was reached,
    and what its run measured."""

    name: str
    dir: str
    url: str | None = None
    model: str | None = None
    server: ServerInfo | None = None
    preflight: dict[str, Any] | None = None
    wall_start: Num = None
    t0_monotonic: Num = None
    duration_s: Num = None
    requests: int | None = None
    server_log: str | None = None
    group: str | None = None
    repetition: int | None = None
    start: int | None = None


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
    capacity: dict[str, Any] | list[Any] | None = None
    repeat: dict[str, Any] | None = None
    kind: str | None = None
    mode: str | None = None
    watch: dict[str, Any] | None = None


# --- the other result files -----------------------------------------------------------------------------------

class RunStat(ResultModel):
    """One statistic over a repeated target's runs: each run's value (None: that run did not measure it), their
    median and their between-run 95% interval."""

    values: list[Num] | None = None
    n: int | None = None
    median: Num = None
    ci: list[Num] | None = None


class RepeatSlo(SloResult):
    """An SLO judged over a repeated target's runs: the value of each run, and the basis of the judgement."""

    basis: str | None = None
    values: list[Num] | None = None


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


class ColdStart(ResultFile):
    """cold_start.json: each architecture's starts (under ``groups``; a 0.1.0 file has them at top level, kept
    as extra keys)."""

    groups: dict[str, Any] | None = None


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


class Capacity(ResultFile):
    """capacity.json: a capacity search's steps and what they found (or, for a repeated search, its searches
    and their spread)."""

    scenario: str | None = None
    target: dict[str, Any] | None = None
    slo: list[Any] | None = None
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
    bracket: list[Any] | None = None
    steps: list[Any] | None = None
    repeats: int | None = None
    searches: list[RepeatedSearch] | None = None
    spread: dict[str, Any] | None = None


class Regression(ResultFile):
    """regression.json: a run compared with a baseline RunDir, per target."""

    baseline: str | None = None
    max_regression: Num = None
    targets: dict[str, Any] | None = None
    missing: list[Any] | None = None
    notes: list[str] | None = None
    methods: dict[str, Any] | None = None
    repeated: bool | None = None
    passed: bool | None = None
    runs: dict[str, Any] | None = None


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
