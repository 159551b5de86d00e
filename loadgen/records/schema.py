"""The per-request record: its schema, a columnar buffer, and the incremental parquet writer.

Every request the engine sends yields exactly one record. All times are seconds from the run's start
(``t0``) on one monotonic clock, ``time.perf_counter``. A time that did not happen is NaN.

| column          | type          | meaning                                                               |
|-----------------|---------------|-----------------------------------------------------------------------|
| seq             | int64         | index of the request in the run's arrival schedule                    |
| phase           | int16         | index into the scenario's phases                                      |
| recorded        | bool          | False for phases with ``record: false`` (warm-up): stored, not counted |
| scheduled       | float64       | intended send time (open loop) or send time (closed loop)             |
| sent            | float64       | when the request was handed to the socket                             |
| connect_start   | float64       | a new connection was started for this request (NaN when reused)       |
| connected       | float64       | that connection was ready (TCP and TLS done; NaN when reused)         |
| tls             | float64       | TLS handshake duration in seconds, when it could be measured         |
| first_byte      | float64       | first response byte (status line)                                     |
| first_token     | float64       | first token of a stream, of any kind: content, reasoning, tool call   |
| done            | float64       | last byte, or the moment the error was known                          |
| status          | int16         | HTTP status, 0 when no response came                                  |
| error           | string        | '' for success, else one of ERROR_CLASSES                             |
| prompt_tokens   | int32         | the prompt in tokens: the server's usage, else latbench's own count   |
|                 |               | (input_tokens + added_tokens); -1 when unknown                        |
| prompt_tokens_source | string   | where prompt_tokens came from (TOKEN_SOURCES; '' unknown)             |
| input_tokens    | int32         | the prompt as latbench built it, counted by latbench: content only    |
|                 |               | (no chat template, no special tokens); -1 when not counted (api: http)|
| added_tokens    | int32         | what the server adds around it, as latbench's tokenizer counts: the   |
|                 |               | chat template (chat APIs) or special tokens such as BOS; -1 unknown   |
| output_tokens   | int32         | the answer in tokens, by ``output_tokens_source``                     |
| output_tokens_source | string   | where output_tokens came from (TOKEN_SOURCES; '' unknown)             |
| bytes_in        | int64         | response bytes received (body)                                        |
| worker          | int16         | the generator process or Locust worker that sent it                   |
| token_times     | list<float32> | arrival of each token chunk, seconds after ``first_token``           |
| first_answer    | float64       | first answer token of a stream: content, tool call or text, not       |
|                 |               | reasoning (NaN when not streaming or no answer came)                  |
| reasoning_tokens| int32         | reasoning tokens: usage's ``completion_tokens_details.reasoning_tokens``|
|                 |               | when given, else counted reasoning chunks (0 when none)               |
| chunk_tokens    | list<int16>   | tokens carried by each token chunk (parallel to ``token_times``)      |
| chunk_tokens_source | string    | where chunk_tokens came from (CHUNK_TOKEN_SOURCES; '' no stream)     |
| session         | int64         | workload.conversations: the session this request is a turn of (the    |
|                 |               | seq of its first turn); -1 when not a conversation                    |
| turn            | int16         | the turn's index in its session (0 the first); -1 when not one        |
| user            | int32         | closed loop: which of the phase's users (workers) sent it, numbered   |
|                 |               | within the process in ``worker``; -1 open loop (and older files)      |
| images          | int16         | images the request sent (workload.images); 0 none                     |
| image_pixels    | int64         | their pixels (width x height, summed); -1 unknown (an image URL)      |
| image_bytes     | int64         | their bytes as image files (before base64); -1 unknown (an image URL) |
| tools           | int16         | tool definitions the request offered (workload.tools); 0 none         |
| tool_calls      | int16         | tool calls in the answer (streamed: distinct tool-call indices)       |
| tool_call_tokens| int32         | tokens of the calls' arguments: one per streamed argument chunk, else |
|                 |               | the arguments' text approximated (4 characters a token)               |
| first_tool_call | float64       | the first tool-call chunk of a stream (NaN: none, or not streaming)   |
| audio           | int16         | audio clips the request sent (workload.audio); 0 none                 |
| audio_seconds   | float64       | their duration in seconds, summed; -1 unknown (a clip given as a URL) |
| json_valid      | int8          | workload.response_format: the answer parsed as JSON (1) or not (0);   |
|                 |               | -1 not checked (no response_format, or no answer)                     |
| schema_valid    | int8          | and matched its json_schema (1) or not (0); -1 not checked            |
| image_tokens_est| int32         | the images' prompt tokens by latbench's count from the model's        |
|                 |               | processor config (workload.tokenizer's folder); -1 not known, 0 none  |
| media_cache_hits| int16         | of the request's images and audio clips, those the server's encoder   |
|                 |               | cache held (its usage's prompt_tokens_details.media_cache_hits, the   |
|                 |               | reference server's); -1 not said                                       |

Token times are stored relative to ``first_token`` in float32 (resolution better than 10 us for the
first minute of a stream), which keeps a 1000-token stream at 4 kB.

**Token counts and their sources.** A count is only as good as where it came from, so every count says
(:data:`TOKEN_SOURCES`): ``usage`` (the server's own ``usage`` object), ``tokenizer`` (latbench counted
with the scenario's ``workload.tokenizer``: a local tokenizer, or the target's ``/tokenize``),
``approximation`` (no tokenizer: one token per ``CHARS_PER_TOKEN`` characters), ``chunks`` (streamed
output without usage or tokenizer: one token per content chunk, a lower bound when a chunk carries
several). The sources are one vocabulary for every count column, so a per-chunk count (tokens per
stream chunk, a ``list<int16>`` beside ``token_times``) can be added with a ``chunk_tokens_source`` of
its own and new source names (per-chunk usage, usage spread over the chunks) appended to the tuple.
Files written before these columns existed are read with them filled in (:func:`read_records`).

**Tokens per chunk.** A stream chunk may carry several tokens (speculative decoding, a server's stream
interval), so a gap between chunks is not a gap between tokens. ``chunk_tokens`` says how many each chunk
carried, and ``chunk_tokens_source`` how that is known (:data:`CHUNK_TOKEN_SOURCES`): ``chunk_usage`` (the
server's per-chunk usage, as vLLM sends with ``stream_options.continuous_usage_stats``), ``usage_spread``
(the final usage spread over the chunks: the first chunk one token, the rest evenly, earlier chunks taking
the remainder), ``chunks`` (one per chunk: nothing else was known, or the usage was fewer tokens than chunks).

**Aborted requests.** ``error == "aborted"`` (:data:`ABORTED`) is not an error: the client aborted the
request on purpose (``workload.cancel``), as a user closes a tab. It is kept apart from ``cancelled``
(still in flight when the run stopped, an error) and from every latency distribution.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import struct
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.errors import RunDirWriteError

#: Error classes a record may carry. '' means success.
ERROR_CLASSES = (
    "connect",  # connection refused / unreachable
    "dns",  # the name did not resolve
    "tls",  # TLS handshake or certificate failure
    "timeout",  # the per-request timeout fired
    "reset",  # the peer closed or reset the connection before the response was complete
    "http_3xx",  # a redirect: never followed (the target's URL is not the endpoint; each request would pay twice)
    "http_429",  # rate limited / queue full
    "http_4xx",  # other client errors
    "http_5xx",  # server errors
    "bad_stream",  # a stream that broke protocol: no [DONE], an error event, garbage
    "bad_response",  # a non-streaming body that is not what the protocol expects
    "dropped",  # never sent: the in-flight cap was reached (open loop never delays)
    "cancelled",  # still in flight when the run stopped (interrupt, or the end-of-run grace expired)
    "other",  # anything else; the run's log names the exception type
)

#: Not an error: the client aborted the request on purpose (workload.cancel). Stored in the ``error`` column.
ABORTED = "aborted"
#: Where a record's chunk_tokens came from (see the module's docstring); '' means no token chunks.
CHUNK_TOKEN_SOURCES = ("chunk_usage", "usage_spread", "chunks")
#: Where a token count came from (see the module's docstring); '' means unknown. Stored as strings; append only.
TOKEN_SOURCES = ("usage", "tokenizer", "approximation", "chunks")

FLOAT_COLUMNS = ("scheduled", "sent", "connect_start", "connected", "tls", "first_byte", "first_token", "done")

SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("phase", pa.int16()),
        ("recorded", pa.bool_()),
        *[(name, pa.float64()) for name in FLOAT_COLUMNS],
        ("status", pa.int16()),
        ("error", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("prompt_tokens_source", pa.string()),
        ("input_tokens", pa.int32()),
        ("added_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("output_tokens_source", pa.string()),
        ("bytes_in", pa.int64()),
        ("worker", pa.int16()),
        ("token_times", pa.list_(pa.float32())),
        ("first_answer", pa.float64()),
        ("reasoning_tokens", pa.int32()),
        ("chunk_tokens", pa.list_(pa.int16())),
        ("chunk_tokens_source", pa.string()),
        ("session", pa.int64()),
        ("turn", pa.int16()),
        ("user", pa.int32()),
        ("images", pa.int16()),
        ("image_pixels", pa.int64()),
        ("image_bytes", pa.int64()),
        ("tools", pa.int16()),
        ("tool_calls", pa.int16()),
        ("tool_call_tokens", pa.int32()),
        ("first_tool_call", pa.float64()),
        ("audio", pa.int16()),
        ("audio_seconds", pa.float64()),
        ("json_valid", pa.int8()),
        ("schema_valid", pa.int8()),
        ("image_tokens_est", pa.int32()),
        ("media_cache_hits", pa.int16()),
    ]
)

_NUMPY_DTYPES = {
    "seq": np.int64,
    "phase": np.int16,
    "recorded": np.bool_,
    **{name: np.float64 for name in FLOAT_COLUMNS},
    "status": np.int16,
    "error": np.int8,  # index into ("",) + ERROR_CLASSES while buffered
    "prompt_tokens": np.int32,
    "prompt_tokens_source": np.int8,  # index into _SOURCE_NAMES while buffered
    "input_tokens": np.int32,
    "added_tokens": np.int32,
    "output_tokens": np.int32,
    "output_tokens_source": np.int8,
    "bytes_in": np.int64,
    "worker": np.int16,
    "first_answer": np.float64,
    "reasoning_tokens": np.int32,
    "chunk_tokens_source": np.int8,  # index into _CHUNK_SOURCE_NAMES while buffered
    "session": np.int64,
    "turn": np.int16,
    "user": np.int32,
}
#: The columns of what a request sent or got beyond text (images, tools, audio, structured output), with their
#: value for a request that had none: written only for requests that had some (:meth:`RecordBuffer.append`).
_FEATURE_DTYPES = {
    "images": np.int16,
    "image_pixels": np.int64,
    "image_bytes": np.int64,
    "tools": np.int16,
    "tool_calls": np.int16,
    "tool_call_tokens": np.int32,
    "first_tool_call": np.float64,
    "audio": np.int16,
    "audio_seconds": np.float64,
    "json_valid": np.int8,
    "schema_valid": np.int8,
    "image_tokens_est": np.int32,
    "media_cache_hits": np.int16,
}
_FEATURE_DEFAULTS = (0, 0, 0, 0, 0, 0, math.nan, 0, 0.0, -1, -1, 0, -1)
_NUMPY_DTYPES = {**_NUMPY_DTYPES, **_FEATURE_DTYPES}
_ERROR_NAMES = ("",) + ERROR_CLASSES + (ABORTED,)
_ERROR_INDEX = {name: i for i, name in enumerate(_ERROR_NAMES)}
#: The code of ``aborted`` in ``RecordBuffer.column("error")`` (0 is success).
ABORTED_CODE = _ERROR_INDEX[ABORTED]
_CHUNK_SOURCE_NAMES = ("",) + CHUNK_TOKEN_SOURCES
_CHUNK_USAGE, _USAGE_SPREAD, _ONE_PER_CHUNK = 1, 2, 3
_INT16_MAX = 32767
_SOURCE_NAMES = ("",) + TOKEN_SOURCES
_SOURCE_INDEX = {name: i for i, name in enumerate(_SOURCE_NAMES)}
_STRING_COLUMNS = {"error": _ERROR_NAMES, "prompt_tokens_source": _SOURCE_NAMES,
                   "output_tokens_source": _SOURCE_NAMES, "chunk_tokens_source": _CHUNK_SOURCE_NAMES}
#: How every records file is written. Dictionary pages for the string columns only: a time or a count is rarely
#: repeated, so a dictionary of them is built, found too large and dropped, at each row group (twice the
#: writer's CPU, and a larger file).
PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": list(_STRING_COLUMNS)}


@dataclass(frozen=True, slots=True)
class PromptCounts:
    """A prompt's length as latbench counted it, and the media it carries; the same object for every request that
    sends the prompt."""

    input_tokens: int = -1  # the content, without chat template or special tokens
    added_tokens: int = -1  # what the server adds as latbench's tokenizer counts it; -1 unknown
    source: str = ""  # "tokenizer" or "approximation"
    images: int = 0  # images the request sends (workload.images)
    image_pixels: int = 0  # their pixels, width x height summed; -1 unknown (an image given as a URL)
    image_bytes: int = 0  # their bytes as files (before base64); -1 unknown (a URL)
    tools: int = 0  # tool definitions the request offers (workload.tools)
    audio: int = 0  # audio clips the request sends (workload.audio)
    audio_seconds: float = 0.0  # their duration in seconds, summed; -1 unknown (a clip given as a URL, not fetched)
    media: bool = False  # any of images, tools or audio: the record's feature columns are written
    image_tokens_est: int = 0  # the images' prompt tokens by latbench's count (image_tokens); -1 not known

    @property
    def prompt_tokens(self) -> int:
        """What the server should count: input plus added tokens (input alone when the added are unknown)."""
        return self.input_tokens + max(self.added_tokens, 0) if self.input_tokens >= 0 else -1


@dataclass(slots=True)
class ToolCalls:
    """The tool calls of one answer, made by the protocol's handler at the first one (plain text answers have
    none: no object, no work). ``first`` is absolute ``perf_counter`` like the Outcome's times; ``calls`` keeps
    each call's (id, name, arguments) only when a conversation answers them."""

    first: float = math.nan  # the first tool-call chunk (streams)
    count: int = 0  # tool calls (distinct indices of a stream)
    tokens: int = 0  # argument tokens: streamed argument chunks, else approximated from the arguments' text
    calls: dict | None = None  # index -> [id, name, arguments], kept when a conversation answers them
    indices: set | None = None  # the stream's tool-call indices seen so far


