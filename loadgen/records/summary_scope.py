"""summary.json, one scope (the whole run, ``overall``, or a phase): its counts, rates and each metric's
statistics, with the closed loop it held and its objectives' results. Part of :mod:`loadgen.records.results`."""

from __future__ import annotations

import math
from typing import Any

from loadgen.records.result_base import Num, ResultModel


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


class ImageSizeRow(ResultModel):
    """The requests of one image size (their images' pixels, summed): how many, their TTFT and latency, the mean
    prompt tokens the server's usage counted, and latbench's own count of the images' tokens (None: not known)."""

    image_pixels: int | None = None
    n: int | None = None
    ttft: MetricStats | None = None
    latency: MetricStats | None = None
    prompt_tokens_mean: Num = None
    image_tokens_est_mean: Num = None


class ScopeImages(ResultModel):
    """A scope's requests that sent images (workload.images): how many, their images, mean pixels and bytes per
    request (known sizes: a URL's are not), and TTFT by image size."""

    requests: int | None = None
    images: int | None = None
    pixels_mean: Num = None
    bytes_mean: Num = None
    by_size: list[ImageSizeRow] | None = None


class ScopeMediaCache(ResultModel):
    """A scope's successful requests with images or audio whose server said how many its encoder cache held:
    how many said, their images and clips, the hits, and ``hit_rate`` = hits / media."""

    requests: int | None = None
    media: int | None = None
    hits: int | None = None
    hit_rate: Num = None


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
    aborted_rate: Num = None
    target_qps: Num = None
    sent_qps: Num = None
    achieved_qps: Num = None
    input_tokens_per_s: Num = None
    output_tokens_per_s: Num = None
    goodput: Num = None
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
    images: ScopeImages | None = None
    media_cache: ScopeMediaCache | None = None
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
    upper: Num = None  # ``in lo..hi``: hi (``threshold`` is lo)
    ci_sectioned: list[Num] | None = None  # a capacity step's: see loadgen.analysis.capacity
