"""The scenario model (pydantic v2): what a scenario YAML file may say, validated at the edge.

Loading goes through :func:`load_scenario`, which reports every mistake at once, one line each, as
``file:line:column: field.path: message`` (see :mod:`loadgen.scenario.loader`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from loadgen import metric_registry
from loadgen.redact import has_control
from loadgen.scenario.media_model import (  # noqa: F401 (the reference pages find the models here)
    Audio,
    AudioSeconds,
    ImageCount,
    Images,
    ImageSide,
    ResponseFormat,
    ToolDefinition,
    ToolFunction,
    ToolGeneration,
    Tools,
    ToolsField,
)
from loadgen.scenario.reset import Reset, ResetField  # noqa: F401 (the reference pages find the models here)
from loadgen.scenario.slo import SLO, parse_slo, split_scope
from loadgen.scenario.strict import Strict
from loadgen.scenario.telemetry_model import Telemetry
from loadgen.scenario.urls import url_problem
from loadgen.units import parse_duration, parse_rate

MAX_QPS = 1_000_000.0  # no single scenario line may ask for more than this
MAX_CONCURRENCY = 100_000
MAX_DURATION = 7 * 24 * 3600.0
MAX_HEADER_BYTES = 64 * 1024  # default cap of a response's header block (target.max_header_bytes)
MAX_EVENT_BYTES = 1 << 20  # default cap of one SSE line or event (target.max_event_bytes)
#: A prompt's or an output's length in tokens at most (a synthetic prompt of 1e6 tokens is 4 MB of text): the
#: bound of every length a scenario, a dataset filter or a trace row gives.
MAX_TOKENS = 1_000_000
MAX_DISTINCT = 1_000_000  # distinct prompts at most (prompts.distinct, dataset.sample): ~200 MB made up front
#: A phase's (or a trace's) max_requests at most: more than any phase can send (1e6 req/s for 7 days is 6e11).
MAX_REQUESTS = 10**12
MAX_PHASES = 10_000  # phases of a scenario at most (load.phases, or the steps of a sweep)


def _duration(v: Any) -> float:
    seconds = parse_duration(v)
    if seconds > MAX_DURATION:  # a timeout or grace of 1e12 s would overflow the event loop's timers
        raise ValueError(f"expected a duration of at most {MAX_DURATION / 86400:.0f} days, got {v!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(_duration)]


def _positive_duration(v: Any) -> float:
    seconds = _duration(v)
    if seconds <= 0:  # a timeout of 0 s times every request out (and spins the CPU doing it)
        raise ValueError(f"expected a duration above 0, got {v!r}")
    return seconds


PositiveDuration = Annotated[float, BeforeValidator(_positive_duration)]


def _plain_name(v: str) -> str:
    if has_control(v):  # a name is printed and written everywhere: junit.xml, summary.md, the terminal
        raise ValueError("a name may not hold a control character (a line break, a tab, ESC...)")
    return v


def _scope_name(v: str) -> str:
    if ":" in v:
        raise ValueError("a name may not hold ':' (it separates an SLO's scope from its objective)")
    return _plain_name(v)


class ReferenceTarget(Strict):
    """The bundled reference server, started by latbench on a free 127.0.0.1 port."""

    arch: Literal["naive", "optimized", "batching", "cache"] = Field("optimized", description="architecture preset")
    model: str = Field("tiny", description="model preset (tiny, small, medium, ...)")
    backend: str = Field("auto", examples=["sim:h200-8b"], description="auto | numpy | torch | sim:<profile>")
    options: dict[str, Any] = Field(default_factory=dict,
                                    description="any other knob, as `latbench serve` flags without dashes, "
                                                "e.g. {max_batch_size: 8, error_rate: 0.05}")
    startup_timeout: PositiveDuration = Field(120.0, examples=["5m"], description="how long to wait for /health")


class CommandTarget(Strict):
    """Any server started by latbench as a command, ready when ``ready_url`` answers 200."""

    run: list[str] = Field(description="argv of the command; '{port}' is replaced by a free port")
    url: str = Field(description="base URL of the API, '{port}' replaced")
    ready_url: str = Field(description="polled until it answers 200, '{port}' replaced")
    startup_timeout: PositiveDuration = Field(120.0, description="how long to wait for ready_url to answer 200")

    @field_validator("url", "ready_url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v.replace("{port}", "1"))  # '{port}' is the free port latbench picks
        if problem:
            raise ValueError(problem)
        return v


_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP field name (RFC 9110 token)


def header_problem(name: str, value: str) -> str | None:
    """Why a header cannot be sent as given (None when it can). Never quotes the value: it may be a secret."""
    if not _TOKEN.match(name):
        return f"{name!r} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if "\r" in value or "\n" in value:
        return f"{name}: the value holds a line break (CR or LF; a ${{ENV}} value with a trailing newline?)"
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
        return f"{name}: the value holds a control character"
    return None


#: Headers the HTTP client writes itself (framing, connection management): a target may not set them. Host may be
#: set (a virtual host behind an address); every transport sends the target's then.
CLIENT_HEADERS = ("Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection", "Upgrade",
                  "TE", "Trailer")
_CLIENT_HEADERS = frozenset(h.lower() for h in CLIENT_HEADERS)


def is_client_header(name: str) -> bool:
    """Whether the HTTP client owns header ``name`` (see :data:`CLIENT_HEADERS`), whatever its case."""
    return name.lower() in _CLIENT_HEADERS


def _header_name(name: str) -> str:
    if is_client_header(name):
        raise ValueError(f"the HTTP client writes this header itself (as every framing and connection header: "
                         f"{', '.join(CLIENT_HEADERS)}); remove it")
    return name


def _no_control(v: str, what: str) -> str:
    if any(c in v for c in "\r\n\0"):
        raise ValueError(f"{what} holds a line break or a NUL character")
    return v


class HttpRequest(Strict):
    """The request of an ``api: http`` target. ``{seq}`` and ``{prompt}`` in path, body or template are filled per
    request."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field("POST", description="the HTTP method")
    path: str = Field("", description="joined to the target's url, e.g. /predict?id={seq}")
    body: Optional[Any] = Field(None, examples=[{"inputs": "{prompt}", "id": "{seq}"}],
                                description="JSON body; strings inside may use {seq} and {prompt}")
    template: Optional[str] = Field(None, examples=["text={prompt}"],
                                    description="a raw body template instead of `body`")
    content_type: str = Field("application/json", examples=["text/plain"], description="the request's Content-Type")

    @field_validator("path", "content_type")
    @classmethod
    def _one_line(cls, v: str, info: ValidationInfo) -> str:
        return _no_control(v, info.field_name)