@dataclass(slots=True)
class Outcome:
    """What a transport learns about one request while it is in flight.

    A short-lived object: the engine copies it into a :class:`RecordBuffer` when the request
    ends, so no Python object per request survives. Times are absolute ``perf_counter`` values
    until :meth:`RecordBuffer.append` subtracts the run's ``t0``.
    """

    sent: float = math.nan
    connect_start: float = math.nan
    connected: float = math.nan
    tls: float = math.nan
    first_byte: float = math.nan
    first_token: float = math.nan
    done: float = math.nan
    status: int = 0
    error: str = ""
    error_detail: str = ""  # for logs only, never written to the RunDir
    prompt_tokens: int = -1  # the server's usage.prompt_tokens; -1 when it sent none
    output_tokens: int = 0
    output_tokens_source: str = ""  # "usage", "tokenizer" or "chunks" (TOKEN_SOURCES), set by the protocol
    counts: PromptCounts | None = None  # the prompt's own count, from the Request (None: not counted)
    bytes_in: int = 0
    # absolute perf_counter of each token chunk: an array of C doubles, 8 bytes a token in flight (a list of
    # floats holds a 24-byte object per read besides its 8-byte slot); empty tuples until :meth:`start_tokens`
    token_times: array | tuple = ()
    first_answer: float = math.nan  # the first answer (not reasoning) token chunk, absolute perf_counter
    reasoning_tokens: int = 0
    chunk_tokens: list | tuple = ()  # tokens of each token chunk, when the server said (per-chunk usage); else
    #                                  left empty and filled in by RecordBuffer.append
    session: int = -1  # workload.conversations: the session this request is a turn of; -1 none
    turn: int = -1  # and its turn index (0 the first); -1 none
    user: int = -1  # closed loop: the user (worker) of the phase that sent it, within this process; -1 open loop
    answer: str | None = None  # the answer's text, kept only when asked (conversations resend it)
    tool_calls: ToolCalls | None = None  # the answer's tool calls, when it made any
    structured: tuple = (-1, -1)  # workload.response_format: (json_valid, schema_valid), 1 yes, 0 no, -1 unchecked
    media_cache_hits: int = -1  # images and clips the server's encoder cache held, as its usage says; -1 not said

    def start_tokens(self, now: float) -> None:
        """The first token chunk came at ``now``: ``first_token``, and the arrays the chunks go to (a protocol's
        handler calls it once, then appends to ``token_times`` and ``chunk_tokens``). Until then both are the
        empty tuple: two objects fewer for each request that carries no token."""
        self.first_token = now
        self.token_times = array("d")
        self.chunk_tokens = []


