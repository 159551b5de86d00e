"""The metric registry: every metric latbench reports, declared once.

One :class:`Metric` says what a metric is (name, unit, definition), how it is computed from the records
(a records column of that name, or the function named in ``computed_by``), how a report shows it (label,
format), whether an SLO line or a goodput: bound may use it, which scopes of summary.json have it, and
whether ``latbench watch`` serves it as a histogram. Everything that lists metrics derives the list from
here: the SLO grammar (:mod:`loadgen.scenario.slo`), goodput validation (:mod:`loadgen.scenario.model`),
metrics.json (:mod:`loadgen.records.definitions`), the report's percentile table
(:mod:`reports.report_model`), the watch exposition (:mod:`loadgen.monitoring.exposition`) and the docs'
metric table (:func:`doc_table`). Adding a metric is adding one entry (and the code that computes it).

This module sits below every stage (it imports nothing of the project, nor pandas or numpy) so that each
of them can read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Optional

#: How an SLO threshold is read: a duration ('300ms'), a fraction ('1%', 0.01) or a rate (requests/s).
SloKind = Literal["duration", "fraction", "rate", "telemetry"]
#: The scopes of summary.json: the run as a whole, and each phase.
SCOPES = ("overall", "phases")


@dataclass(frozen=True)
class Metric:
    """One metric. ``dist``: a distribution (summary.json gives n, mean, percentiles with intervals, max);
    ``slo``: the kind of threshold an SLO line on it takes (None: no SLO may use it); ``goodput``: a
    per-request goodput: bound may use it (``goodput_doc`` describes that bound); ``label``: its row in the
    report's percentile table (None: no row); ``watch``: the help text of its ``latbench watch`` histogram
    (None: not served); ``of_all``: its samples come from every request, not only the successful ones;
    ``computed_by``: the function that computes its samples, when it is not the records column ``name``;
    ``doc``: its definition in the documentation's table, in Markdown (``definition`` when empty); ``needs``: a
    records column of a workload feature (``tool_calls``...): the metric is in a scope of summary.json only when
    some request of it has that column above 0 (a run without tool calls has no ``ttftc``)."""

    name: str
    unit: str
    definition: str
    dist: bool = False
    slo: Optional[SloKind] = None
    goodput: bool = False
    goodput_doc: str = ""
    label: Optional[str] = None
    fmt: str = ""
    watch: Optional[str] = None
    of_all: bool = False
    computed_by: Optional[str] = None
    scopes: tuple[str, ...] = SCOPES
    doc: str = ""  # the documentation's definition (Markdown); the definition when empty
    needs: Optional[str] = None  # a records column: in summary.json only where some request has it above 0
    stats: tuple[str, ...] = ()  # a server-side (telemetry) quantity: the figures summary.json gives per phase

    @property
    def display(self) -> str:
        """The report's format for its values (reports.fmt kinds): milliseconds for times, unless given."""
        return self.fmt or ("ms" if self.unit == "s" else "count")


_REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add ``metric``; a name registered twice is a mistake (two definitions of one thing)."""
    if metric.name in _REGISTRY:
        raise ValueError(f"metric {metric.name!r} is registered already")
    if metric.slo == "duration" and not metric.dist:
        raise ValueError(f"metric {metric.name!r}: a duration SLO needs a distribution (metric.stat)")
    _REGISTRY[metric.name] = metric
    return metric


@contextmanager
def registered(metric: Metric) -> Iterator[Metric]:
    """``metric`` registered for the block, removed after it (tests add a metric this way)."""
    register(metric)
    try:
        yield metric
    finally:
        del _REGISTRY[metric.name]


def metrics() -> tuple[Metric, ...]:
    """Every metric, in the registry's order (the order of metrics.json and of the report's rows)."""
    return tuple(_REGISTRY.values())


def metric(name: str) -> Metric:
    return _REGISTRY[name]


def slo_kind(name: str | None) -> Optional[SloKind]:
    """How an SLO on ``name`` reads its threshold; None for a metric no SLO may use (or not registered)."""
    m = _REGISTRY.get(name or "")
    return m.slo if m else None


def distributions() -> tuple[str, ...]:
    """Distribution metrics an SLO may bound as ``metric.stat`` (and summary.json describes per scope)."""
    return tuple(m.name for m in _REGISTRY.values() if m.dist and m.slo == "duration")


def slo_scalars() -> tuple[str, ...]:
    """Scalar metrics an SLO may bound: fractions and rates of a phase or run."""
    return tuple(m.name for m in _REGISTRY.values() if m.slo in ("fraction", "rate"))


def slo_rates() -> tuple[str, ...]:
    """Scalar SLO metrics in requests per second (the other scalars are fractions)."""
    return tuple(m.name for m in _REGISTRY.values() if m.slo == "rate")


def telemetry_quantities() -> tuple[Metric, ...]:
    """Server-side quantities (``server.*``, ``gpu.*``): read from the engine's and the GPU's own telemetry, given
    per phase in summary.json's ``telemetry`` block; an SLO names one as ``quantity.stat`` (a stat of ``stats``)."""
    return tuple(m for m in _REGISTRY.values() if m.slo == "telemetry")