class KServeTensors(Strict):
    """Tensor names of a KServe v2 / Triton text model (api: kserve-v2, triton-generate). The defaults are those
    of Triton's vLLM and TensorRT-LLM backends."""

    text_input: str = Field("text_input", examples=["prompt"], description="the prompt (BYTES)")
    text_output: str = Field("text_output", examples=["answer"], description="the answer (BYTES)")
    max_tokens: Optional[str] = Field("max_tokens", examples=["max_new_tokens"],
                                      description="the output length asked for (INT32); null: not sent")
    stream: Optional[str] = Field("stream", examples=["streaming"],
                                  description="the BOOL input that asks a decoupled model to stream "
                                                        "(gRPC ModelStreamInfer); null: not sent")


#: Request fields latbench sets itself: ``extra_body`` (or a dataset line's) may not override them.
OWNED_FIELDS = {
    "model": "target.model",
    "messages": "the workload's prompts",
    "prompt": "the workload's prompts",
    "input": "the workload's prompts",
    "stream": "target.stream",
    "stream_options": "target.stream (usage is always asked for)",
    "max_tokens": "workload.max_tokens, prompts.output_tokens or the dataset's max_tokens",
    "max_completion_tokens": "workload.max_tokens, prompts.output_tokens or the dataset's max_tokens",
}


def owned_fields_error(body: Any) -> str | None:
    """Why a request-options object cannot be used (not an object, or it sets an owned field); None if it can."""
    if not isinstance(body, dict):
        return f"expected an object of request fields, got {type(body).__name__}"
    owned = [k for k in body if k in OWNED_FIELDS]
    if owned:
        return "; ".join(f"{k!r} is set by latbench from {OWNED_FIELDS[k]}, not from extra_body" for k in owned)
    return None