#: A buffered record: the columns, where its token chunks end in the buffer's token arrays (the list columns'
#: offsets), then the feature columns (packed: 183 bytes a record).
_BASE = {k: v for k, v in _NUMPY_DTYPES.items() if k not in _FEATURE_DTYPES}
_BUFFERED = {**_BASE, "tok_end": np.int32, **_FEATURE_DTYPES}
_ROW = np.dtype([(name, dt) for name, dt in _BUFFERED.items()])
#: One record's bytes as :data:`_ROW` lays them out (native order, no padding): ``pack_into`` writes a row in a
#: fifth of the time a structured-array row assignment takes (each of its fields is a numpy scalar conversion).
#: The base columns and ``tok_end`` go in one call; the feature columns, only for a request that had a feature,
#: in a second (a plain text request pays nothing for them: a new buffer holds their defaults).
_STRUCT_CODES = {("i", 8): "q", ("i", 4): "i", ("i", 2): "h", ("i", 1): "b", ("b", 1): "?", ("f", 8): "d"}


def _struct(dtypes) -> struct.Struct:
    return struct.Struct("=" + "".join(_STRUCT_CODES[np.dtype(dt).kind, np.dtype(dt).itemsize]
                                       for dt in dtypes))


_ROW_STRUCT = _struct([*_BASE.values(), np.int32])
_FEATURE_STRUCT = _struct(_FEATURE_DTYPES.values())
if _ROW_STRUCT.size + _FEATURE_STRUCT.size != _ROW.itemsize:
    raise AssertionError("the record structs do not lay a row out as the numpy row does")