def goodput_metrics() -> tuple[str, ...]:
    """Per-request metrics a goodput: bound may use."""
    return tuple(m.name for m in _REGISTRY.values() if m.goodput)


def report_rows() -> tuple[Metric, ...]:
    """The metrics of the report's percentile table (a row each, labelled ``label``), in order."""
    return tuple(m for m in _REGISTRY.values() if m.label is not None)


def watch_histograms() -> tuple[str, ...]:
    """Metrics ``latbench watch`` serves as histograms."""
    return tuple(m.name for m in _REGISTRY.values() if m.watch is not None)


def definitions() -> dict[str, dict[str, str]]:
    """metrics.json's ``metrics``: name -> unit and definition."""
    return {m.name: {"unit": m.unit, "definition": m.definition} for m in _REGISTRY.values()}


def doc_table() -> str:
    """The documentation's metric table, as Markdown (docs/reference/metrics.md holds it)."""
    lines = ["| metric | unit | definition | SLO | goodput |", "|---|---|---|---|---|"]
    for m in _REGISTRY.values():
        slo = {"duration": "`.stat`", "fraction": "fraction", "rate": "req/s",
               "telemetry": "`." + "`, `.".join(m.stats) + "`"}.get(m.slo or "", "")
        text = m.doc or m.definition.replace("|", "\\|")
        lines.append(f"| {m.name} | {m.unit} | {text} | {slo} | {'yes' if m.goodput else ''} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Outcome:
    """How a request ended: one of four, each request exactly one (``summary.json``'s ``ok`` + the counts of
    ``errors`` + ``aborted`` = ``count``). ``key``: where a scope of summary.json counts it (``errors``: one count
    per error class, ``cancelled`` among them); ``label``: the word every output uses for it."""

    name: str
    label: str
    key: str
    definition: str
    short: str  # the definition in a few words, for a line of the terminal


#: The outcome vocabulary of every output (terminal, summary.md, report.html, summary.json): defined once here.
OUTCOMES = (
    Outcome("ok", "ok", "ok", "answered in full: the only requests in the latency distributions", "answered in full"),
    Outcome("error", "errors", "errors",
            "failed, counted by class (timeout, connect, reset, http_5xx, bad_stream, dropped, ...); in error_rate",
            "failed, by class"),
    Outcome("cancelled", "cancelled", "errors/cancelled",
            "an error class: still in flight when latbench stopped waiting (at the end of the grace after the last "
            "phase, or when the run stopped early) and cancelled by latbench; in error_rate",
            "an error: still in flight when latbench stopped waiting"),
    Outcome("aborted", "aborted", "aborted",
            "ended on purpose by the workload's cancellation rule (workload.cancel), as a user closes a tab: not an "
            "error, in no latency distribution; in aborted_rate",
            "ended by the workload's cancellation rule, not an error"),
)


def outcomes() -> tuple[Outcome, ...]:
    """The four ways a request ends, in display order: ok, errors (by class), cancelled (one of them), aborted."""
    return OUTCOMES


def outcome(name: str) -> Outcome:
    return next(o for o in OUTCOMES if o.name == name)


def outcome_counts(count: int, ok: int, errors: dict[str, int] | None, aborted: int | None) -> str:
    """A scope's requests by outcome, in these words, for a line of text: '27 = 24 ok + 3 errors (reset 3) + 0
    aborted' (error classes by name, ``cancelled`` last), then what cancelled and aborted mean where there are any."""
    errs = sorted((errors or {}).items(), key=lambda kv: (kv[0] == "cancelled", kv[0]))
    by = f" ({', '.join(f'{k} {v}' for k, v in errs)})" if errs else ""
    line = (f"{count} = {ok} {outcome('ok').label} + {sum(v for _, v in errs)} {outcome('error').label}{by} + "
            f"{aborted or 0} {outcome('aborted').label}")
    said = [k for k in ("cancelled", "aborted") if (errors or {}).get(k) or (k == "aborted" and aborted)]
    return line + (f" ({'; '.join(f'{k}: {outcome(k).short}' for k in said)})" if said else "")


def outcome_doc() -> str:
    """The documentation's outcome table, as Markdown (docs/reference/metrics.md holds it)."""
    lines = ["| outcome | counted in summary.json | definition |", "|---|---|---|"]
    lines += [f"| {o.label} | `{o.key}` | {o.definition} |" for o in OUTCOMES]
    return "\n".join(lines) + "\n"


for _m in (
    Metric("latency", "s",
           "done - scheduled: from the intended send time to the last byte (coordinated omission corrected)",
           dist=True,
           slo="duration",
           goodput=True,
           label="latency",
           watch="Intended send time to last byte of each successful request (coordinated omission corrected).",
           goodput_doc="done - scheduled at most this",
           doc=("`done - scheduled`: from the *intended* send time to the last byte, so a generator that falls behind"
                " cannot hide a slow server (coordinated omission corrected)")),
    Metric("ttft", "s",
           ("first_token - scheduled: time to the first token of a stream, of any kind: content, reasoning "
            "(reasoning_content, reasoning), a tool call or completion text"),
           dist=True,
           slo="duration",
           goodput=True,
           label="TTFT",
           watch="Intended send time to the first content token of each successful stream.",
           goodput_doc="time to first token at most this (streams)",
           doc=("`first_token - scheduled`: the first token of *any kind* — a chunk with non-empty `content`, "
                "reasoning (`reasoning_content` or `reasoning`), a tool call, or completion `text` (a role-only or "
                "usage-only chunk is not a token)")),
    Metric("ttfat", "s",
           ("first_answer - scheduled: time to the first answer token of a stream (content, a tool call or "
            "completion text; not reasoning): what a user of a reasoning model waits for"),
           dist=True,
           slo="duration",
           goodput=True,
           label="time to first answer token",
           goodput_doc="time to first answer token at most this (streams)",
           doc=("`first_answer - scheduled`: time to the first *answer* token (content, a tool call or text; "
                "reasoning alone does not count) — what the user of a reasoning model waits for; equals ttft for a "
                "model that does not reason")),
    Metric("ttftc", "s",
           ("first_tool_call - scheduled: time to the first tool-call token of a stream (the first chunk carrying "
            "a tool call: OpenAI delta.tool_calls, Responses function_call, Anthropic tool_use), for requests "
            "whose answer called a tool"),
           dist=True,
           slo="duration",
           label="time to first tool-call token",
           needs="tool_calls",
           doc=("`first_tool_call - scheduled`: time to the first *tool-call* token of a stream (OpenAI "
                "`delta.tool_calls`, a Responses `function_call`, an Anthropic `tool_use` block), for requests whose "
                "answer called a tool")),
    Metric("reasoning_time", "s",
           "first_answer - first_token, for requests that reasoned: how long the model thought before answering",
           dist=True,
           slo="duration",
           label="reasoning time",
           doc=("`first_answer - first_token`, for requests that reasoned: how long the model thought before "
                "answering")),
    Metric("reasoning_tokens", "tokens",
           ("reasoning tokens of successful requests (usage's completion_tokens_details.reasoning_tokens, else "
            "counted reasoning chunks): requests, total, mean")),
    Metric("itl", "s",
           ("inter-token latency, per token: a chunk that carried n tokens after a gap g gives n samples of g / n"
            " (tokens per chunk: chunk_tokens, by chunk_tokens_source); equals chunk_gap when every chunk carries"
            " one token"),
           dist=True,
           slo="duration",
           label="inter-token (ITL, per token)",
           computed_by="loadgen.analysis.metrics.itl_samples",
           watch="Gaps between consecutive token chunks of successful streams.",
           doc=("inter-token latency *per token*: a chunk that carried n tokens after a gap g counts as n gaps of g /"
                " n (right when a server sends several tokens a chunk: speculative decoding, stream intervals)")),
    Metric("chunk_gap", "s",
           "gaps between consecutive token chunks of one streamed response",
           dist=True,
           slo="duration",
           label="gap between chunks",
           computed_by="loadgen.analysis.metrics.chunk_gap_samples",
           doc=("gaps between consecutive token chunks of one stream, whatever they carried (equals itl when every "
                "chunk carries one token)")),
    Metric("tokens_per_chunk", "tokens",
           "tokens / token chunks of successful streams, after each stream's first chunk"),
    Metric("multi_token_fraction", "fraction",
           "share of those chunks that carried more than one token"),
    Metric("tpot", "s",
           "(done - first_token) / (output_tokens - 1): time per output token after the first",
           dist=True,
           slo="duration",
           goodput=True,
           label="time per output token",
           watch="Time per output token after the first, of each successful stream.",
           goodput_doc="time per output token at most this (streams)",
           doc="`(done - first_token) / (output_tokens - 1)`"),
    Metric("service_time", "s",
           "done - sent: from the moment the request left to the last byte",
           dist=True,
           slo="duration",
           goodput=True,
           label="service time",
           watch="Actual send time to last byte of each successful request.",
           goodput_doc="done - sent at most this",
           doc="`done - sent`"),
    Metric("send_lag", "s",
           "sent - scheduled: how late the generator sent the request",
           dist=True,
           slo="duration",
           label="send lag (generator)",
           of_all=True,
           doc="`sent - scheduled`: the generator's own lateness"),
    Metric("error_rate", "fraction",
           "failed requests (any error class, dropped and cancelled included) / all requests",
           slo="fraction"),
    Metric("aborted_rate", "fraction",
           ("requests aborted by the workload's cancellation rule (workload.cancel; not an error, left out of every "
            "latency distribution) / all requests"),
           slo="fraction",
           doc=("requests aborted by the workload's cancellation rule (`workload.cancel`) / all requests: not an "
                "error, not in any latency distribution; apart from `cancelled` (an error: still in flight when "
                "latbench stopped waiting)")),
    Metric("goodput", "fraction",
           ("good requests / requests judged: a request is good when it succeeded and met every per-request bound"
            " of the scenario's goodput: block that applies to it (latency, ttft, ttfat, tpot, service_time); "
            "aborted requests are not judged; absent (null) without a goodput: block"),
           slo="fraction",
           doc="good requests / requests judged, by the scenario's `goodput:` objectives (absent without them)"),
    Metric("goodput_qps", "1/s",
           "good requests completed inside the window / duration (DistServe's and vLLM's request goodput)",
           slo="rate",
           doc="good requests completed inside the window / its duration"),
    Metric("achieved_qps", "1/s",
           ("successful responses completed inside the phase's window / the phase's duration (a request that "
            "completes after its phase ends counts in its phase's ok, not in this rate)"),
           slo="rate"),
    Metric("sent_qps", "1/s",
           "requests sent (not dropped) scheduled in the phase / phase duration"),
    Metric("target_qps", "1/s",
           "mean intended arrival rate of the phase"),
    Metric("output_tokens_per_s", "1/s",
           "output tokens of successful requests completed inside the window / duration",
           doc="output tokens of the same requests / duration"),
    Metric("input_tokens_per_s", "1/s",
           ("prompt tokens (prompt_tokens: the server's usage, else latbench's count) of successful requests "
            "completed inside the window / duration"),
           doc="prompt tokens of the successful requests completed in the window / its duration"),
    Metric("output_tokens_per_s_per_user", "1/s",
           ("per request, (output_tokens - 1) / (done - first_token): the decode speed one user sees (streamed "
            "requests with 2+ output tokens; 1 / tpot); a distribution, reported with p1/p5/p10 for the slowest "
            "users"),
           doc=("per request, `(output_tokens - 1) / (done - first_token)`: the decode speed one user sees (streams "
                "of 2+ tokens; `1 / tpot`), reported as a distribution with p1/p5/p10 for the slowest users")),
    Metric("prompt_tokens", "tokens",
           ("the prompt's length: the server's usage.prompt_tokens when it sent one, else latbench's own count, "
            "input_tokens + added_tokens; prompt_tokens_source says which (usage | tokenizer | approximation)")),
    Metric("input_tokens", "tokens",
           ("the prompt as latbench built it, content only (no chat template, no special tokens), counted with "
            "workload.tokenizer, else approximated at 4 characters a token")),
    Metric("added_tokens", "tokens",
           ("what the server adds around the prompt as latbench's tokenizer counts it: the chat template's "
            "overhead (chat APIs) or the special tokens a plain prompt gets, such as BOS (completions); -1 when "
            "unknown")),
    Metric("output_tokens", "tokens",
           ("the answer's length; output_tokens_source says how it was counted: usage (the server's), tokenizer "
            "(the streamed text counted with workload.tokenizer), chunks (one token per content chunk: a lower "
            "bound when chunks carry several tokens)")),
    Metric("usage_vs_counted", "requests",
           ("where the server sent usage and latbench counted the prompt: how many of them agree exactly "
            "(usage.prompt_tokens == input_tokens + added_tokens), and the smallest and largest difference")),
    Metric("tool_call_rate", "fraction",
           ("successful requests offered tools (workload.tools) whose answer called one / successful requests "
            "offered tools; absent without tools"),
           slo="fraction",
           needs="tools"),
    Metric("tool_call_tokens", "tokens",
           ("tokens of the tool calls' arguments: one per streamed argument chunk, else the arguments' text "
            "approximated (4 characters a token); per scope: total and mean per calling request")),
    Metric("json_valid_rate", "fraction",
           ("workload.response_format: successful requests whose answer parsed as JSON / successful requests "
            "whose answer was checked; absent without a response_format (an invalid answer is a result, not an "
            "error: an SLO on this rate makes it one)"),
           slo="fraction"),
    Metric("schema_valid_rate", "fraction",
           ("workload.response_format json_schema: successful requests whose answer matched the schema / "
            "successful requests whose answer was checked against it; absent without a schema"),
           slo="fraction"),
    Metric("closed_loop.held", "requests",
           ("closed loop: the concurrency held, the time-average of requests in flight (sent -> done; for "
            "conversations, of sessions in progress: first turn sent -> last turn done, think times included) "
            "from the moment every user has sent its first request to the phase's end, beside the asked "
            "concurrency; below 95% of it the run is generator-limited")),
    Metric("closed_loop.gap", "s",
           ("closed loop: the client's own time from an answer (done) to its user's next request (sent; a "
            "conversation's later turn: from its due time), p50 and p99")),
    Metric("latency_errors_inf", "s",
           "latency percentiles with every failed request counted as infinitely slow"),
):
    register(_m)


#: Server-side quantities: what the engine and the GPU say of themselves (loadgen.telemetry maps each engine's own
#: names onto these). Units: fractions 0-1 (shown as %), seconds, bytes, watts, MHz, requests.
_GAUGE, _HIST, _ONE = ("mean", "max"), ("mean", "p50", "p99"), ("mean",)
TELEMETRY = "telemetry"
for _m in (
    Metric("server.requests_running", "requests", "requests the engine is running (in its batch), per scrape",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("server.queue_waiting", "requests", "requests waiting in the engine's queue, not yet running, per scrape",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("server.kv_cache_usage", "fraction", "share of the engine's KV-cache blocks in use, per scrape",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("server.prefix_cache_hit_rate", "fraction",
           "prompt tokens found in the engine's prefix cache / prompt tokens looked up, over the phase",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
    Metric("server.result_cache_hit_rate", "fraction",
           "requests answered from a result (response) cache / requests looked up, over the phase",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
    Metric("server.preemptions", "1/s", "requests preempted (vLLM) or retracted (SGLang) per second, over the phase",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
    Metric("server.batch_size", "sequences",
           "sequences per engine step (a batch-size histogram), else the running requests per scrape",
           slo=TELEMETRY, stats=_GAUGE + ("p50", "p99"), scopes=(TELEMETRY,)),
    Metric("server.spec_acceptance_rate", "fraction", "speculative decoding: accepted / proposed draft tokens",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
    Metric("server.spec_acceptance_length", "tokens",
           "speculative decoding: tokens per verification step (1 + accepted / drafts)",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
    Metric("server.ttft", "s", "the engine's own time to first token (its histogram: arrival to first token)",
           slo=TELEMETRY, stats=_HIST, scopes=(TELEMETRY,)),
    Metric("server.itl", "s", "the engine's own inter-token latency (its histogram)",
           slo=TELEMETRY, stats=_HIST, scopes=(TELEMETRY,)),
    Metric("server.e2e", "s", "the engine's own end-to-end request latency (its histogram, or its duration counters)",
           slo=TELEMETRY, stats=_HIST, scopes=(TELEMETRY,)),
    Metric("server.queue_time", "s", "the engine's own queue time per request (its histogram, or its counters)",
           slo=TELEMETRY, stats=_HIST, scopes=(TELEMETRY,)),
    Metric("gpu.utilization", "fraction", "GPU utilization (share of time a kernel ran), per sample, over devices",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.memory_used", "bytes", "GPU memory in use, summed over devices, per sample",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.memory_total", "bytes", "GPU memory (VRAM), summed over devices",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.memory_share", "fraction", "GPU memory in use / VRAM, per sample",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.power", "W", "GPU power draw, summed over devices, per sample",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.sm_clock", "MHz", "GPU SM clock, over devices, per sample",
           slo=TELEMETRY, stats=_GAUGE, scopes=(TELEMETRY,)),
    Metric("gpu.energy_per_token", "J", "GPU energy (power integrated over the phase) / output tokens of the phase",
           slo=TELEMETRY, stats=_ONE, scopes=(TELEMETRY,)),
):
    register(_m)