class Target(Strict):
    name: Optional[Annotated[str, AfterValidator(_scope_name)]] = Field(
        None, description="label of this target in reports; required in `targets:`")
    url: Optional[str] = Field(None, description="base URL, e.g. http://127.0.0.1:8000/v1; ${ENV} is expanded")
    reference: Optional[ReferenceTarget] = Field(None, description="the bundled reference server, started by "
                                                                   "latbench on a free 127.0.0.1 port")
    command: Optional[CommandTarget] = Field(None, description="a server latbench starts as a command (such as "
                                                               "vllm serve) and stops at the end")
    api: Literal["openai-chat", "openai-completions", "embeddings", "http", "anthropic-messages", "openai-responses",
                 "openai-transcriptions", "rerank", "kserve-v2", "triton-generate"] = Field(
        "openai-chat", description="the API spoken; kserve-v2 over HTTP/JSON (http://) or gRPC (grpc://)")
    model: Optional[str] = Field(None, examples=["Qwen/Qwen2.5-0.5B-Instruct"],
                                 description="model name sent in requests; default: the reference model, "
                                                   "else the first of /v1/models")
    stream: bool = Field(True, description="ask for a streamed answer: TTFT, ITL and TPOT need one")
    continuous_usage_stats: bool = Field(False, description="ask for usage in every stream chunk (vLLM's "
                                         "stream_options.continuous_usage_stats): exact tokens per chunk")
    headers: dict[Annotated[str, AfterValidator(_header_name)], str] = Field(
        default_factory=dict, examples=[{"Authorization": "Bearer ${OPENAI_API_KEY}"}],
        description="extra headers; ${ENV} is expanded at run time and never written out")
    request: Optional[HttpRequest] = Field(
        None, examples=[{"method": "POST", "path": "/predict", "body": {"text": "{prompt}"}}],
        description="api: http: the request to send")
    kserve: KServeTensors = Field(examples=[{"text_input": "prompt", "text_output": "answer"}],
                                  default_factory=KServeTensors, description="kserve-v2 / triton-generate tensors")
    documents: Optional[int] = Field(None, examples=[16],
                                     ge=1, le=10_000, description="api: rerank: the prompt is cut into this "
                                                                        "many documents (default 8)")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="JSON fields merged into every request body of the OpenAI APIs (temperature, top_p, seed, "
                    "min_tokens, ignore_eos, chat_template_kwargs, tools, response_format...); ${ENV} in string "
                    "values is expanded and kept secret; a dataset line's own extra_body is merged over it. "
                    f"Fields latbench sets ({', '.join(OWNED_FIELDS)}) are refused")
    timeout: PositiveDuration = Field(60.0, description="per-request timeout")
    verify: bool = Field(True, description="verify TLS certificates; `false` must be explicit")
    http2: bool = Field(False, description="speak HTTP/2 (the httpx transport)")
    transport: Literal["auto", "aiohttp", "lean", "httpx", "grpc"] = Field(
        "auto", description="auto: grpc for grpc:// URLs, httpx for http2, lean for http://, aiohttp for https://")
    receive_stamps: Literal["auto", "kernel", "read"] = Field(
        "auto", description="when a response's bytes count as received: kernel: their arrival, the kernel's receive "
                            "timestamp (Linux, the lean transport); read: when latbench's code reads them; auto: "
                            "kernel for a target whose API streams tokens (stream: true; api: http never does) "
                            "where it can, else read")
    metrics_url: Optional[str] = Field(None, description="Prometheus /metrics to scrape during the run; "
                                       "for a command target, '{port}' is its port")
    gpu_metrics_url: Optional[str] = Field(None, examples=["http://gpu-node:9400/metrics"],
                                           description="a DCGM exporter's /metrics for the target's GPUs, scraped "
                                                       "during the run (the GPUs of a remote server)")
    telemetry: Telemetry = Field(default_factory=Telemetry, examples=[{"engine": "vllm", "nvml": False}],
                                 description="how the target's own telemetry is read (server and GPU metrics)")
    max_header_bytes: int = Field(MAX_HEADER_BYTES, examples=[262144], ge=1024, le=1 << 30,
                                  description="cap of a response's header block in bytes; past it the response is "
                                              "recorded as bad_response and its connection closed")
    max_event_bytes: int = Field(MAX_EVENT_BYTES, examples=[4194304], ge=1024, le=1 << 30,
                                 description="cap of one server-sent-event line or event in bytes; past it the "
                                             "stream is recorded as bad_stream and its connection closed")
    reset: Optional[ResetField] = Field(None, examples=["prefix_cache"],
                                        description="state emptied before each run, repetition and capacity step "
                                                    "(and once before a watch): prefix_cache (vLLM, SGLang, the "
                                                    "reference server); where the engine has no such endpoint the "
                                                    "summary says the cache carried over")

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        problems = [p for p in (header_problem(k, val) for k, val in v.items()) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("url", "metrics_url", "gpu_metrics_url")
    @classmethod
    def _url(cls, v: str | None, info: ValidationInfo) -> str | None:
        # a command target's metrics_url may name '{port}', its started server's port
        probe = v.replace("{port}", "1") if v is not None and info.field_name == "metrics_url" else v
        problem = url_problem(probe) if probe is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _one_kind(self):
        kinds = [k for k in ("url", "reference", "command") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"expected exactly one of url, reference, command; got {', '.join(kinds) or 'none'}")
        return self

    @field_validator("extra_body")
    @classmethod
    def _extra_body(cls, v: dict) -> dict:
        err = owned_fields_error(v)
        if err:
            raise ValueError(err)
        return v

    @model_validator(mode="after")
    def _extra_body_api(self):
        if self.extra_body and self.api == "http":
            raise ValueError("extra_body: applies to the OpenAI APIs; for api: http write the body in request.body")
        return self

    @model_validator(mode="after")
    def _kernel_stamps(self):
        if self.receive_stamps == "kernel" and (self.transport not in ("auto", "lean") or self.http2
                                                or (self.url or "").startswith(("https://", "grpc://", "grpcs://"))):
            raise ValueError("receive_stamps: kernel needs the lean transport: an http:// target, transport auto "
                             "or lean, no http2")
        return self


class TokenDist(Strict):
    """A length drawn per prompt: Normal(mean, stddev), rounded, clipped to [min, max]; each at most MAX_TOKENS."""

    mean: float = Field(gt=0, le=MAX_TOKENS, description="the mean length in tokens")
    stddev: float = Field(0.0, ge=0, le=MAX_TOKENS, description="its standard deviation (0: every length the mean)")
    min: int = Field(1, examples=[8], ge=1, le=MAX_TOKENS, description="the shortest length drawn")
    max: Optional[int] = Field(None, examples=[512],
                               ge=1, le=MAX_TOKENS, description="the longest length drawn (unset: no cap)")


def _tokens(v: Any) -> Any:
    return {"mean": v} if isinstance(v, (int, float)) and not isinstance(v, bool) else v


Tokens = Annotated[TokenDist, BeforeValidator(_tokens)]


class Prompts(Strict):
    input_tokens: Tokens = Field(default_factory=lambda: TokenDist(mean=128),
                                 description="prompt length in tokens: a number, or {mean, stddev, min, max}")
    output_tokens: Tokens = Field(default_factory=lambda: TokenDist(mean=64),
                                  description="output length asked for (max_tokens): a number, or {mean, stddev, "
                                              "min, max}")
    distinct: int = Field(1000, ge=1, le=MAX_DISTINCT,
                          description="number of distinct prompts (at most 1,000,000); requests cycle through them")


class Cancel(Strict):
    """Client-side aborts, as users close a tab: a share of requests is aborted by latbench after a time or a
    number of tokens. An aborted request is its own class (``aborted``): not an error, not in the latency
    distributions, counted in ``aborted_rate``; its connection is closed, so the server can free its slot."""

    fraction: float = Field(examples=[0.1],
                            gt=0, le=1, description="share of requests aborted (the same requests every run)")
    after: Optional[Duration] = Field(None, examples=["500ms"],
                                      description="abort this long after the request was sent")
    after_tokens: Optional[int] = Field(None, examples=[20], ge=1, le=MAX_TOKENS,
                                        description="abort once this many token chunks arrived")

    @model_validator(mode="after")
    def _one_trigger(self):
        if (self.after is None) == (self.after_tokens is None):
            raise ValueError("expected exactly one of after (a duration) or after_tokens (a number of tokens)")
        return self




class Prefix(Strict):
    """Shared system prompts (what prefix caching serves): every request opens with one of ``groups``
    prompts of ``tokens`` tokens, then its own prompt. Prompt i (request ``seq`` sends prompt ``seq %
    distinct``) opens with prefix ``i % groups``, so the groups take turns and a repeated prompt repeats its
    prefix. A chat API gets the prefix as a ``system`` message, the other APIs as the text's opening
    paragraph; input_tokens counts it."""

    tokens: int = Field(ge=1, le=MAX_TOKENS, description="length of each shared prefix in tokens: exact with "
                                                          "workload.tokenizer, else 4 characters a token")
    groups: int = Field(1, ge=1, le=100_000, description="how many different prefixes; prompt i opens with "
                                                         "prefix i % groups")


DATASET_COLUMNS = ("prompt", "messages", "conversations", "output_tokens", "reply", "extra_body")


class Dataset(Strict):
    """A dataset of prompts: a local file, or (with the ``datasets`` extra) a Hugging Face dataset."""

    path: Optional[str] = Field(None, description="a local file, relative to the scenario: JSON lines of "
                                                  "{prompt} / {messages} / {conversations} (ShareGPT), or a "
                                                  "ShareGPT JSON array")
    hf: Optional[str] = Field(None, examples=["./data/my_dataset"],
                              description="a Hugging Face dataset: an id in the local cache, or a local "
                                                "folder or data file, loaded with `datasets` (never downloaded; "
                                                "pip install 'latbench[datasets]')")
    split: str = Field("train", examples=["test"], description="hf: the split to read")
    columns: dict[str, str] = Field(default_factory=dict,
                                    description="hf: which column holds each field, e.g. {prompt: question, "
                                                f"reply: answer}}; fields: {', '.join(DATASET_COLUMNS)}")
    sample: Optional[int] = Field(None, ge=1, le=MAX_DISTINCT,
                                  description="use this many entries, drawn with load.seed (default: every entry, "
                                              "in file order)")
    min_input_tokens: Optional[int] = Field(None, examples=[4], ge=0, le=MAX_TOKENS,
                                            description="skip prompts shorter than this (in tokens of "
                                                        "workload.tokenizer, else approximated)")
    max_input_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS, description="skip prompts longer than this")
    min_output_tokens: Optional[int] = Field(None, examples=[16], ge=0, le=MAX_TOKENS,
                                             description="skip entries asking for fewer output tokens")
    max_output_tokens: Optional[int] = Field(None, ge=1, le=MAX_TOKENS,
                                             description="skip entries asking for more output tokens")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.hf is None):
            raise ValueError("expected exactly one of path (a local file) or hf (a Hugging Face dataset)")
        unknown = sorted(set(self.columns) - set(DATASET_COLUMNS))
        if unknown:
            raise ValueError(f"columns: unknown field(s) {', '.join(unknown)}; expected {', '.join(DATASET_COLUMNS)}")
        if self.columns and self.hf is None:
            raise ValueError("columns: only for hf datasets (a file's fields have fixed names)")
        return self