_PACK = _ROW_STRUCT.pack_into
_PACK_FEATURES = _FEATURE_STRUCT.pack_into
_ROW_BYTES = _ROW.itemsize
_FEATURES_AT = _ROW_STRUCT.size  # the feature columns' offset in a row
_BASE_FIELDS = [*_BASE, "tok_end"]
_NO_COUNTS = PromptCounts()
_UNCHECKED = Outcome.__dataclass_fields__["structured"].default  # an answer no response_format checked
_OTHER = _ERROR_INDEX["other"]
# buffered as perf_counter values
_ABSOLUTE = (frozenset(FLOAT_COLUMNS) | {"first_answer", "first_tool_call"}) - {"scheduled", "tls"}


def _feature_defaults(rows: np.ndarray) -> np.ndarray:
    """``rows`` with every feature column holding its value for a request without the feature."""
    for name, value in zip(_FEATURE_DTYPES, _FEATURE_DEFAULTS):
        rows[name] = value
    return rows


def _fill_chunk_tokens(dest: np.ndarray, out: Outcome) -> int:
    """Write the tokens of each of ``out``'s token chunks into ``dest`` (one slot per chunk); return the source
    index. The server's per-chunk counts when it gave one per chunk; else its final usage spread over the
    chunks (the first chunk one token: what a prefill yields); else one per chunk."""
    k = len(dest)
    given = out.chunk_tokens
    if len(given) == k:
        dest[:] = np.minimum(given, _INT16_MAX)
        return _CHUNK_USAGE
    n = out.output_tokens
    if out.output_tokens_source == "usage" and n >= k:
        if k == 1:
            dest[0] = min(n, _INT16_MAX)
        else:
            base, extra = divmod(n - 1, k - 1)
            dest[0] = 1
            dest[1:] = min(base, _INT16_MAX)
            dest[1 : 1 + extra] = min(base + 1, _INT16_MAX)
        return _USAGE_SPREAD
    dest[:] = 1
    return _ONE_PER_CHUNK


