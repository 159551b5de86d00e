"""Request traces: reading them, every mistake named by file, line and field; the slice a scenario replays; and
fitting each request's lengths to what the target accepts.

**Format.** One request per line (JSON lines) or per row (CSV with a header row), told apart by content: a file
whose first non-blank character is ``{`` is JSON lines, anything else CSV. Fields:

============================  =====================================================================================
``timestamp``                 arrival time in **milliseconds** from the trace's start (a number >= 0; fractions
                              allowed); a replayed request is due at most 7 days into the run, as a phase lasts
``input_length``              prompt length in tokens (an integer from 1 to 1,000,000); ``input_tokens`` is the
                              same field
``output_length``             output length in tokens (1 to 1,000,000), sent as the request's ``max_tokens``;
                              ``output_tokens`` is the same field
``hash_ids`` (optional)       the prompt's blocks in order: block k is tokens ``[k*B, (k+1)*B)`` of the prompt
                              (B = ``load.trace.block_tokens``, 512 as in Mooncake). Requests that have the same id
                              at the same place share that block's text, so prompts that start with the same ids
                              share that prefix exactly. In CSV: integers separated by spaces, or a JSON list
============================  =====================================================================================

This is the public Mooncake trace format as is (``{"timestamp": 27482, "input_length": 6955, "output_length": 52,
"hash_ids": [46, 47, ...]}``); other keys are ignored. Lines may come in any order: the replay is in time order
(ties in file order), and request ``seq`` of a run is the ``seq``-th of the replayed slice in that order.

**The slice.** ``load.trace.start`` (a trace time, or ``first``), ``duration`` and ``max_requests`` cut a long
trace; request i of the slice is due at run time ``(timestamp_i - start) / speed`` seconds.

**Fitting.** A request fits when its input is at most ``max_input_tokens`` and input + what the server adds (chat
template, BOS) + output is at most ``max_model_len`` (the rule vLLM and the reference server apply). One that
does not is clipped or refused, as ``too_long`` says. Clipping cuts the input (from its end, so its leading blocks
are kept) to leave room for the whole output; only an output that alone fills the context is cut instead, to
what the input leaves (the input then to at most the context less one token).

One idea at several stages, request traces, so one file name: :mod:`loadgen.cli.trace` (the command).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.scenario.files import MAX_DATA_BYTES, UnreadableFile, read_capped
from loadgen.scenario.model import MAX_DURATION, MAX_TOKENS, Trace
from loadgen.scenario.problems import Problems

__all__ = ["Limits", "TraceData", "TraceError", "TraceSlice", "fit", "read_trace", "resolve_trace_path",
           "run_times", "select", "too_long_rows"]

MAX_TRACE_ERRORS = 20  # problems listed per trace; the rest are counted
END_PAD_S = 0.001  # the trace phase ends this long after its last arrival (when no duration is given)
FIELDS = {"timestamp": "timestamp", "input_length": "input_length", "input_tokens": "input_length",
          "output_length": "output_length", "output_tokens": "output_length", "hash_ids": "hash_ids"}


class TraceError(ValueError):
    """A trace that cannot be used: ``errors`` holds one ``file:line: field: what`` message per problem found."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class TraceData:
    """A trace in time order (ties in file order). ``hash_ids`` of request i are ``hash_values[hash_offsets[i]:
    hash_offsets[i + 1]]``; ``lines`` are the file lines the requests came from."""

    path: str
    times_ms: np.ndarray  # float64, ascending
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    hash_offsets: np.ndarray  # int64, len n + 1
    hash_values: np.ndarray  # int64
    lines: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.times_ms)

    def hash_ids(self, i: int) -> np.ndarray:
        return self.hash_values[self.hash_offsets[i] : self.hash_offsets[i + 1]]


class _Bad(ValueError):
    pass