def as_dataset(value: "str | Dataset") -> Dataset:
    """``workload.dataset`` as a :class:`Dataset` (a string is the path of a file)."""
    return Dataset(path=value) if isinstance(value, str) else value


CONVERSATION_APIS = ("openai-chat", "openai-completions")
IMAGE_APIS = ("openai-chat", "anthropic-messages", "openai-responses")  # the APIs that take images
MAX_TURNS = 1000  # user turns of one session at most (a record's seq leaves room for this many, see records/schema)


class ThinkTime(Strict):
    """A user's pause between an answer and the next turn, drawn per turn of each conversation."""

    mean: Duration = Field(description="the mean pause, e.g. 2s")
    distribution: Literal["constant", "exponential"] = Field(
        "exponential", description="exponential (the pauses of independent users) or constant")


def _think(v: Any) -> Any:
    return {"mean": v, "distribution": "constant"} if isinstance(v, (int, float, str)) and not isinstance(v, bool) \
        else v


class Conversations(Strict):
    """Multi-turn sessions: every arrival of an open-loop phase starts a session (a closed-loop worker holds one
    session after another); each turn sends the whole history, the server's own answers included."""

    turns: Optional[Tokens] = Field(None, description="user turns per session: a number or {mean, stddev, min, "
                                                      "max}; default: a dataset conversation's own turns, else 4")
    think_time: Annotated[ThinkTime, BeforeValidator(_think)] = Field(
        default_factory=lambda: ThinkTime(mean=0.0, distribution="constant"),
        description="pause between an answer and the next turn: a duration (constant), or {mean: 2s, "
                    "distribution: exponential}; turn n+1 is due at turn n's end plus this, and its latency "
                    "counts from then")

    @field_validator("turns")
    @classmethod
    def _turns(cls, v):
        if v is not None and (v.mean > MAX_TURNS or v.min > MAX_TURNS or (v.max is not None and v.max > MAX_TURNS)):
            raise ValueError(f"at most {MAX_TURNS} turns a session")
        return v