class RecordBuffer:
    """Preallocated row storage for records (one packed numpy row each), grown by doubling, drained in batches.

    One structured-array row per record: :meth:`append` packs it in place (:data:`_PACK`; a value the packing
    refuses, say a float where an int goes, takes numpy's row assignment and its conversions);
    :meth:`drain` turns the rows into Arrow columns.
    """

    def __init__(self, capacity: int = 2048):
        self._cap = capacity
        self.n = 0  # rows buffered; public, read per record on the hot path (cheaper than len())
        self._rows = _feature_defaults(np.empty(capacity, dtype=_ROW))
        self._bytes = memoryview(self._rows.view(np.uint8))  # the rows' memory, for _PACK (a view: cheaper to lend)
        self._tok = np.empty(capacity * 4, dtype=np.float32)
        self._ctok = np.empty(capacity * 4, dtype=np.int16)  # chunk_tokens: parallel to _tok, the same offsets
        self._tok_n = 0
        self._t0 = 0.0
        # each string column's values, which drain takes by code; and pyarrow imports pandas at its first conversion
        # (0.2-1.5 s): here, not at import nor at the first flush
        self._strings = {name: pa.array(names, type=pa.string()) for name, names in _STRING_COLUMNS.items()}

    def __len__(self) -> int:
        return self.n

    def _grow(self) -> None:
        self._cap *= 2
        rows = _feature_defaults(np.empty(self._cap, dtype=_ROW))
        rows[: self.n] = self._rows[: self.n]
        self._rows = rows
        self._bytes = memoryview(rows.view(np.uint8))

    def append(self, seq: int, phase: int, recorded: bool, scheduled: float, out: Outcome, t0: float,
               worker: int = 0) -> None:
        """Store one finished request. ``scheduled`` is already relative to t0; ``out`` is absolute.

        ``t0`` is the same for every record of a buffer: absolute times are stored as they are and made
        relative in :meth:`drain`, one vector subtraction per column (the same float64 arithmetic).
        """
        i = self.n
        if i == self._cap:
            self._grow()
        self._t0 = t0
        source = 0
        counts = out.counts or _NO_COUNTS
        if out.prompt_tokens >= 0:
            prompt, prompt_source = out.prompt_tokens, 1  # "usage"
        elif counts is _NO_COUNTS:  # not counted (api: http): no property call
            prompt, prompt_source = -1, 0
        else:
            prompt, prompt_source = counts.prompt_tokens, _SOURCE_INDEX.get(counts.source, 0)
        times = out.token_times
        if times:
            k = len(times)
            need = self._tok_n + k
            if need > len(self._tok):
                size = max(need, 2 * len(self._tok))
                new = np.empty(size, dtype=np.float32)
                new[: self._tok_n] = self._tok[: self._tok_n]
                self._tok = new
                ctok = np.empty(size, dtype=np.int16)
                ctok[: self._tok_n] = self._ctok[: self._tok_n]
                self._ctok = ctok
            self._tok[self._tok_n : need] = np.asarray(times, dtype=np.float64) - out.first_token
            source = _fill_chunk_tokens(self._ctok[self._tok_n : need], out)
            self._tok_n = need
        error = _ERROR_INDEX.get(out.error, _OTHER)
        output_source = _SOURCE_INDEX.get(out.output_tokens_source, 0)
        try:  # the values as arguments, not a tuple unpacked (200 ns less), in _ROW's order
            _PACK(self._bytes, i * _ROW_BYTES, seq, phase, recorded, scheduled, out.sent, out.connect_start,
                  out.connected, out.tls, out.first_byte, out.first_token, out.done, out.status, error, prompt,
                  prompt_source, counts.input_tokens, counts.added_tokens, out.output_tokens, output_source,
                  out.bytes_in, worker, out.first_answer, out.reasoning_tokens, source, out.session, out.turn,
                  out.user, self._tok_n)
        except struct.error:  # a value the packing refuses (a float where an int goes): numpy's conversions
            self._rows[_BASE_FIELDS][i] = (
                seq, phase, recorded, scheduled, out.sent, out.connect_start, out.connected, out.tls, out.first_byte,
                out.first_token, out.done, out.status, error, prompt, prompt_source, counts.input_tokens,
                counts.added_tokens, out.output_tokens, output_source, out.bytes_in, worker, out.first_answer,
                out.reasoning_tokens, source, out.session, out.turn, out.user, self._tok_n)
        if counts.media or out.tool_calls is not None or out.structured is not _UNCHECKED:
            self._features(i, counts, out)
        self.n = i + 1

    def _features(self, i: int, counts: PromptCounts, out: Outcome) -> None:
        """Row ``i``'s feature columns: the images, tools and audio its request sent, its tool calls and the checks
        of its structured answer."""
        tc = out.tool_calls
        calls, call_tokens, first_call = (0, 0, math.nan) if tc is None else (tc.count, tc.tokens, tc.first)
        checked = out.structured
        values = (counts.images, counts.image_pixels, counts.image_bytes, counts.tools, calls, call_tokens, first_call,
                  counts.audio, counts.audio_seconds, checked[0], checked[1], counts.image_tokens_est,
                  out.media_cache_hits)
        try:
            _PACK_FEATURES(self._bytes, i * _ROW_BYTES + _FEATURES_AT, *values)
        except struct.error:  # a count past its column's range: numpy's conversions
            self._rows[list(_FEATURE_DTYPES)][i] = values

    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """One buffered column, rows ``start:stop``, times relative to t0 as :meth:`drain` gives them."""
        col = self._rows[name][start : self.n if stop is None else stop]
        return col - self._t0 if name in _ABSOLUTE else col

    def drain(self) -> pa.RecordBatch | None:
        """Return everything buffered as one Arrow batch and empty the buffer (None when empty)."""
        n = self.n
        if n == 0:
            return None
        rows = self._rows[:n]
        offsets = pa.array(np.concatenate((np.zeros(1, np.int32), rows["tok_end"])), type=pa.int32())
        arrays = []
        for name in SCHEMA.names:
            if name == "token_times":
                values = pa.array(self._tok[: self._tok_n].copy(), type=pa.float32())
                arrays.append(pa.ListArray.from_arrays(offsets, values))
            elif name == "chunk_tokens":  # the same offsets as token_times
                values = pa.array(self._ctok[: self._tok_n].copy(), type=pa.int16())
                arrays.append(pa.ListArray.from_arrays(offsets, values))
            elif name in _STRING_COLUMNS:  # by code, in Arrow (a Python str per row costs 30 ns)
                arrays.append(self._strings[name].take(pa.array(np.ascontiguousarray(rows[name]))))
            elif name in _ABSOLUTE:
                arrays.append(pa.array(rows[name] - self._t0, type=pa.float64()))
            else:
                arrays.append(pa.array(np.ascontiguousarray(rows[name]), type=SCHEMA.field(name).type))
        _feature_defaults(rows)  # the rows are written again: a plain request's feature columns are not written
        self.n = 0
        self._tok_n = 0
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def partial_path(path: str | os.PathLike) -> str:
    """Where a RecordWriter streams records before they become ``path`` (read back if the run dies)."""
    return os.fspath(path) + ".partial"


