"""Datasets of prompts: reading and checking them, every mistake named by file and line, before anything is sent.

Formats, told apart by content (not by the file's extension):

- **JSON lines**, one request per line, each one of
  ``{"prompt": "..."}``, ``{"messages": [{"role", "content"}, ...]}`` or a ShareGPT entry
  ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}``;
  a line may give its output length as ``max_tokens`` (or ``output_tokens``) or as the ``reply`` whose
  length in tokens it is, and its own request options as ``extra_body`` (merged over
  ``target.extra_body``). Blank lines are skipped.
- **ShareGPT JSON**: one array of such conversation entries (the format of the ShareGPT_V3 file that vLLM's
  ``bench serve`` reads). As vLLM does, the first human turn is the prompt and the turn answering it gives
  the output length (its length in tokens); entries with no answered human turn are skipped.
- **Hugging Face datasets** (``hf:``, the ``latbench[datasets]`` extra): rows of a split read through
  ``datasets`` from a local folder or file or the local cache (offline), fields mapped by ``columns``.

:func:`read_dataset` is the one entry point, and :func:`check_dataset` what the scenario loader calls: every
problem found (up to :data:`MAX_DATASET_ERRORS`) is one ``file:line: what`` message of a
:class:`DatasetError`, which the loader turns into scenario errors (exit 2, nothing sent). Every record of
every format goes through one rule, :func:`entry_of`. Entries are cached per process by the file's
identity, so checking a scenario and then running it reads the file once.
"""

from __future__ import annotations

import bisect
import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from loadgen.scenario.files import MAX_DATA_BYTES, UnreadableFile, read_capped
from loadgen.scenario.model import Dataset, Workload, as_dataset, owned_fields_error
from loadgen.scenario.problems import Problems

__all__ = ["DatasetError", "Entry", "check_dataset", "entry_of", "load_hf", "read_dataset"]

HUMAN = ("human", "user")  # ShareGPT's "from" of a prompt turn
MAX_DATASET_ERRORS = 20  # problems listed per dataset; the rest are counted


class DatasetError(ValueError):
    """A dataset that cannot be used: ``errors`` holds one ``file:line: what`` (or ``file: what``) message per
    problem found."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class _Bad(ValueError):
    """One problem of one record or line, its message starting with ``file:line``."""

    def __init__(self, path, line, message: str):
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


@dataclass(frozen=True)
class Entry:
    """One request of a dataset, as written: exactly one of ``text`` and ``messages`` is set."""

    where: str  # file:line (or the row of a Hugging Face split)
    text: str | None = None
    messages: list | None = None
    output_tokens: int | None = None  # the entry's own output length
    reply: str | None = None  # an answer whose length in tokens is the output length (ShareGPT)
    extra_body: dict | None = None
    # a multi-turn conversation's user turns, in order, each with the dataset's answer to it (None: unanswered);
    # what workload.conversations replays (the dataset's answers give output lengths, the server's are sent)
    turns: tuple[tuple[str, str | None], ...] | None = None


def _positive(value, name: str, path, line) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _Bad(path, line, f"{name}: expected a positive integer, got {value!r}")
    return value


def _messages(msgs, path, line) -> list:
    if not isinstance(msgs, list) or not msgs:
        raise _Bad(path, line, f"messages: expected a non-empty list, got {msgs!r:.60}")
    for i, m in enumerate(msgs):
        if (not isinstance(m, dict) or not isinstance(m.get("role"), str)
                or not isinstance(m.get("content"), (str, list))):
            raise _Bad(path, line, f"messages[{i}]: expected {{\"role\": str, \"content\": str}}, "
                                   f"got {m!r:.60}")
    return msgs


def _conversation(conv, path, line) -> tuple[str, str] | None:
    """(first human turn, the turn answering it) of a ShareGPT conversation; None when it has no such pair."""
    if not isinstance(conv, list):
        raise _Bad(path, line, f"conversations: expected a list of turns, got {type(conv).__name__}")
    for i, turn in enumerate(conv):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            raise _Bad(path, line, f"conversations[{i}]: expected {{\"from\": str, \"value\": str}}, "
                                   f"got {turn!r:.60}")
    for i, turn in enumerate(conv[:-1]):
        if turn["from"].lower() in HUMAN and turn["value"]:
            return turn["value"], conv[i + 1]["value"]
    return None


def _user_turns(pairs: list[tuple[str, str]]) -> tuple[tuple[str, str | None], ...]:
    """(user text, the answer after it or None) of each non-empty user turn of ``(speaker, text)`` pairs."""
    out = []
    for i, (who, text) in enumerate(pairs):
        if who in HUMAN and text:
            nxt = pairs[i + 1] if i + 1 < len(pairs) else None
            out.append((text, nxt[1] if nxt is not None and nxt[0] not in HUMAN else None))
    return tuple(out)


def _text_of(content) -> str:
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def entry_of(obj, path, line) -> Entry | None:
    """The Entry of one record (None: a ShareGPT conversation without an answered prompt): the one rule every
    format's records go through. Raises a ValueError whose message starts with ``path:line``."""
    where = f"{path}:{line}"
    if not isinstance(obj, dict):
        raise _Bad(path, line, "expected an object with 'prompt', 'messages' or 'conversations', "
                               f"got {type(obj).__name__}")
    if "max_tokens" in obj and "output_tokens" in obj:
        raise _Bad(path, line, "give max_tokens or output_tokens, not both")
    key = "max_tokens" if "max_tokens" in obj else "output_tokens"
    out = _positive(obj.get(key), key, path, line)
    extra = obj.get("extra_body")
    if extra is not None:
        err = owned_fields_error(extra)
        if err:
            raise _Bad(path, line, f"extra_body: {err}")
    reply = obj.get("reply")
    if reply is not None and not isinstance(reply, str):
        raise _Bad(path, line, f"reply: expected a string, got {type(reply).__name__}")
    if "prompt" in obj:
        text = obj["prompt"]
        if not isinstance(text, str) or not text:
            raise _Bad(path, line, f"prompt: expected a non-empty string, got {text!r:.60}")
        return Entry(where, text=text, output_tokens=out, reply=reply, extra_body=extra)
    if "messages" in obj:
        msgs = _messages(obj["messages"], path, line)
        turns = _user_turns([(m["role"].lower(), _text_of(m["content"])) for m in msgs])
        return Entry(where, messages=msgs, output_tokens=out, reply=reply, extra_body=extra, turns=turns or None)
    if "conversations" in obj:
        pair = _conversation(obj["conversations"], path, line)
        if pair is None:
            return None
        turns = _user_turns([(t["from"].lower(), t["value"]) for t in obj["conversations"]])
        return Entry(where, text=pair[0], output_tokens=out, reply=pair[1], extra_body=extra, turns=turns)
    raise _Bad(path, line, f"expected an object with 'prompt', 'messages' or 'conversations', "
                           f"got keys {sorted(obj)}")