class Workload(Strict):
    tokenizer: Optional[str] = Field(
        None, description="count tokens as the model does: a tokenizer.json, a model folder, a Hugging Face model "
                          "id in the local cache, or 'server' (the target's /tokenize). Synthetic prompts then have "
                          "exactly input_tokens tokens; with workload.images, a preprocessor_config.json beside it "
                          "(Qwen2-VL or LLaVA style) counts each image's tokens too. Default: approximated, 4 "
                          "characters a token")
    prompts: Prompts = Field(default_factory=Prompts, description="synthetic prompts: their lengths and how many "
                                                                  "distinct ones")
    dataset: Optional[Union[str, Dataset]] = Field(None, description="prompts from a dataset: a file path "
                                                                     "(relative to the scenario), or an object")
    ignore_eos: bool = Field(False, description="send ignore_eos (vLLM, SGLang): the server generates every token "
                                                "asked for, so answers have the asked length")
    max_tokens: Optional[int] = Field(None, examples=[128], ge=1, le=MAX_TOKENS,
                                      description="fixed max_tokens; default: output_tokens drawn per request")
    cancel: Optional[Cancel] = Field(None, description="abort a share of requests client-side, e.g. "
                                                       "{fraction: 0.1, after: 500ms} or {fraction: 0.1, "
                                                       "after_tokens: 20}")
    conversations: Optional[Conversations] = Field(
        None, description="multi-turn sessions, e.g. {turns: 4, think_time: 2s}: each turn resends the history "
                          f"with the server's answers ({', '.join(CONVERSATION_APIS)}); with a dataset, each "
                          "conversation's user turns in order")
    prefix: Optional[Prefix] = Field(None, description="shared system prompts, e.g. {tokens: 512, groups: 8}: "
                                                       "each request opens with one of `groups` prefixes of "
                                                       "`tokens` tokens, then its own prompt")
    tools: Optional[ToolsField] = Field(
        None, examples=[{"generate": {"count": 8, "tokens": 200}, "choice": "auto"}],
        description="tools offered with each request (openai-chat, openai-responses, anthropic-messages): a list of "
                    "definitions, or {definitions | generate, choice, result_tokens}")
    response_format: Optional[ResponseFormat] = Field(
        None, examples=[{"type": "json_object"}],
        description="structured output (openai-chat, openai-responses): OpenAI's response_format; each answer's "
                    "JSON validity and schema match are recorded")
    audio: Optional[Audio] = Field(None, examples=[{"count": 1, "duration": "5s"}],
                                   description="audio sent with each request: input_audio parts (openai-chat), or "
                                               "the file uploaded to api: openai-transcriptions")
    images: Optional[Images] = Field(None, examples=[{"count": 1, "sizes": ["256x256", "512x512"]}],
                                     description="images sent with each request (openai-chat, anthropic-messages, "
                                                 "openai-responses): synthetic, a folder, a JSON-lines file or URLs")

    @model_validator(mode="after")
    def _prefix_groups_used(self):
        if self.prefix is not None and self.conversations is not None:
            raise ValueError("prefix: not with conversations (a conversation's turns carry their own history)")
        if self.prefix is not None and self.dataset is None and self.prefix.groups > self.prompts.distinct:
            raise ValueError(f"prefix.groups ({self.prefix.groups}) exceeds prompts.distinct "
                             f"({self.prompts.distinct}): prompt i opens with prefix i % groups, so some prefixes "
                             "would never be sent")
        return self


def _trace_start(v: Any) -> Any:
    return v if v == "first" else _duration(v)


#: Trace options that may also be written directly under ``load`` (``load: {mode: trace, file: ..., speed: 2}``).
TRACE_FIELDS = ("file", "speed", "start", "duration", "max_requests", "block_tokens", "too_long", "max_model_len",
                "max_input_tokens")


class Trace(Strict):
    """Replay a request trace: each request sent at its timestamp divided by ``speed``, with its own input and
    output length and prefix blocks (formats: :mod:`loadgen.scenario.trace`; Mooncake's JSONL as is)."""

    file: str = Field(description="the trace, relative to the scenario: JSON lines (Mooncake: timestamp in ms, "
                                  "input_length, output_length, hash_ids) or CSV with a header row")
    speed: float = Field(1.0, gt=0, le=1_000_000, description="replay speed: 2 sends the trace twice as fast "
                                                             "(run time = (timestamp - start) / speed)")
    start: Annotated[Union[Literal["first"], float], BeforeValidator(_trace_start)] = Field(
        0.0, description="trace time at which the replay starts (a duration, e.g. 10m; requests before it are "
                         "skipped), or 'first': the first request's timestamp. Default 0: run time = timestamp")
    duration: Optional[PositiveDuration] = Field(None, examples=["5m"],
                                                 description="replay only this much trace time from start")
    max_requests: Optional[int] = Field(None, examples=[1000], ge=1, le=MAX_REQUESTS,
                                        description="replay at most this many requests (the first ones from start)")
    block_tokens: int = Field(512, ge=1, le=MAX_TOKENS, description="tokens of one hash-id block (Mooncake: 512); "
                                                                  "requests sharing a hash id share that block")
    too_long: Literal["clip", "refuse"] = Field(
        "clip", description="a request longer than the target accepts: clip = cut its input to leave room for its "
                            "output (an output that alone fills the context is cut instead), counted in the "
                            "summary; refuse = an error naming the trace's lines, before anything is sent (exit 2)")
    max_model_len: Optional[int] = Field(
        None, examples=[4096], ge=2, le=100_000_000,
        description="the target's context in tokens: prompt, plus what the server adds, plus output must fit in it. "
                    "Default: the max_model_len the target reports at /v1/models (vLLM and the reference server do)")
    max_input_tokens: Optional[int] = Field(None, examples=[3072], ge=1, le=100_000_000,
                                            description="the longest prompt the target accepts, in tokens")


