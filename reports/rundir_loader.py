"""Read a RunDir into memory: meta, scenario, and per target its summary, records and server metrics.

The one place reports touch files. A run that did not finish still loads: a target with records but
no summary.json (the run was killed) has its summary recomputed from the records with
:func:`loadgen.analysis.metrics.summarize`, and is marked incomplete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from loadgen.analysis.coldstart import cold_start_summary
from loadgen.analysis.host import read_host
from loadgen.analysis.metrics import records_frame, summarize
from loadgen.errors import RunDirError
from loadgen.records.rundir import (
    COLD_START,
    HOST,
    META,
    REPEATS,
    REQUESTS,
    SERVER_METRICS,
    SUMMARY,
    RunDir,
    jsonable,
    read_result,
)
from loadgen.records.schema import SCHEMA, read_records, records_exist
from loadgen.scenario.model import GoodputObjectives, Load, slo_line
from loadgen.schedule.arrivals import PhasePlan, plan_phases

#: Record columns the plots read (token times are read separately, for a sample only).
PLOT_COLUMNS = ("phase", "recorded", "scheduled", "sent", "connect_start", "connected", "tls",
                "first_byte", "first_token", "done", "error", "output_tokens")


@dataclass
class TargetData:
    name: str
    dir: Path
    meta: dict
    summary: dict | None
    recomputed: bool = False
    unreadable: str | None = None  # why requests.parquet could not be read (the report then shows summary.json's)
    _table: pa.Table | None = None
    _frame: pd.DataFrame | None = None
    _server: pd.DataFrame | None = None
    _host: pd.DataFrame | None = None

    @property
    def has_records(self) -> bool:
        """Records were written and can be read (reading them once, to know)."""
        if not records_exist(self.dir / REQUESTS):
            return False
        self.table()
        return self.unreadable is None

    def table(self) -> pa.Table:
        """All records (read once); none, with :attr:`unreadable` saying why, when the file cannot be read (a
        truncated parquet): the report still renders, from summary.json, without the figures drawn from records."""
        if self._table is None:
            try:
                self._table = read_records(self.dir / REQUESTS)
            except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
                self.unreadable = (f"{REQUESTS} cannot be read ({type(exc).__name__}): the numbers are summary.json's, "
                                   "the figures drawn from the records are left out")
                self._table = SCHEMA.empty_table()
        return self._table

    def frame(self) -> pd.DataFrame:
        """Records without token times, with the derived columns of :func:`loadgen.analysis.metrics.records_frame`."""
        if self._frame is None:
            t = self.table()
            self._frame = records_frame(t.select([c for c in PLOT_COLUMNS if c in t.column_names]))
        return self._frame

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


def _float(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return math.nan


@dataclass
class RunData:
    path: Path
    meta: dict
    scenario: dict
    targets: list[TargetData] = field(default_factory=list)
    cold_start: dict | None = None  # cold_start.json of a study of fresh starts (load.starts > 1)
    repeats: dict | None = None  # repeats.json of a repeated run (loadgen.analysis.repeated)

    def groups(self) -> list[tuple[str, list[TargetData]]]:
        """Targets under their architecture: the fresh starts of a cold-start study, or the repetitions of a
        repeated run, share a group; any other target is a group of its own."""
        out: dict[str, list[TargetData]] = {}
        for td in self.targets:
            out.setdefault(str(td.meta.get("group") or td.name), []).append(td)
        return list(out.items())

    @property
    def name(self) -> str:
        return str(self.meta.get("scenario") or self.scenario.get("name") or self.path.name)

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete")) and all(t.summary and t.summary.get("complete", True)
                                                        and not t.recomputed
                                                        for t in self.targets)


def _read_json(p: Path) -> dict | None:
    """A result file, None when missing or unreadable; RunDirError (exit 2) when a newer latbench wrote it."""
    try:
        return read_result(p)
    except RunDirError:
        raise
    except (OSError, ValueError):
        return None


def load_rundir(path) -> RunData:
    """Load a RunDir; raises RunDirError when ``path`` holds neither meta.json nor target folders."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    meta = RunDir(path).meta() if (path / META).exists() else {}  # RunDirError (exit 2) when it is not latbench's
    try:
        scenario = yaml.safe_load((path / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        scenario = {}
    if not isinstance(scenario, dict):
        scenario = {}
    entries = meta.get("targets") or [
        {"name": p.name, "dir": p.name} for p in sorted(path.iterdir())
        if p.is_dir() and ((p / SUMMARY).exists() or records_exist(p / REQUESTS))]
    if not meta and not entries:
        raise RunDirError(f"{path}: no meta.json and no target folders: not a latbench RunDir")
    run = RunData(path, meta, scenario, repeats=_read_json(path / REPEATS))
    for e in entries:
        tdir = path / str(e.get("dir") or e.get("name"))
        td = TargetData(str(e.get("name") or tdir.name), tdir, e, _read_json(tdir / SUMMARY))
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


def _cold_start(path: Path, meta: dict) -> dict | None:
    """cold_start.json, or, for a study whose run stopped before writing it (or wrote an older form without
    per-start rows), the same computed from the RunDir's files by :func:`loadgen.coldstart.cold_start_summary`."""
    if not any("start" in t for t in meta.get("targets") or []):  # repeated runs have groups, not starts
        return None
    cs = _read_json(path / COLD_START)
    if cs and "schema_version" in cs:  # its groups under "groups"; before schema_version, the file was the groups
        cs = cs.get("groups")
    if cs and isinstance(cs, dict) and all(isinstance(g, dict) and "per_start" in g for g in cs.values()):
        return cs
    return jsonable(cold_start_summary(path, meta))


def _plans_and_slos(scenario: dict):
    load = scenario.get("load") or {}
    plans = plan_phases(Load.model_validate(load, context={"expected_qps": load.get("expected_qps")}))
    slos = []
    for line in scenario.get("slo") or []:
        try:  # the scenario's own reading: `- burst: latency.p99 < 800ms` comes back from YAML as a mapping
            slos.append(slo_line(line))
        except (ValueError, TypeError):
            pass  # the run validated it; a hand-edited file must not stop the report
    return plans, slos


def recompute_summary(td: TargetData, run: RunData) -> dict:
    """The summary of a target whose run died before writing summary.json, from its records and scenario."""
    table = td.table()
    try:
        plans, slos = _plans_and_slos(run.scenario)
    except Exception:  # no usable scenario.yaml: one phase spanning the records
        plans, slos = [PhasePlan(0, "run", 0.0, max(_span(table), 1e-3))], []
    duration = td.meta.get("duration_s") or _span(table)
    note = "recomputed from the records by the report: the run stopped before it wrote this target's summary"
    s = summarize(table, plans, slos, float(duration or 1e-3), target=td.name, scenario=run.name,
                  complete=False, notes=[note], expected_qps=(run.scenario.get("load") or {}).get("expected_qps"),
                  capacity=run.meta.get("capacity"), goodput=_goodput(run.scenario or {}))
    return jsonable(s)


def _span(table: pa.Table) -> float:
    if table.num_rows == 0:
        return 0.0
    hi = [pc.max(table.column(c)).as_py() for c in ("done", "scheduled")]
    hi = [v for v in hi if v is not None and not math.isnan(v)]
    return float(max(hi)) if hi else 0.0