def _count(value, field: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _Bad(f"{field}: expected a positive integer, got {value!r:.40}")
    if value > MAX_TOKENS:  # a prompt of 1e10 tokens would be 40 GB of text, made for each request
        raise _Bad(f"{field}: expected at most {MAX_TOKENS:,} tokens, got {value!r:.40}")
    return value


def _time(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Bad(f"timestamp: expected a number of milliseconds >= 0, got {value!r:.40}")
    return float(value)


def _hashes(value) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**62
                                              for h in value):
        raise _Bad(f"hash_ids: expected a list of integers >= 0, got {value!r:.60}")
    return value


def _row(obj: dict) -> tuple[float, int, int, list[int]]:
    """(timestamp ms, input, output, hash ids) of one record whose keys are already the canonical names."""
    for need in ("timestamp", "input_length", "output_length"):
        if need not in obj:
            alias = {"input_length": " (or input_tokens)", "output_length": " (or output_tokens)"}.get(need, "")
            raise _Bad(f"{need}: required field is missing{alias}")
    return (_time(obj["timestamp"]), _count(obj["input_length"], "input_length"),
            _count(obj["output_length"], "output_length"), _hashes(obj.get("hash_ids")))


def _canonical(obj: dict) -> dict:
    out: dict = {}
    for k, v in obj.items():
        name = FIELDS.get(k)
        if name is None:
            continue
        if name in out:
            raise _Bad(f"{k}: the same field is given twice ({name} and its alias)")
        out[name] = v
    return out


def _json_lines(raw: bytes, problems: Problems):
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except UnicodeDecodeError:
            problems.at(lineno, "not UTF-8 text")
            continue
        except ValueError as exc:
            problems.at(lineno, f"expected a JSON object, got invalid JSON ({exc})")
            continue
        except RecursionError:
            problems.at(lineno, "expected a JSON object, got JSON nested too deep to read")
            continue
        if not isinstance(obj, dict):
            problems.at(lineno, f"expected a JSON object, got {type(obj).__name__}")
            continue
        try:
            yield lineno, _row(_canonical(obj))
        except _Bad as exc:
            problems.at(lineno, str(exc))


def _csv_number(text: str, field: str):
    try:
        v = float(text)
    except ValueError:
        raise _Bad(f"{field}: expected a number, got {text!r:.40}") from None
    return int(v) if v.is_integer() and field != "timestamp" else v


def _csv_hashes(text: str):
    text = text.strip()
    if not text:
        return None
    if text.startswith("["):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: a list nested too deep to read
            raise _Bad(f"hash_ids: expected a JSON list or integers separated by spaces, got {text!r:.60}") from None
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise _Bad(f"hash_ids: expected integers separated by spaces, got {text!r:.60}") from None


def _csv_rows(raw: bytes, problems: Problems):
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problems.at(raw[: exc.start].count(b"\n") + 1, "not UTF-8 text")
        return
    reader = csv.reader(io.StringIO(text))
    header = None
    for row in reader:
        lineno = reader.line_num
        if not any(c.strip() for c in row):
            continue
        if header is None:
            header = [FIELDS.get(c.strip(), c.strip()) for c in row]
            missing = [f for f in ("timestamp", "input_length", "output_length") if f not in header]
            if missing:
                problems.at(lineno, f"{', '.join(missing)}: missing from the CSV header (columns: timestamp, "
                                     "input_length or input_tokens, output_length or output_tokens, hash_ids)")
                return
            continue
        if len(row) != len(header):
            problems.at(lineno, f"expected {len(header)} columns as the header names, got {len(row)}")
            continue
        try:
            obj = {}
            for name, cell in zip(header, row):
                if name == "hash_ids":
                    obj[name] = _csv_hashes(cell)
                elif name in ("timestamp", "input_length", "output_length"):
                    obj[name] = _csv_number(cell.strip(), name)
            yield lineno, _row(obj)
        except _Bad as exc:
            problems.at(lineno, str(exc))


def _parse(path: Path) -> TraceData:
    try:
        raw = read_capped(path, MAX_DATA_BYTES)
    except UnreadableFile as exc:
        raise TraceError([f"{path}: cannot read the trace: {exc}"]) from None
    problems = Problems(path, TraceError, MAX_TRACE_ERRORS)
    rows = _json_lines(raw, problems) if raw.lstrip()[:1] == b"{" else _csv_rows(raw, problems)
    # typed arrays, not lists of Python numbers: 8 bytes a value while a large trace is read
    times, offsets = array("d"), array("q", [0])
    inp, out, lines, values = array("q"), array("q"), array("q"), array("q")
    for lineno, (t, i, o, h) in rows:
        times.append(t)
        inp.append(i)
        out.append(o)
        lines.append(lineno)
        values.extend(h)
        offsets.append(len(values))
    problems.raise_any()
    if not times:
        raise TraceError([f"{path}: the trace has no requests (expected one JSON object per line, or CSV rows "
                          "under a header)"])
    t_ms = np.frombuffer(times, dtype=np.float64)
    order = np.argsort(t_ms, kind="stable")
    off = np.frombuffer(offsets, dtype=np.int64)
    vals = np.frombuffer(values, dtype=np.int64)
    counts = np.diff(off)[order]
    new_off = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_off[1:])
    # the hash ids of each request, in the new order: a gather over ranges
    idx = np.repeat(off[:-1][order] - new_off[:-1], counts) + np.arange(int(new_off[-1]), dtype=np.int64)
    return TraceData(str(path), t_ms[order], np.frombuffer(inp, dtype=np.int64)[order],
                     np.frombuffer(out, dtype=np.int64)[order], new_off, vals[idx] if len(vals) else vals.copy(),
                     np.frombuffer(lines, dtype=np.int64)[order])