class Ramp(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    start: Union[float, str] = Field(examples=[10],
                                     alias="from", description="the rate at the phase's start: a number or 'N%'")
    end: Union[float, str] = Field(examples=["200%"], alias="to", description="the rate at its end, reached linearly")


class Phase(Strict):
    name: Annotated[str, AfterValidator(_scope_name)] = Field(description="the phase's name: in reports and SLO "
                                                                          "scopes")
    duration: Duration = Field(description="how long the phase sends")
    qps: Optional[Union[float, str, Ramp]] = Field(None, description="arrival rate: number, 'N%' of expected_qps, "
                                                                     "or {from, to}")
    concurrency: Optional[int] = Field(None, ge=1, le=MAX_CONCURRENCY, description="closed loop: N workers")
    record: bool = Field(True, description="false: traffic is sent and stored but left out of statistics")
    arrival: Optional[Literal["constant", "poisson", "gamma"]] = Field(
        None, description="this phase's arrival process; unset: load.arrival")
    max_requests: Optional[int] = Field(None, ge=1, le=MAX_REQUESTS,
                                        description="stop the phase after this many requests")

    @field_validator("qps")
    @classmethod
    def _qps(cls, v, info: ValidationInfo):
        if v is None:
            return v
        expected = (info.context or {}).get("expected_qps")
        points = [v.start, v.end] if isinstance(v, Ramp) else [v]
        for p in points:
            rate = parse_rate(p, expected)
            if rate > MAX_QPS:
                raise ValueError(f"at most {MAX_QPS:,.0f} requests per second, got {p!r}")
        if not isinstance(v, Ramp) and parse_rate(v, expected) <= 0:
            raise ValueError(f"expected a rate above 0, got {v!r}")
        return v

    def rates(self, expected_qps: float | None) -> tuple[float, float]:
        """(start, end) arrival rate in requests per second; equal for a constant rate."""
        if isinstance(self.qps, Ramp):
            return parse_rate(self.qps.start, expected_qps), parse_rate(self.qps.end, expected_qps)
        r = parse_rate(self.qps, expected_qps)
        return r, r

    @field_validator("duration")
    @classmethod
    def _dur(cls, v: float) -> float:
        if v <= 0 or v > MAX_DURATION:
            raise ValueError(f"expected a duration above 0 and at most {MAX_DURATION / 86400:.0f} days")
        return v

    @model_validator(mode="after")
    def _rate_or_concurrency(self):
        if (self.qps is None) == (self.concurrency is None):
            raise ValueError("expected exactly one of qps (open loop) or concurrency (closed loop)")
        return self


class Sweep(Strict):
    """Sugar for a list of steady phases: one per rate (open loop) or per concurrency (closed loop)."""

    qps: Optional[list[Union[float, str]]] = Field(None, max_length=MAX_PHASES,
                                                   description="rates, numbers or percentages of expected_qps")
    concurrency: Optional[list[int]] = Field(None, examples=[[1, 2, 4, 8, 16]], max_length=MAX_PHASES,
                                             description="closed-loop steps: one per concurrency")
    duration: Duration = Field(description="length of each step")
    warmup: Duration = Field(0.0, description="an unrecorded warm-up at the first step's load")

    @model_validator(mode="after")
    def _one(self):
        if (self.qps is None) == (self.concurrency is None) or not (self.qps or self.concurrency):
            raise ValueError("expected exactly one non-empty list: qps or concurrency")
        return self

    def phases(self) -> list[dict]:
        key, values = ("qps", self.qps) if self.qps is not None else ("concurrency", self.concurrency)
        out = [{"name": "warmup", "duration": self.warmup, key: values[0], "record": False}] if self.warmup > 0 else []
        label = lambda v: f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
        return out + [{"name": f"{key}-{label(v)}", "duration": self.duration, key: v} for v in values]


class Load(Strict):
    mode: Optional[Literal["open", "closed", "trace"]] = Field(
        None, description="open: every phase gives an arrival rate (qps); closed: every phase a concurrency; "
                          "trace: replay load.trace (no phases); unset: each phase says which")
    arrival: Literal["constant", "poisson", "gamma"] = Field(
        "poisson", description="arrival process of open-loop phases: constant gaps, poisson (exponential gaps), gamma "
                               "(with burstiness)")
    burstiness: float = Field(1.0, examples=[0.5],
                              gt=0, le=100, description="gamma shape: 1 = Poisson, < 1 burstier, > 1 smoother")
    expected_qps: Optional[float] = Field(None, gt=0, le=MAX_QPS, description="the rate the service is planned for: "
                                          "a phase's 'N%' is of it, and headroom is measured against it")
    phases: list[Phase] = Field(default_factory=list, max_length=MAX_PHASES,
                                description="consecutive phases (at most 10,000); or give `sweep` instead (none "
                                            "with a trace)")
    trace: Optional[Trace] = Field(None, examples=[{"file": "data/trace_small.jsonl", "speed": 2.0}],
                                   description="replay a request trace instead of phases: one phase named "
                                                     "'trace', open loop, at the trace's timestamps / speed")
    sweep: Optional[Sweep] = Field(None, description="a list of rates or concurrencies, expanded into phases")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of arrivals and prompts (numpy needs it non-negative)")
    max_in_flight: int = Field(10_000, examples=[1000],
                               ge=1, le=1_000_000, description="requests in flight at most; past it a "
                                                                       "request is recorded as dropped, never delayed")
    send_lag_threshold: PositiveDuration = Field(0.005, examples=["10ms"],
                                                 description="p99 send lag above this marks the run generator-limited")
    host_wait_limit: float = Field(1 / 3, examples=[0.5],
                                   gt=0, le=1, description="a managed server (latbench, for an external "
                                   "target) that waited for a CPU over this share of the time it had work, in a "
                                   "recorded phase, makes the run invalid: host contended (1: never)")
    grace: Duration = Field(5.0, examples=["10s"],
                            description="after the last phase, how long in-flight requests may finish")
    @model_validator(mode="before")
    @classmethod
    def _fold_trace(cls, data: Any) -> Any:
        """``load: {mode: trace, file: t.jsonl, speed: 2}`` is ``load: {mode: trace, trace: {file: ..., speed: 2}}``."""
        if isinstance(data, dict) and data.get("mode") == "trace" and any(k in data for k in TRACE_FIELDS):
            trace = dict(data["trace"]) if isinstance(data.get("trace"), dict) else {}
            trace.update({k: data[k] for k in TRACE_FIELDS if k in data})
            return {**{k: v for k, v in data.items() if k not in TRACE_FIELDS}, "trace": trace}
        return data

    @model_validator(mode="before")
    @classmethod
    def _expand_sweep(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("sweep") is not None and "phases" not in data:
            try:
                sweep = Sweep.model_validate(data["sweep"])
            except Exception:
                return {**data, "phases": [{"name": "sweep", "duration": 1, "qps": 1}]}  # the sweep's own errors report
            return {**data, "phases": sweep.phases()}
        return data

    starts: int = Field(1, ge=1, le=100, description="cold-start studies: run the phases this many times, each "
                                                     "against a freshly started target (reference or command targets)")

    @model_validator(mode="after")
    def _mode_fits_phases(self):
        """``mode`` is a promise about every phase: a phase that breaks it is named."""
        if self.trace is not None or self.mode == "trace":
            if self.trace is None:
                raise ValueError("load.mode trace needs a trace: give load.file (or load.trace: {file: ...})")
            if self.mode not in (None, "trace"):
                raise ValueError(f"load.mode is {self.mode}, but a trace is given: its arrivals are the trace's "
                                 "(mode: trace)")
            if self.phases or self.sweep is not None:
                raise ValueError("a trace replay has no phases or sweep: its one phase, 'trace', is the trace's")
            return self
        if not self.phases:
            raise ValueError("expected at least one phase (load.phases), a sweep or a trace")
        if self.mode is not None:
            for i, ph in enumerate(self.phases):
                closed = ph.concurrency is not None
                if closed != (self.mode == "closed"):
                    want = "concurrency (closed loop)" if self.mode == "closed" else "qps (open loop)"
                    raise ValueError(f"phases[{i}] ({ph.name!r}): load.mode is {self.mode}, "
                                     f"so every phase gives {want}")
        return self

    def phase_names(self) -> list[str]:
        """The names of the run's phases (a trace replay has one: ``trace``)."""
        return ["trace"] if self.trace is not None and not self.phases else [p.name for p in self.phases]


class Repeat(Strict):
    """Run the whole scenario several times, each run from a fresh managed server, interleaved across targets."""

    runs: int = Field(1, examples=[5],
                      ge=1, le=100, description="how many times to run the scenario (3 or 5 for a CI gate); each "
                                                   "run's records are kept, and the verdict is on the runs together")
    pause: Duration = Field(0.0, description="wait this long between two runs (e.g. 5s: let the machine settle)")
    judge: Literal["median", "upper"] = Field(
        "median", description="how objectives are judged over the runs: median = the median run must meet it; "
                              "upper = the pessimistic bound of the between-run 95% interval must (per objective: "
                              "suffix '@median' or '@upper')")


def slo_line(v: Any) -> SLO:
    """One ``slo:`` entry as written in YAML: a line, or the mapping YAML makes of a scoped line."""
    if isinstance(v, SLO):
        return v
    if isinstance(v, dict) and len(v) == 1:  # YAML reads `- burst: latency.p99 < 800ms` as a mapping
        (scope, expr), = v.items()
        return parse_slo(f"{scope}: {expr}")
    return parse_slo(v)


SloLine = Annotated[
    SLO,
    BeforeValidator(slo_line),
    WithJsonSchema({"type": "string", "description": "[scope:] metric.stat op value, e.g. 'latency.p99 < 300ms'"}),
]


class _GoodputBase(Strict):
    """Per-request objectives (DistServe; vLLM's ``--goodput``): a request is good when it succeeded and met
    every bound given. ``scope`` as in SLO lines: a phase, a target, or ``target/phase``; unscoped: everywhere.
    Where several entries apply, each bound comes from the most specific one that gives it.

    The bounds are the metrics :mod:`loadgen.metric_registry` marks ``goodput`` (one field each, made from the
    registry below); one registered after this module loaded (a test's) is accepted too, its bound kept in
    ``later``."""

    scope: Optional[str] = Field(None, examples=["naive/burst"],
                                 description="a phase, a target or target/phase; none: every request")
    later: SkipJsonSchema[dict[str, float]] = Field(default_factory=dict, exclude=True, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _registered_later(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "later" in data:  # filled here only; a scenario may not write it
            raise ValueError("later: extra inputs are not permitted")
        later = [k for k in data if k not in cls.model_fields and k in metric_registry.goodput_metrics()]
        if not later:
            return data
        return {k: v for k, v in data.items() if k not in later} | {"later": {k: _duration(data[k]) for k in later}}

    @model_validator(mode="after")
    def _some_bound(self):
        if not self.bounds():
            raise ValueError(f"expected at least one per-request bound: {', '.join(metric_registry.goodput_metrics())}")
        return self

    def bounds(self) -> dict[str, float]:
        """The bounds given, metric -> seconds."""
        given = {m: getattr(self, m, None) for m in metric_registry.goodput_metrics()} | self.later
        return {m: v for m, v in given.items() if v is not None}

    def scope_parts(self) -> tuple[str | None, str | None]:
        """(target, phase_or_target) of the scope, as :meth:`SLO.scope_parts`."""
        return split_scope(self.scope)


GoodputObjectives = create_model(
    "GoodputObjectives", __base__=_GoodputBase, __module__=__name__, __doc__=_GoodputBase.__doc__,
    **{m: (Optional[Duration], Field(None, examples=["500ms"], description=metric_registry.metric(m).goodput_doc))
       for m in metric_registry.goodput_metrics()})


def _goodput_list(v: Any) -> Any:
    return [v] if isinstance(v, dict) else v


def _scope_problem(tgt: str | None, name: str | None, scope: str | None, targets: set, phases: set) -> str | None:
    """What is wrong with an objective's scope (None when it names a known phase, target or target/phase)."""
    if tgt is not None and (tgt not in targets or name not in phases):
        return (f"scope {scope!r} must be target/phase with a target among {sorted(targets) or 'none'} and a "
                f"phase among {sorted(phases)}")
    if tgt is None and name is not None and name not in phases | targets:
        return (f"unknown scope {name!r}, expected a phase ({', '.join(sorted(phases))})"
                + (f" or a target ({', '.join(sorted(targets))})" if targets else ""))
    return None


class Scenario(Strict):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    name: Annotated[str, AfterValidator(_plain_name)] = Field(description="short name; used in the RunDir's name")
    description: str = Field("", description="what the scenario answers, in a sentence (reports show it)")
    target: Optional[Target] = Field(None, description="the target measured (exactly one of target or targets)")
    targets: Optional[list[Target]] = Field(None, description="several named targets, measured alike and compared "
                                                              "side by side")
    workload: Workload = Field(default_factory=Workload, description="what each request asks for")
    load: Load = Field(description="when requests are sent: phases, a sweep or a trace")
    slo: list[SloLine] = Field(default_factory=list)
    goodput: Annotated[Optional[list[GoodputObjectives]], BeforeValidator(_goodput_list)] = Field(
        None, description="per-request objectives that make a request 'good', e.g. {ttft: 200ms, tpot: 50ms, "
                          "latency: 2s}; or a list of them, each with an optional scope. Without it no goodput "
                          "is computed")
    repeat: Repeat = Field(examples=[{"runs": 3, "pause": "5s"}],
                           default_factory=Repeat, description="repeated runs: between-run intervals and verdicts")

    @model_validator(mode="after")
    def _one_repetition_model(self):
        if self.repeat.runs > 1 and self.load.starts > 1:
            raise ValueError("repeat.runs and load.starts both repeat the run from fresh servers: give one of them")
        return self

    @model_validator(mode="after")
    def _trace_makes_the_prompts(self):
        if self.load.trace is not None and self.workload.dataset is not None:
            raise ValueError("workload.dataset: a trace replay makes its prompts from the trace's lengths and hash "
                             "ids; drop the dataset (or the trace)")
        if self.load.trace is not None and self.workload.conversations is not None:
            raise ValueError("workload.conversations: a trace replay sends each of its requests once, at its own "
                             "time; drop the conversations (or the trace)")
        if self.load.trace is not None and self.workload.prefix is not None:
            raise ValueError("workload.prefix: a trace's requests share prefixes as its hash ids say; drop the "
                             "prefix (or the trace)")
        return self

    @model_validator(mode="after")
    def _targets(self):
        if (self.target is None) == (self.targets is None):
            raise ValueError("expected exactly one of target or targets")
        if self.targets is not None:
            if not self.targets:
                raise ValueError("targets: expected at least one target")
            names = [t.name for t in self.targets]
            if any(n is None for n in names):
                raise ValueError("targets: every target needs a name")
            if len(set(names)) != len(names):
                raise ValueError("targets: names must be unique")
        return self

    @model_validator(mode="after")
    def _image_apis(self):
        if self.workload.images is not None:
            for t in self.target_list():
                if t.api not in IMAGE_APIS:
                    raise ValueError(f"workload.images: target {t.name!r} speaks {t.api}; images need one of "
                                     f"{', '.join(IMAGE_APIS)}")
            if self.workload.conversations is not None:
                raise ValueError("workload.images: not with conversations (each turn would resend them; give "
                                 "images in a dataset's messages instead)")
            if self.load.trace is not None:
                raise ValueError("workload.images: not with a trace replay (a trace gives its requests' text only)")
        return self

    @model_validator(mode="after")
    def _audio_apis(self):
        audio = self.workload.audio
        for t in self.target_list():
            if audio is not None and t.api not in ("openai-chat", "openai-transcriptions"):
                raise ValueError(f"workload.audio: target {t.name!r} speaks {t.api}; audio needs openai-chat or "
                                 "openai-transcriptions")
            if t.api == "openai-transcriptions" and audio is None:
                raise ValueError(f"target {t.name!r}: api openai-transcriptions needs workload.audio (the clips "
                                 "it uploads)")
        if audio is not None and (self.workload.conversations is not None or self.load.trace is not None):
            raise ValueError("workload.audio: not with conversations or a trace replay")
        return self

    @model_validator(mode="after")
    def _tool_apis(self):
        if self.workload.tools is not None:
            for t in self.target_list():
                if t.api not in IMAGE_APIS:
                    raise ValueError(f"workload.tools: target {t.name!r} speaks {t.api}; tools need one of "
                                     f"{', '.join(IMAGE_APIS)}")
                if "tools" in t.extra_body or "tool_choice" in t.extra_body:
                    raise ValueError(f"workload.tools: target {t.name!r} also sets tools in extra_body; give them "
                                     "in one place")
        return self

    @model_validator(mode="after")
    def _response_format_apis(self):
        if self.workload.response_format is not None:
            for t in self.target_list():
                if t.api not in ("openai-chat", "openai-responses"):
                    raise ValueError(f"workload.response_format: target {t.name!r} speaks {t.api}; structured "
                                     "output needs openai-chat or openai-responses")
                if "response_format" in t.extra_body or "text" in t.extra_body:
                    raise ValueError(f"workload.response_format: target {t.name!r} also sets it in extra_body; "
                                     "give it in one place")
        return self

    @model_validator(mode="after")
    def _conversation_apis(self):
        if self.workload.conversations is not None:
            for t in self.target_list():
                if t.api not in CONVERSATION_APIS:
                    raise ValueError(f"workload.conversations: target {t.name!r} speaks {t.api}; conversations "
                                     f"need one of {', '.join(CONVERSATION_APIS)}")
        return self

    @model_validator(mode="after")
    def _slo_scopes(self):
        phases = set(self.load.phase_names())
        targets = ({t.name for t in (self.targets or [])}
                   | ({self.target.name} if self.target and self.target.name else set()))
        bad = []
        for i, s in enumerate(self.slo):
            problem = _scope_problem(*s.scope_parts(), s.scope, targets, phases)
            if problem:
                bad.append(f"slo[{i}] {s.expr!r}: {problem}")
            if s.metric in ("goodput", "goodput_qps") and not self.goodput:
                bad.append(f"slo[{i}] {s.expr!r}: goodput needs per-request objectives: add a goodput: block "
                           "such as {ttft: 200ms, tpot: 50ms, latency: 2s}")
        for i, g in enumerate(self.goodput or []):
            problem = _scope_problem(*g.scope_parts(), g.scope, targets, phases)
            if problem:
                bad.append(f"goodput[{i}]: {problem}")
        if bad:
            raise ValueError("\n".join(bad))
        return self

    def target_list(self) -> list[Target]:
        if self.targets is not None:
            return self.targets
        t = self.target
        return [t if t.name else t.model_copy(update={"name": "target"})]
