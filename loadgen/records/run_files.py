"""The result files beside a run's meta.json and summaries: metrics.json, repeats.json (repeated runs),
cold_start.json (fresh starts), capacity.json (capacity searches), regression.json (a baseline check) and watch.json.
Part of :mod:`loadgen.records.results`."""

from __future__ import annotations

from typing import Any

from loadgen.records.meta_file import PageCache, ServerInfo, WeightsPrepared
from loadgen.records.result_base import Num, ResultFile, ResultModel
from loadgen.records.summary_file import ServerExited
from loadgen.records.summary_scope import SloResult


class MetricDefinitions(ResultFile):
    """metrics.json: each metric's definition and unit, by name."""

    metrics: dict[str, Any] | None = None


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
    generator_limited: str | None = None


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
    #: the step that failed first was one the load generator could not drive: nothing held, and that says nothing
    #: of the target (a later step's generator limit is the lower bound ``limited_by_generator`` says)
    generator_limited: str | None = None
    unreachable: bool | None = None
    search: CapacitySearch | None = None
    bracket: list[Num] | None = None
    steps: list[CapacityStep] | None = None
    repeats: int | None = None
    searches: list[RepeatedSearch] | None = None
    spread: SearchSpread | None = None
    server_exit: ServerExited | None = None

    @property
    def invalid_reason(self) -> str | None:
        """Why the search measured something other than the target (its server died, the host or the load
        generator failed a step), or None."""
        return (self.server_exit.text if self.server_exit else None) or self.host_contended or self.generator_limited


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