def _entries(items, path, problems: Problems) -> list[Entry]:
    """The entries of ``(line, object)`` pairs, each through :func:`entry_of`; problems collected in order."""
    entries = []
    for line, obj in items:
        try:
            e = entry_of(obj, path, line) if not isinstance(obj, _Bad) else None
        except _Bad as exc:
            obj = exc
        if isinstance(obj, _Bad):
            problems.add(str(obj))
        elif e is not None:
            entries.append(e)
    return entries


def _lines(raw: bytes, path):
    """(line, JSON object, or the _Bad problem of that line) of each non-blank line."""
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield lineno, _Bad(path, lineno, f"not UTF-8 text (byte {exc.start + 1} of the line)")
            continue
        if not text.strip():
            continue
        try:
            yield lineno, json.loads(text)
        except ValueError as exc:
            yield lineno, _Bad(path, lineno, f"expected a JSON object, got invalid JSON ({exc})")
        except RecursionError:
            yield lineno, _Bad(path, lineno, "expected a JSON object, got JSON nested too deep to read")


def _array(text: str, path) -> list[tuple[int, object]]:
    """The elements of a JSON array with the line each starts on (json.load would give no positions)."""
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    line_of = lambda pos: bisect.bisect_right(newlines, pos - 1) + 1  # noqa: E731
    dec = json.JSONDecoder()
    ws = " \t\r\n"
    i = text.index("[") + 1
    out = []
    while True:
        while i < len(text) and text[i] in ws:
            i += 1
        if i < len(text) and text[i] == "]" and not out:
            return out
        try:
            obj, end = dec.raw_decode(text, i)
        except ValueError as exc:
            raise _Bad(path, line_of(i), f"invalid JSON in the array ({exc.args[0].split(':')[0]})") from None
        except RecursionError:
            raise _Bad(path, line_of(i), "JSON nested too deep to read in the array") from None
        out.append((line_of(i), obj))
        i = end
        while i < len(text) and text[i] in ws:
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i < len(text) and text[i] == "]":
            if text[i + 1 :].strip():
                raise _Bad(path, line_of(i + 1), "unexpected text after the JSON array")
            return out
        else:
            raise _Bad(path, line_of(i), "expected ',' or ']' in the JSON array")


