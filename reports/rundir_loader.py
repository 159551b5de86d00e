"""Read a RunDir into memory: meta, scenario, and per target its summary, records and server metrics.

The one place reports touch files. Each result file is read once and validated into its model
(:mod:`loadgen.records.results`: meta.json a :class:`Meta`, each target's entry a :class:`MetaTarget`, its
summary.json a :class:`Summary`); readers take typed attributes. A result file its model refuses reads as
unreadable. A run that did not finish still loads: a target with records but no summary.json (the run was
killed) has its summary recomputed from the records with :func:`loadgen.analysis.metrics.summarize`, and is
marked incomplete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pydantic import ValidationError

from loadgen.analysis.coldstart import cold_start_summary
from loadgen.analysis.host import read_host
from loadgen.analysis.metrics import records_frame, summarize
from loadgen.analysis.telemetry import read_samples, series_frame
from loadgen.errors import RunDirError
from loadgen.records.results import CapacityRef, ColdStart, Meta, MetaTarget, Repeats, StartGroup, Summary
from loadgen.records.rundir import (
    COLD_START,
    GPU_METRICS,
    HOST,
    META,
    REPEATS,
    REQUESTS,
    SERVER_METRICS,
    SUMMARY,
    TELEMETRY,
    RunDir,
    jsonable,
    read_result,
)
from loadgen.records.schema import SCHEMA, read_records, records_exist
from loadgen.records.series_file import read_series
from loadgen.scenario.model import GoodputObjectives, Load, slo_line
from loadgen.schedule.arrivals import PhasePlan, plan_phases

#: Record columns the plots read (token times are read separately, for a sample only: :data:`TOKEN_COLUMNS`).
PLOT_COLUMNS = ("phase", "recorded", "scheduled", "sent", "connect_start", "connected", "tls",
                "first_byte", "first_token", "done", "error", "output_tokens")
TOKEN_COLUMNS = ("token_times", "chunk_tokens")


@dataclass
class TargetData:
    """One target of a loaded RunDir: its meta.json entry, its summary (the file as read, and its model), and its
    records, server metrics and host samples, each read on first use."""

    name: str
    dir: Path
    meta: MetaTarget
    summary: dict | None  # summary.json as read: what a report Cell's ``src`` points into (readers take result)
    recomputed: bool = False
    unreadable: str | None = None  # why requests.parquet could not be read (the report then shows summary.json's)
    _tables: dict = field(default_factory=dict)  # columns asked (None: all) -> the records, read once each
    _frame: pd.DataFrame | None = None
    _ok: pd.DataFrame | None = None
    _server: pd.DataFrame | None = None
    _telemetry: pd.DataFrame | None = None
    _host: pd.DataFrame | None = None
    _result: Summary | None = None

    @property
    def result(self) -> Summary | None:
        """summary.json as its model (None when the target left none)."""
        if self._result is None and self.summary is not None:
            self._result = Summary.model_validate(self.summary)
        return self._result

    @property
    def has_records(self) -> bool:
        """Records were written and can be read (reading the figures' columns once, to know)."""
        if not records_exist(self.dir / REQUESTS):
            return False
        self.table(PLOT_COLUMNS)
        return self.unreadable is None

    def table(self, columns: tuple[str, ...] | None = None) -> pa.Table:
        """The records (read once; ``columns``: those alone, in the schema's order); none, with :attr:`unreadable`
        saying why, when the file cannot be read (a truncated parquet): the report still renders, from
        summary.json, without the figures drawn from the records."""
        if columns not in self._tables:
            try:
                table = read_records(self.dir / REQUESTS, columns)
            except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
                self.unreadable = (f"{REQUESTS} cannot be read ({type(exc).__name__}): the numbers are summary.json's, "
                                   "the figures drawn from the records are left out")
                table = SCHEMA.empty_table()
                table = table if columns is None else table.select([c for c in SCHEMA.names if c in columns])
            self._tables[columns] = table
        return self._tables[columns]

    def frame(self) -> pd.DataFrame:
        """Records without token times, with the derived columns of :func:`loadgen.analysis.metrics.records_frame`."""
        if self._frame is None:
            self._frame = records_frame(self.table(PLOT_COLUMNS))
        return self._frame

    def ok_recorded(self) -> pd.DataFrame:
        """The frame's successful requests of recorded phases (selected once: every figure starts from them)."""
        if self._ok is None:
            df = self.frame()
            self._ok = df[df["ok"] & df["recorded"]]
        return self._ok

    def server_metrics(self) -> pd.DataFrame | None:
        """server_metrics.csv (time, metric, labels, value) or None when it was not scraped."""
        if self._server is None:
            p = self.dir / SERVER_METRICS
            if not p.exists():
                return None
            try:
                self._server = pd.read_csv(p, dtype={"metric": str, "labels": str}, keep_default_na=False,
                                           converters={"time": float, "value": _float})
            except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
                return None
        return self._server


    def host(self) -> pd.DataFrame | None:
        """host.csv (time, source, metric, value) or None when the host was not sampled."""
        if self._host is None:
            self._host = read_host(self.dir / HOST)
        return self._host

    def telemetry(self) -> pd.DataFrame | None:
        """telemetry.csv (time, source, metric, value: each server-side quantity by the name it was read from), or,
        for a RunDir written before it existed, the same made from server_metrics.csv; None without telemetry."""
        if self._telemetry is None:
            self._telemetry = read_series(self.dir / TELEMETRY)
            if self._telemetry is None:
                t = self.result.telemetry if self.result else None
                self._telemetry = series_frame(self.server_metrics(), read_samples(self.dir / GPU_METRICS),
                                               (t.engine if t is not None and t.engine else "auto"))
        return self._telemetry


def _float(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return math.nan


@dataclass
class RunData:
    """A loaded RunDir: meta.json, the scenario as written, its targets in run order, and the result files of
    a cold-start study or a repeated run."""

    path: Path
    meta: Meta
    scenario: dict
    targets: list[TargetData] = field(default_factory=list)
    cold_start: dict[str, StartGroup] | None = None  # cold_start.json's groups, of a study of fresh starts
    repeated: Repeats | None = None  # repeats.json of a repeated run

    def groups(self) -> list[tuple[str, list[TargetData]]]:
        """Targets under their architecture: the fresh starts of a cold-start study, or the repetitions of a
        repeated run, share a group; any other target is a group of its own."""
        out: dict[str, list[TargetData]] = {}
        for td in self.targets:
            out.setdefault(str(td.meta.group or td.name), []).append(td)
        return list(out.items())

    @property
    def name(self) -> str:
        return str(self.meta.scenario or self.scenario.get("name") or self.path.name)

    @property
    def complete(self) -> bool:
        return bool(self.meta.complete) and all(t.result and t.result.complete is not False and not t.recomputed
                                                 for t in self.targets)


def _read_json(p: Path, model=None) -> dict | None:
    """A result file, None when missing or unreadable, or when ``model`` (its result model) refuses it;
    RunDirError (exit 2) when a newer latbench wrote it."""
    try:
        data = read_result(p)
        if model is not None:
            model.model_validate(data)  # what the readers' typed attributes will find there
        return data
    except RunDirError:
        raise
    except (OSError, ValueError, ValidationError):
        return None


def load_rundir(path) -> RunData:
    """Load a RunDir; raises RunDirError when ``path`` holds neither meta.json nor target folders."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    raw = RunDir(path).meta() if (path / META).exists() else {}  # RunDirError (exit 2) when it is not latbench's
    meta = Meta.model_validate(raw)
    try:
        scenario = yaml.safe_load((path / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        scenario = {}
    if not isinstance(scenario, dict):
        scenario = {}
    entries = meta.targets or [
        MetaTarget(name=p.name, dir=p.name) for p in sorted(path.iterdir())
        if p.is_dir() and ((p / SUMMARY).exists() or records_exist(p / REQUESTS))]
    if not raw and not entries:
        raise RunDirError(f"{path}: no meta.json and no target folders: not a latbench RunDir")
    repeats = _read_json(path / REPEATS, Repeats)
    run = RunData(path, meta, scenario, repeated=None if repeats is None else Repeats.model_validate(repeats))
    for e in entries:
        tdir = path / (e.dir or e.name)
        td = TargetData(e.name or tdir.name, tdir, e, _read_json(tdir / SUMMARY, Summary))
        if td.summary is None and td.has_records:
            td.summary = recompute_summary(td, run)
            td.recomputed = True
        run.targets.append(td)
    run.cold_start = _cold_start(path, meta)
    return run


def _goodput(scenario: dict) -> list[GoodputObjectives] | None:
    """The scenario's goodput: block (None when absent or unreadable: no goodput is computed)."""
    g = scenario.get("goodput")
    try:
        return [GoodputObjectives.model_validate(e) for e in ([g] if isinstance(g, dict) else g)] if g else None
    except (ValueError, TypeError):
        return None


def _cold_start(path: Path, meta: Meta) -> dict[str, StartGroup] | None:
    """cold_start.json's groups, or, for a study whose run stopped before writing it (or wrote an older form
    without per-start rows), the same computed from the RunDir's files by
    :func:`loadgen.analysis.coldstart.cold_start_summary` (and read back as the file would be)."""
    if not any(t.start is not None for t in meta.targets):  # repeated runs have groups, not starts
        return None
    data = _read_json(path / COLD_START)
    try:
        groups = ColdStart.from_file(data).groups if isinstance(data, dict) else None
    except ValidationError:
        groups = None
    if groups and all("per_start" in g.model_fields_set for g in groups.values()):
        return groups
    computed = ColdStart(groups=cold_start_summary(path, meta))
    return ColdStart.model_validate(jsonable(computed.to_json())).groups


def _plans_and_slos(scenario: dict) -> tuple[list[PhasePlan], list, float | None]:
    """The phases, objectives and expected rate of scenario.yaml as written (read loosely: it is the scenario's
    text, not a result file; raises when its load cannot be planned)."""
    load = scenario.get("load") or {}
    model = Load.model_validate(load, context={"expected_qps": load.get("expected_qps")})
    slos = []
    for line in scenario.get("slo") or []:
        try:  # the scenario's own reading: `- burst: latency.p99 < 800ms` comes back from YAML as a mapping
            slos.append(slo_line(line))
        except (ValueError, TypeError):
            pass  # the run validated it; a hand-edited file must not stop the report
    return plan_phases(model), slos, model.expected_qps


def recompute_summary(td: TargetData, run: RunData) -> dict:
    """The summary of a target whose run died before writing summary.json, from its records and scenario."""
    table = td.table()
    try:
        plans, slos, expected_qps = _plans_and_slos(run.scenario)
    except Exception:  # no usable scenario.yaml: one phase spanning the records
        plans, slos, expected_qps = [PhasePlan(0, "run", 0.0, max(_span(table), 1e-3))], [], None
    duration = td.meta.duration_s or _span(table)
    note = "recomputed from the records by the report: the run stopped before it wrote this target's summary"
    s = summarize(table, plans, slos, float(duration or 1e-3), target=td.name, scenario=run.name,
                  complete=False, notes=[note], expected_qps=expected_qps,
                  capacity=run.meta.capacity if isinstance(run.meta.capacity, CapacityRef) else None,
                  goodput=_goodput(run.scenario or {}))
    return jsonable(s)


def _span(table: pa.Table) -> float:
    if table.num_rows == 0:
        return 0.0
    hi = [pc.max(table.column(c)).as_py() for c in ("done", "scheduled")]
    hi = [v for v in hi if v is not None and not math.isnan(v)]
    return float(max(hi)) if hi else 0.0
