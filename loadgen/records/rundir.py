"""The RunDir: everything a run leaves behind, laid out as DESIGN.md says.

    runs/2026-12-02T10-31-07_burst/
      scenario.yaml                 the scenario as written, secrets redacted
      meta.json                     version, engine, host, start time, targets, verdict
      metrics.json                  each metric's definition and unit
      <target>/requests.parquet     one row per request (streamed to requests.parquet.partial during the run)
      <target>/summary.json         per phase and overall
      <target>/server_metrics.csv   scraped Prometheus metrics, when the target has them
      <target>/host.csv             the host sampled: CPU wait of latbench and the managed server, steal, load
      <target>/gpu_metrics.csv      the GPUs sampled: NVML on this host, or a DCGM exporter (gpu_metrics_url)
      <target>/telemetry.csv        the engine's and GPU's quantities over time (host.csv's shape), by source name

Nothing here ever holds a secret: every file goes through the run's :class:`~loadgen.redact.Redactor` (one that
knows no secret still redacts the userinfo and credential parameters of every URL).
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import logging
import os
import platform
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from pydantic import ValidationError

from loadgen.errors import RunDirError, RunDirWriteError, UsageError
from loadgen.records.definitions import SCHEMA_VERSION, metric_definitions
from loadgen.records.results import RESULT_MODELS, Meta, MetricDefinitions, ResultModel
from loadgen.records.schema import read_records, records_exist
from loadgen.redact import Redactor
from loadgen.units import json_num
from loadgen.version import __version__

REQUESTS = "requests.parquet"
SUMMARY = "summary.json"
SERVER_METRICS = "server_metrics.csv"
SERVER_LOG = "server.log"  # what a managed server printed, redacted (loadgen.run.targets.ServerLog)
HOST = "host.csv"  # loadgen.engine.host
GPU_METRICS = "gpu_metrics.csv"  # loadgen.engine.gpu (NVML) or a DCGM exporter's samples (loadgen.engine.scrape)
TELEMETRY = "telemetry.csv"  # loadgen.analysis.telemetry: time, source, metric, value (loadgen.records.series_file)
META = "meta.json"
REGRESSION = "regression.json"
COLD_START = "cold_start.json"
REPEATS = "repeats.json"  # between-run statistics of a repeated run (loadgen.analysis.repeated)
CAPACITY = "capacity.json"
WATCH = "watch.json"  # a watch's facts (loadgen.run.watch)
METRICS = "metrics.json"
#: The result files: each carries ``schema_version`` (stamped by :func:`write_json`), and a reader refuses one
#: written by a newer latbench (:func:`check_schema`); a file without one was written before they carried it.
RESULT_FILES = frozenset({META, SUMMARY, METRICS, REGRESSION, COLD_START, REPEATS, CAPACITY, WATCH})
#: What a RunDir holds at its top level besides target folders: no target folder may take one of these names.
RESERVED = frozenset({"scenario.yaml", *RESULT_FILES, "report.html", "summary.md", "junit.xml", "compare.html"})
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
#: Set (to anything but "" or "0") to make a result file that its model refuses an error at the write; the test
#: suite sets it, so every RunDir it writes, in any process, is checked against the result models.
STRICT_RESULTS_ENV = "LATBENCH_STRICT_RESULTS"
log = logging.getLogger(__name__)


_SAFE_LEN = 100  # characters of a name kept in a file name (a file system allows 255 bytes)


def safe_name(name: str) -> str:
    """A file-system-safe name for a scenario or target (lossy: ``fast/v1`` and ``fast v1`` both give ``fast_v1``;
    long names are cut to 100 characters)."""
    return _SAFE.sub("_", name)[:_SAFE_LEN].strip("._") or "target"


def folder_name(name: str, taken: set[str] = frozenset()) -> str:
    """The folder of target ``name`` in a RunDir: unique among ``taken`` (folder names, compared casefolded, as a
    case-insensitive file system would) and stable from run to run.

    A name that is already safe is its own folder. A name that :func:`safe_name` changes (``fast/v1``, ``快速``)
    gets a short hash of the name appended (``fast_v1-1f0e3c2a``), so two names that map to the same safe text
    still get two folders, whatever else the run holds. Only an exact clash left after that gets ``-2``, ``-3``...
    """
    base = safe_name(name)
    if base != name or base.casefold() in {r.casefold() for r in RESERVED}:
        base = f"{base}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    folded = {t.casefold() for t in taken}
    out, i = base, 1
    while out.casefold() in folded:
        i += 1
        out = f"{base}-{i}"
    return out


def _is_folder_name(d) -> bool:
    """A plain folder name (no path separator, not '.' or '..'): meta.json may not point outside its RunDir."""
    return isinstance(d, str) and d not in ("", ".", "..") and "/" not in d and "\\" not in d and "\0" not in d


def jsonable(obj: Any) -> Any:
    """What ``obj`` reads like after a round trip through JSON: NaN as None, infinities as 'inf', no numpy."""
    if isinstance(obj, float):
        return json_num(obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return jsonable(obj.item())
    return obj


def write_text(path: str | os.PathLike, text: str, redactor: Redactor | None = None) -> Path:
    """Write a text file atomically (a temp file renamed over the target), through ``redactor`` (default: one
    that knows no secret, which still redacts URL credentials). Raises RunDirWriteError; no temp file is left."""
    return _write_atomic(Path(path), (redactor or Redactor()).text(text))


def write_json(path: str | os.PathLike, obj: Any, redactor: Redactor | None = None) -> Path:
    """Write JSON atomically, NaN as null, every string value through ``redactor`` (keys and numbers never); a
    result file (:data:`RESULT_FILES`) gets ``schema_version`` as its first key and goes through its model
    (:func:`write_result`)."""
    path = Path(path)
    if path.name in RESULT_FILES and isinstance(obj, dict | ResultModel):
        return write_result(path, obj, redactor)
    return _write_atomic(path, json.dumps(jsonable((redactor or Redactor()).data(obj)), indent=1, allow_nan=False))


def write_result(path: str | os.PathLike, result: ResultModel | dict, redactor: Redactor | None = None) -> Path:
    """Write result file ``path`` from its model (:data:`~loadgen.records.results.RESULT_MODELS`): the JSON is the
    model's, ``schema_version`` first. latbench's writers build the model; a dict is validated into it here, for
    the two writers that hold JSON rather than a model: :class:`RunMeta` (meta.json is added to as the run goes)
    and a file read back and rewritten (an old RunDir's, a test's). A dict the model refuses is
    a bug of its writer: it is logged and written as it is (a long run's results are not lost to it), or raised
    when :data:`STRICT_RESULTS_ENV` is set."""
    path = Path(path)
    data = _result_json(path.name, result)
    data = {"schema_version": SCHEMA_VERSION} | data  # first key; a version the writer gave is kept
    return _write_atomic(path, json.dumps(jsonable((redactor or Redactor()).data(data)), indent=1, allow_nan=False))


def _result_json(name: str, result: ResultModel | dict) -> dict:
    if isinstance(result, ResultModel):
        return result.to_json()
    try:
        return RESULT_MODELS[name].model_validate(jsonable(result)).to_json()
    except ValidationError as exc:
        if os.environ.get(STRICT_RESULTS_ENV, "") not in ("", "0"):
            raise
        log.error("%s does not match its model (written as it is): %s", name, exc)
        return result


def check_schema(path: str | os.PathLike, obj: Any) -> Any:
    """``obj`` (read from the result file ``path``) when this latbench can read it: raises :class:`RunDirError`
    for one written by a newer latbench, whose fields may mean what this one does not know. A file without a
    ``schema_version`` was written before result files carried one (it reads as version 1)."""
    version = obj.get("schema_version", SCHEMA_VERSION) if isinstance(obj, dict) else SCHEMA_VERSION
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise RunDirError(f"{path}: schema_version {version!r} was written by a newer latbench; this one "
                          f"reads up to {SCHEMA_VERSION} (upgrade latbench to read it)")
    return obj


def read_result(path: str | os.PathLike) -> Any:
    """A result file's JSON, checked by :func:`check_schema`; OSError and ValueError as json.loads raises them."""
    return check_schema(path, json.loads(Path(path).read_text(encoding="utf-8")))


def _write_atomic(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # the old file stays whole until the new one is
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise RunDirWriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


_MAX_TRIES = 10_000  # RunDirs of one scenario started in one second


def _mkdir(path: Path, out, exist_ok: bool = False) -> bool:
    """Make folder ``path`` (and its parents); False when ``path`` exists and not ``exist_ok`` (another run made it
    first). Any other failure is a :class:`UsageError` naming ``--out`` and the OS's reason."""
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except FileExistsError:
        if exist_ok or not path.is_dir():  # exist_ok: a file there (it raced the check above)
            raise UsageError(f"--out {out}: cannot create {path}: it exists and is not a folder") from None
        return False
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"--out {out}: cannot create {path}: {reason} "
                         f"({errno.errorcode.get(exc.errno, exc.errno)})") from None
    return True


class RunDir:
    """A run's folder. Create with :meth:`create`, or open an existing one with ``RunDir(path)``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def create(cls, out: str | os.PathLike | None, scenario_name: str, exact: bool = False) -> "RunDir":
        """A new folder under ``out`` (default ``runs/``), named by time and scenario, ``-2``, ``-3``... appended when
        another run took the name first; ``exact`` uses ``out`` itself (a folder the caller names inside a RunDir
        it owns, as each search of a repeated capacity search; a failure there is a :class:`RunDirWriteError`).

        The folder is made with one ``mkdir`` that fails if it exists, so runs started in the same second, in
        threads or processes, never share one. An ``out`` that is a file, or where no folder can be made (read-only,
        no permission), is a :class:`UsageError` (exit 2) naming the path and the OS's reason: a run calls this
        before it sends anything."""
        parent = Path(out or "runs")
        for p in (parent, *parent.parents):  # --out naming a file (or a path through one) is a usage error
            if p.exists() and not p.is_dir():
                raise UsageError(f"--out {out}: {p} is a file, not a folder")
        if exact:  # inside a RunDir that is already written to: a failure is the RunDir's (exit 3)
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunDirWriteError(exc.errno, f"cannot create {parent}: {exc.strerror or exc}") from exc
            return cls(parent)
        _mkdir(parent, out or parent, exist_ok=True)
        base = f"{time.strftime('%Y-%m-%dT%H-%M-%S')}_{safe_name(scenario_name)}"
        for i in range(1, _MAX_TRIES + 1):
            path = parent / (base if i == 1 else f"{base}-{i}")
            if _mkdir(path, out or parent):
                return cls(path)
        raise UsageError(f"--out {out or parent}: {_MAX_TRIES} RunDirs named {base} already, none free")

    def new_target_dir(self, target: str) -> Path:
        """A new folder for target ``target``, which no folder already in this RunDir shares (its name is the
        folder's ``name``: store it in meta.json, which maps each target to its folder)."""
        taken = {p.name for p in self.path.iterdir()} if self.path.is_dir() else set()
        d = self.path / folder_name(target, taken)
        try:
            d.mkdir(parents=True)
        except OSError as exc:
            raise RunDirWriteError(exc.errno, f"cannot create {d}: {exc.strerror or exc}") from exc
        return d

    def write_scenario(self, data: dict, redactor: Redactor | None = None) -> None:
        """The scenario as written (placements already redacted: ``LoadedScenario.redacted``), every string value
        through ``redactor`` once more."""
        data = (redactor or Redactor()).data(data)
        _write_atomic(self.path / "scenario.yaml", yaml.safe_dump(data, sort_keys=False, allow_unicode=True))

    def write_metric_definitions(self) -> None:
        write_result(self.path / METRICS, MetricDefinitions(metrics=metric_definitions()))

    def meta(self) -> dict:
        """meta.json, checked to be what latbench writes: a JSON object whose ``targets`` is a list of objects each
        with a ``name`` and a ``dir`` (a folder of this RunDir). Raises :class:`RunDirError` (exit 2) otherwise."""
        path = self.path / META
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RunDirError(f"{self.path}: not a RunDir (no {META})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RunDirError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
        except ValueError as exc:
            raise RunDirError(f"{path}: not JSON ({exc})") from None
        if not isinstance(meta, dict):
            raise RunDirError(f"{path}: expected a JSON object, got a JSON {type(meta).__name__}")
        check_schema(path, meta)
        targets = meta.get("targets", [])
        if not isinstance(targets, list) or not all(
                isinstance(t, dict) and isinstance(t.get("name"), str) and _is_folder_name(t.get("dir"))
                for t in targets):
            raise RunDirError(f"{path}: 'targets' must be a list of {{name, dir}} objects")
        return meta

    def read_meta(self) -> Meta:
        """meta.json as its model (checked as :meth:`meta` checks it; a file its model refuses is a pydantic
        ValidationError, a ValueError)."""
        return Meta.model_validate(self.meta())

    def target_dirs(self) -> dict[str, str]:
        """Target name -> folder name, in run order (meta.json's map; without meta.json, the folders holding
        records, each named by itself)."""
        if (self.path / META).exists():
            return {t["name"]: t["dir"] for t in self.meta().get("targets", [])}
        return {p.name: p.name for p in sorted(self.path.iterdir()) if records_exist(p / REQUESTS)}

    def records_written(self) -> bool:
        """Whether any folder of this RunDir holds at least one readable record (what a failed run keeps)."""
        for d in (p for p in self.path.iterdir() if p.is_dir()) if self.path.is_dir() else ():
            try:
                if records_exist(d / REQUESTS) and read_records(d / REQUESTS).num_rows:
                    return True
            except (OSError, ValueError, pa.ArrowException):
                continue  # a file that cannot be read keeps nothing
        return False

    def targets(self) -> list[str]:
        """Target folder names in run order (from meta.json when present)."""
        return list(self.target_dirs().values())


class RunMeta:
    """meta.json's one owner: the run's fields (version, engine, host, start time...), its targets in run order,
    its verdict. Runs create it (:meth:`start`), add targets to it (:meth:`add_target`, whose entry they fill in
    with :meth:`MetaEntry.update`) and set fields on it (:meth:`update`); each change writes the file at once,
    through its model (:class:`~loadgen.records.results.Meta`), so a run that stops at any moment leaves a
    meta.json that says what it had done. Nothing else writes meta.json, and no caller holds its JSON: what they
    read back (:meth:`get`, :meth:`to_json`) is a copy."""

    def __init__(self, rundir: RunDir, fields: dict, redactor: Redactor | None = None):
        self.path = rundir.path / META
        fields = _plain_json(fields)
        self._data = {**fields, "targets": list(fields.get("targets", []))}
        self._entries = [MetaEntry(self, e) for e in self._data["targets"]]
        self.redactor = redactor
        self.write()

    @classmethod
    def start(cls, rundir: RunDir, scenario: str, engine: str, redactor: Redactor | None = None,
              **fields) -> "RunMeta":
        """The meta.json a run starts with (its ``fields`` after the engine: ``kind``, ``mode``, ``repeat``...),
        written at once: no targets yet, not complete."""
        meta = Meta(latbench_version=__version__, engine=engine, **fields, host=socket.gethostname(),
                    platform=platform.platform(), python=sys.version.split()[0],
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), scenario=scenario, targets=[], complete=False)
        return cls(rundir, meta.to_json(), redactor)

    @classmethod
    def open(cls, rundir: RunDir, redactor: Redactor | None = None) -> "RunMeta":
        """The meta.json of an existing RunDir, to add to (checked by :meth:`RunDir.meta`)."""
        return cls(rundir, rundir.meta(), redactor)

    @property
    def targets(self) -> list["MetaEntry"]:
        """The targets' entries, in run order."""
        return list(self._entries)

    def add_target(self, name: str, dir: str, **fields) -> "MetaEntry":
        """Append the entry of target ``name`` (in folder ``dir``) and write; the entry, to fill in later."""
        data = {"name": name, "dir": dir, **_plain_json(fields)}
        self._data["targets"].append(data)
        entry = MetaEntry(self, data)
        self._entries.append(entry)
        self.write()
        return entry

    def update(self, **fields) -> None:
        """Set run-level fields (a model, as a target's server info, as its JSON) and write."""
        self._data.update(_plain_json(fields))
        self.write()

    def get(self, key: str, default: Any = None) -> Any:
        """A copy of run-level field ``key``."""
        return copy.deepcopy(self._data.get(key, default))

    def to_json(self) -> dict:
        """A copy of meta.json as it stands."""
        return copy.deepcopy(self._data)

    def model(self) -> Meta:
        """meta.json as it stands, as its model (what :func:`~loadgen.analysis.coldstart.cold_start_summary`
        reads)."""
        return Meta.model_validate(self.to_json())

    def write(self) -> None:
        write_result(self.path, self._data, self.redactor)


class MetaEntry:
    """One target's entry of a :class:`RunMeta`: its ``name`` and ``dir``, and what its run adds to it."""

    def __init__(self, meta: RunMeta, data: dict):
        self._meta, self._data = meta, data

    @property
    def name(self) -> str:
        return self._data["name"]

    @property
    def dir(self) -> str:
        return self._data["dir"]

    def get(self, key: str, default: Any = None) -> Any:
        """A copy of field ``key`` of this entry."""
        return copy.deepcopy(self._data.get(key, default))

    def update(self, **fields) -> None:
        """Set fields of this entry and write meta.json."""
        self._data.update(_plain_json(fields))
        self._meta.write()


def _plain_json(fields: dict) -> dict:
    """``fields`` with each model (a :class:`~loadgen.records.results.ResultModel`) as its JSON, all copied: the
    owner's JSON shares nothing with its callers."""
    return {k: v.to_json() if isinstance(v, ResultModel) else copy.deepcopy(v) for k, v in fields.items()}