def _file(path: Path) -> list[Entry]:
    try:
        raw = read_capped(path, MAX_DATA_BYTES)
    except UnreadableFile as exc:  # missing, a folder, a device, unreadable, too large
        raise DatasetError([f"{path}: cannot read dataset: {exc}"]) from None
    if raw.lstrip()[:1] == b"[":  # a JSON array (ShareGPT's own format)
        try:
            items = _array(raw.decode("utf-8"), path)
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise DatasetError([f"{path}:{line}: not UTF-8 text"]) from None
        except _Bad as exc:
            raise DatasetError([str(exc)]) from None
    else:
        items = list(_lines(raw, path))
    problems = Problems(path, DatasetError, MAX_DATASET_ERRORS)
    entries = _entries(items, path, problems)
    problems.raise_any()
    if not entries:
        what = ("no prompts (expected one JSON object per line, or a JSON array)" if not items
                else "no conversation with an answered human turn")
        raise DatasetError([f"{path}: the dataset has {what}"])
    return entries


def load_hf(name: str, split: str, base_dir: Path):
    """Split ``split`` of the Hugging Face dataset ``name`` (a local folder written by ``save_to_disk``, a local
    data file, or an id in the local cache; never downloaded), with ``datasets`` imported only now. Raises
    DatasetError naming ``name``: the library missing (and how to install it), or why it could not load."""
    try:
        datasets = importlib.import_module("datasets")
    except ImportError:
        raise DatasetError([f"{name}: hf datasets need the `datasets` library: "
                            "pip install 'latbench[datasets]'"]) from None
    local = Path(os.path.expanduser(name))
    local = local if local.is_absolute() else Path(base_dir) / local
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the local cache only: latbench never downloads
    try:
        if (local / "dataset_info.json").is_file() or (local / "state.json").is_file():
            ds = datasets.load_from_disk(str(local))
            return ds[split] if hasattr(ds, "keys") else ds
        if local.is_file():
            builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(local.suffix)
            return datasets.load_dataset(builder or "json", data_files=str(local), split=split)
        return datasets.load_dataset(str(local) if local.exists() else name, split=split)
    except Exception as exc:  # not cached, no such split, unreadable: the library's own message says which
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        raise DatasetError([f"{name}: cannot load the Hugging Face dataset (split {split!r}; only local "
                            f"files and the local cache are read): {why}"]) from None


def _hf(spec: Dataset, base_dir: Path) -> list[Entry]:
    name = spec.hf
    ds = load_hf(name, spec.split, base_dir)
    cols = dict(spec.columns)
    for field in ("prompt", "messages", "conversations"):
        if field not in cols and field in ds.column_names:
            cols[field] = field
    missing = sorted(c for c in cols.values() if c not in ds.column_names)
    if missing or not {"prompt", "messages", "conversations"} & set(cols):
        raise DatasetError([f"{name}: columns: {'no column ' + ', '.join(missing) if missing else 'no prompt'} in "
                            f"split {spec.split!r} (its columns: {', '.join(ds.column_names)}); map one with "
                            "columns: {prompt: <column>}"])
    rows = []
    for i, row in enumerate(ds):
        obj = {field: row[col] for field, col in cols.items() if field != "reply" and row[col] is not None}
        if "output_tokens" in obj and isinstance(obj["output_tokens"], float) and obj["output_tokens"].is_integer():
            obj["output_tokens"] = int(obj["output_tokens"])
        if "reply" in cols and isinstance(row[cols["reply"]], str) and "conversations" not in obj:
            obj["reply"] = row[cols["reply"]]
        rows.append((f"row {i}", obj))
    problems = Problems(name, DatasetError, MAX_DATASET_ERRORS)
    entries = _entries(rows, f"{name}[{spec.split}]", problems)
    problems.raise_any()
    if not entries:
        raise DatasetError([f"{name}: split {spec.split!r} has no usable rows"])
    return entries


_CACHE: dict[tuple, list[Entry]] = {}


def check_dataset(workload: Workload, base_dir: Path) -> list[str]:
    """Every problem of the workload's dataset, one ``file:line: what`` message each; empty when it can be used
    (or there is none). What ``load_scenario`` calls, so a dataset is checked before anything starts."""
    if workload.dataset is None:
        return []
    try:
        read_dataset(as_dataset(workload.dataset), base_dir)
    except DatasetError as exc:
        return exc.errors
    return []


def read_dataset(spec: Dataset, base_dir: Path) -> list[Entry]:
    """Every usable entry of ``spec``, in file order. Raises DatasetError listing every problem (file and line)."""
    if spec.hf is not None:
        key = ("hf", spec.hf, spec.split, tuple(sorted(spec.columns.items())), str(base_dir))
        if key not in _CACHE:
            _CACHE[key] = _hf(spec, Path(base_dir))
        return _CACHE[key]
    path = Path(os.path.expanduser(spec.path))
    if not path.is_absolute():
        path = Path(base_dir) / path
    try:
        st = path.stat()
        key = ("file", str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is None or key not in _CACHE:
        entries = _file(path)
        if key is not None:
            _CACHE.clear()  # one dataset a scenario: keep the latest only
            _CACHE[key] = entries
        return entries
    return _CACHE[key]