def part_path(path: str | os.PathLike, k: int) -> str:
    """Where engine process ``k`` of a multi-process run writes its share of ``path``'s records (merged into
    ``path`` when the run ends; what a killed run leaves instead: :func:`part_paths`)."""
    return f"{os.fspath(path)}.part{k}"


_PART = re.compile(r"\.part(\d+)$")


def part_paths(path: str | os.PathLike) -> list[str]:
    """The part files of ``path`` on disk, by process number: those a multi-process run killed before its merge
    left (a part with only its partial stream included)."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return []
    found = {int(m.group(1)) for e in entries if e.startswith(name) and (m := _PART.match(
        e[len(name):].removesuffix(".partial")))}
    return [part_path(path, k) for k in sorted(found)]


def _whole(path: str | os.PathLike) -> bool:
    return os.path.exists(path) or os.path.exists(partial_path(path))


def records_exist(path: str | os.PathLike) -> bool:
    """Whether records were written to ``path``: the finished file, its partial stream, or the part files of a
    multi-process run that did not merge them."""
    return _whole(path) or bool(part_paths(path))


def merge_tables(tables: list[pa.Table]) -> pa.Table:
    """The records of a multi-process run's parts as one table: sorted by (phase, seq), ``seq`` renumbered
    0..N-1 (a complete open-loop run gets the single-process run's very numbers)."""
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    table = table.sort_by([("phase", "ascending"), ("seq", "ascending")])
    return table.set_column(table.schema.get_field_index("seq"), "seq",
                            pa.array(np.arange(table.num_rows, dtype=np.int64)))


class RecordSink(Protocol):
    """Where an engine puts its drained record batches: a :class:`RecordWriter`, or anything that writes and
    closes like one (``loadgen.records.rotate.RotatingRecordWriter``, a writer that also observes)."""

    def write(self, batch: pa.RecordBatch | None) -> None:
        """Append a batch (None or empty: nothing); raise :class:`RunDirWriteError` when it cannot be stored."""

    def close(self) -> None:
        """Finish the files; safe to call twice."""


#: Rows a parquet row group holds, at most, when :meth:`RecordWriter.close` writes the file.
ROW_GROUP_ROWS = 65_536


class RecordWriter:
    """Streams record batches to ``requests.parquet.partial`` during the run; :meth:`close` makes ``requests.parquet``.

    During the run each batch is appended to the side-car ``.partial`` Arrow stream and flushed: readable at any
    moment, so a run killed (even with SIGKILL) keeps every whole batch, which :func:`read_records` reads back.
    Encoding and compressing the parquet file is left to :meth:`close`, which reads the stream back (memory-mapped)
    and writes it in row groups of ``row_group_rows``. Parquet row groups written at every flush took the generator's
    CPU while it was sending, competing with the load (and, on a small host, with the server) for what is not load
    generation (4.5% of the lean closed loop's CPU per request, measured). Row groups of 64k rows also keep a long,
    slow run's file (``latbench watch``: a batch a second) from being mostly metadata. A close that fails (disk full)
    keeps the stream, as any write failure does.
    """

    def __init__(self, path: str | os.PathLike, row_group_rows: int = ROW_GROUP_ROWS):
        self.path = os.fspath(path)
        self.partial_path = partial_path(self.path)
        self.row_group_rows = row_group_rows or ROW_GROUP_ROWS
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            if os.path.exists(self.path):  # a finished file of an earlier run here: the stream is the records now
                os.remove(self.path)
            self._sink = pa.OSFile(self.partial_path, "wb")
            self._stream = pa.ipc.new_stream(self._sink, SCHEMA)
        except OSError as exc:
            raise RunDirWriteError(exc.errno, f"cannot write records to {self.path}: {exc.strerror or exc}") from exc
        self.rows = 0
        self.closed = False
        #: the first write failure; after it nothing more is appended (a torn batch must stay the last one)
        self.error: RunDirWriteError | None = None
        self._lock = threading.Lock()  # the engine writes from a worker thread, and once more at the end

    def _failed(self, exc: Exception) -> RunDirWriteError:
        detail = getattr(exc, "strerror", None) or exc
        self.error = RunDirWriteError(getattr(exc, "errno", None), f"cannot write records to {self.path}: {detail}")
        return self.error

    def write(self, batch: pa.RecordBatch | None) -> None:
        """Append a batch to the stream. Raises :class:`RunDirWriteError` on a write failure, and again on every
        later call; rows already written stay readable through :func:`read_records`."""
        if batch is None or batch.num_rows == 0:
            return
        with self._lock:
            if self.error is not None:
                raise self.error
            try:
                self._stream.write_batch(batch)
                self._sink.flush()
            except OSError as exc:  # ENOSPC, EFBIG, EIO...: say which file, keep what is there
                raise self._failed(exc) from exc
            self.rows += batch.num_rows

    def close(self) -> None:
        """Write the parquet file from the stream and drop the stream; after a write failure, or when the parquet
        file cannot be written, keep the stream (what :func:`read_records` reads) and close quietly. Safe to call
        twice."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for f in (self._stream.close, self._sink.close):
                try:
                    f()
                except (OSError, pa.ArrowException) as exc:
                    if self.error is None and isinstance(exc, OSError):
                        self._failed(exc)
            if self.error is not None:
                return
            try:
                with pa.memory_map(self.partial_path) as src:  # zero-copy batches: no second copy of the run in memory
                    table = pa.ipc.open_stream(src).read_all()
                    with pq.ParquetWriter(self.path, SCHEMA, **PARQUET_OPTIONS) as out:
                        out.write_table(table, row_group_size=self.row_group_rows)
                    del table
            except (OSError, pa.ArrowException) as exc:  # the stream holds every row: keep it, as after any failure
                self._failed(exc)
                with contextlib.suppress(OSError):
                    os.remove(self.path)
                return
            os.remove(self.partial_path)


def read_records(path: str | os.PathLike, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a target's records, from ``requests.parquet`` or, for a run killed mid-write, the partial stream;
    for a multi-process run killed before it merged its parts, from the part files (each read as a single
    file is, so a part cut mid-write keeps its whole batches), merged as the run would have (:func:`merge_tables`).

    ``columns``: only these (of :data:`SCHEMA`, in its order), read alone from a finished file of today's schema
    (a report's figures need neither the token lists of every request nor its token counts)."""
    if not _whole(path) and (parts := part_paths(path)):
        return _select(merge_tables([_read_one(p) for p in parts]), columns)
    return _read_one(path, columns)


def _select(table: pa.Table, columns: Sequence[str] | None) -> pa.Table:
    return table if columns is None else table.select([c for c in SCHEMA.names if c in columns])


def _read_one(path: str | os.PathLike, columns: Sequence[str] | None = None) -> pa.Table:
    path = os.fspath(path)
    partial = partial_path(path)
    if os.path.exists(partial):
        batches, schema = [], SCHEMA
        try:
            with pa.OSFile(partial, "rb") as f:
                reader = pa.ipc.open_stream(f)
                schema = reader.schema
                while True:
                    try:
                        batches.append(reader.read_next_batch())
                    except StopIteration:
                        break
        except (pa.ArrowInvalid, OSError):
            pass  # a torn last batch: keep the whole ones
        return _select(_with_chunk_columns(_with_token_sources(pa.Table.from_batches(batches, schema=schema))),
                       columns)
    with pq.ParquetFile(path) as f:  # one file: pq.read_table would import pyarrow.dataset (0.2 s of CPU) to read it
        if columns is not None and f.schema_arrow.equals(SCHEMA):  # today's schema: what is asked, as it is
            return f.read(columns=[c for c in SCHEMA.names if c in columns])
        return _select(_with_chunk_columns(_with_token_sources(f.read())), columns)


def _with_token_sources(table: pa.Table) -> pa.Table:
    """Records written before token sources existed: ``usage_tokens`` becomes ``output_tokens_source``, a
    prompt count is the server's usage where there is one, and latbench's own counts are unknown."""
    if "usage_tokens" not in table.column_names:
        return table
    n = table.num_rows
    prompt = table.column("prompt_tokens").to_numpy()
    usage = table.column("usage_tokens").to_numpy(zero_copy_only=False)
    output = table.column("output_tokens").to_numpy()
    filled = {
        "prompt_tokens_source": pa.array(np.where(prompt >= 0, "usage", ""), type=pa.string()),
        "input_tokens": pa.array(np.full(n, -1, np.int32), type=pa.int32()),
        "added_tokens": pa.array(np.full(n, -1, np.int32), type=pa.int32()),
        "output_tokens_source": pa.array(np.where(usage, "usage", np.where(output > 0, "chunks", "")),
                                         type=pa.string()),
    }
    table = table.drop(["usage_tokens"])
    for name, arr in filled.items():
        table = table.append_column(name, arr)
    return table


def _with_chunk_columns(table: pa.Table) -> pa.Table:
    """Records written before first_answer, reasoning_tokens, chunk_tokens, session, turn, user and the image
    tool and structured-output columns existed, with them filled in (no answer time known, no reasoning seen, one
    token per chunk, no conversation, no closed-loop user known, no image, audio or tool sent, no answer checked); a
    current file as it is."""
    if all(name in table.column_names for name in SCHEMA.names):
        return table.select(SCHEMA.names).cast(SCHEMA)
    n = table.num_rows
    tt = table.column("token_times").combine_chunks() if n else pa.array([], type=pa.list_(pa.float32()))
    lengths = np.asarray(tt.value_lengths().fill_null(0), dtype=np.int64) if n else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    filled = {
        "first_answer": pa.array(np.full(n, np.nan), type=pa.float64()),
        "reasoning_tokens": pa.array(np.zeros(n, np.int32), type=pa.int32()),
        "chunk_tokens": pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()),
                                                 pa.array(np.ones(int(offsets[-1]), np.int16), type=pa.int16())),
        "chunk_tokens_source": pa.array(np.where(lengths > 0, "chunks", ""), type=pa.string()),
        "session": pa.array(np.full(n, -1, np.int64), type=pa.int64()),
        "turn": pa.array(np.full(n, -1, np.int16), type=pa.int16()),
        "user": pa.array(np.full(n, -1, np.int32), type=pa.int32()),
        "images": pa.array(np.zeros(n, np.int16), type=pa.int16()),
        "image_pixels": pa.array(np.zeros(n, np.int64), type=pa.int64()),
        "image_bytes": pa.array(np.zeros(n, np.int64), type=pa.int64()),
        "tools": pa.array(np.zeros(n, np.int16), type=pa.int16()),
        "tool_calls": pa.array(np.zeros(n, np.int16), type=pa.int16()),
        "tool_call_tokens": pa.array(np.zeros(n, np.int32), type=pa.int32()),
        "first_tool_call": pa.array(np.full(n, np.nan), type=pa.float64()),
        "audio": pa.array(np.zeros(n, np.int16), type=pa.int16()),
        "audio_seconds": pa.array(np.zeros(n), type=pa.float64()),
        "json_valid": pa.array(np.full(n, -1, np.int8), type=pa.int8()),
        "schema_valid": pa.array(np.full(n, -1, np.int8), type=pa.int8()),
        "image_tokens_est": pa.array(np.zeros(n, np.int32), type=pa.int32()),
        "media_cache_hits": pa.array(np.full(n, -1, np.int16), type=pa.int16()),
    }
    cols = [table.column(f.name) if f.name in table.column_names else filled[f.name] for f in SCHEMA]
    return pa.Table.from_arrays(cols, schema=SCHEMA)