_CACHE: dict[tuple, TraceData] = {}


def read_trace(path: str | os.PathLike) -> TraceData:
    """The trace at ``path``, in time order. Raises TraceError listing every problem (file, line and field).

    Cached per process by the file's identity (path, size, modification time): validating a scenario, planning
    its phases and building its prompts read the file once."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _CACHE:
        return _CACHE[key]
    data = _parse(path)
    if key is not None:
        _CACHE.clear()  # one trace a scenario: keep the latest only
        _CACHE[key] = data
    return data


def resolve_trace_path(spec: Trace, base_dir: Path) -> Path:
    """``spec.file`` (``~`` expanded) relative to ``base_dir`` (the scenario's folder)."""
    p = Path(os.path.expanduser(spec.file))
    return p if p.is_absolute() else Path(base_dir) / p


@dataclass(frozen=True)
class TraceSlice:
    """The requests ``lo..hi-1`` (time order) of the trace in ``file``, due at ``(t_ms - origin_ms) / 1000 /
    speed`` seconds of the run; the phase ends at ``end`` seconds."""

    file: str
    lo: int
    hi: int
    origin_ms: float
    speed: float
    end: float

    @property
    def count(self) -> int:
        return self.hi - self.lo


def select(spec: Trace, data: TraceData) -> TraceSlice:
    """The slice of ``data`` that ``spec`` replays (start, duration, max_requests). Raises TraceError when empty, or
    when its last request would be due more than 7 days (MAX_DURATION) into the run."""
    t = data.times_ms
    origin = float(t[0]) if spec.start == "first" else float(spec.start) * 1000.0
    lo = int(np.searchsorted(t, origin, side="left"))
    hi = len(t) if spec.duration is None else int(np.searchsorted(t, origin + spec.duration * 1000.0, side="left"))
    if spec.max_requests is not None:
        hi = min(hi, lo + spec.max_requests)
    if hi <= lo:
        until = f" to {origin / 1000 + spec.duration:g} s" if spec.duration is not None else ""
        raise TraceError([f"{data.path}: no request of the trace falls in the replayed window (from {origin / 1000:g} s"
                          f"{until} of trace time; the trace spans {t[0] / 1000:g} s to {t[-1] / 1000:g} s)"])
    scale = 1000.0 * spec.speed
    last = (float(t[hi - 1]) - origin) / scale
    if last > MAX_DURATION:  # a phase lasts at most 7 days: so does a replay
        late = lo + int(np.searchsorted((t[lo:hi] - origin) / scale, MAX_DURATION, side="right"))
        more = f" (and {hi - late - 1} more after it)" if hi - late > 1 else ""
        raise TraceError([f"{data.path}:{int(data.lines[late])}: timestamp: {t[late]:g} ms is due "
                          f"{(t[late] - origin) / scale / 86400:,.1f} days into the replay{more}; a replay lasts at "
                          f"most {MAX_DURATION / 86400:.0f} days (cut it with load.trace.duration or max_requests, or "
                          "raise speed)"])
    if spec.duration is not None:
        end = spec.duration / spec.speed
    else:
        end = (float(t[hi - 1]) - origin) / scale + END_PAD_S
    return TraceSlice(data.path, lo, hi, origin, spec.speed, end)


def run_times(sl: TraceSlice) -> np.ndarray:
    """Intended send times (seconds from the phase start, ascending) of the slice's requests."""
    t = read_trace(sl.file).times_ms[sl.lo : sl.hi]
    return (t - sl.origin_ms) / (1000.0 * sl.speed)


@dataclass(frozen=True)
class Limits:
    """What the target accepts, in tokens. ``added``: what the server adds to every prompt (chat template,
    BOS), as the workload's tokenizer counts it (0 when unknown); ``source`` says where ``max_model_len``
    came from: ``scenario``, ``target`` (its /v1/models) or None (no limit known)."""

    max_model_len: int | None = None
    max_input_tokens: int | None = None
    added: int = 0
    source: str | None = None

    def context(self) -> int | None:
        """Tokens left for input + output once what the server adds is counted."""
        return None if self.max_model_len is None else self.max_model_len - self.added


def fit(inp: np.ndarray, out: np.ndarray, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) lengths cut to fit ``limits`` (int64 arrays): the input gives way to the output, unless the
    output alone fills the context (see the module's docstring)."""
    i1 = inp.copy()
    o1 = out.copy()
    if limits.max_input_tokens is not None:
        np.minimum(i1, limits.max_input_tokens, out=i1)
    ctx = limits.context()
    if ctx is not None:
        ctx = max(ctx, 2)
        over = i1 + o1 > ctx
        room = over & (o1 < ctx)  # the output fits alone: the input gives way
        full = over & (o1 >= ctx)  # the output alone fills the context: it gives way to the input
        i1[room] = ctx - o1[room]
        i1[full] = np.minimum(i1[full], ctx - 1)
        o1[full] = ctx - i1[full]
    return i1, o1


def too_long_rows(data: TraceData, sl: TraceSlice, limits: Limits, where: str) -> list[str]:
    """One ``file:line: ...`` message per request of the slice that does not fit (up to MAX_TRACE_ERRORS, then a
    count); ``where`` names the limit (e.g. ``load.trace.max_model_len``)."""
    inp, out = data.input_tokens[sl.lo : sl.hi], data.output_tokens[sl.lo : sl.hi]
    i1, o1 = fit(inp, out, limits)
    bad = np.flatnonzero((i1 != inp) | (o1 != out))
    msgs = []
    for j in bad[:MAX_TRACE_ERRORS].tolist():
        line = int(data.lines[sl.lo + j])
        parts = []
        if limits.max_input_tokens is not None and inp[j] > limits.max_input_tokens:
            parts.append(f"input_length {inp[j]} > max_input_tokens {limits.max_input_tokens}")
        ctx = limits.context()
        if ctx is not None and inp[j] + out[j] > ctx:
            added = f" - {limits.added} added by the server" if limits.added else ""
            parts.append(f"input_length {inp[j]} + output_length {out[j]} > max_model_len "
                         f"{limits.max_model_len}{added}")
        msgs.append(f"{data.path}:{line}: {'; '.join(parts)} ({where}; too_long: refuse)")
    if len(bad) > MAX_TRACE_ERRORS:
        msgs.append(f"{data.path}: ... and {len(bad) - MAX_TRACE_ERRORS} more requests too long")
    return msgs
