"""The result files of a RunDir as typed models (pydantic v2): what summary.json, metrics.json, meta.json,
repeats.json, cold_start.json, capacity.json, regression.json and watch.json hold.

Each model names the fields that readers use; every model allows extra keys, so a file written by an older
latbench (fewer keys) or a newer one (more keys) still reads, and a key that a writer adds before a model names
it is kept, not dropped. latbench's writers build the models, nested blocks included, by keyword; the RunDir
writes a model (:func:`loadgen.records.rundir.write_result`; a dict, as meta.json's owner holds it, is validated
into the file's model there), and readers validate what they read. The JSON Schemas of ``latbench schema
--results`` (and the files under ``schemas/``) are generated from these models.

The models live in one module per file (:mod:`~loadgen.records.summary_file` and the scopes of
:mod:`~loadgen.records.summary_scope`, :mod:`~loadgen.records.meta_file`, :mod:`~loadgen.records.run_files`) on a
common base (:mod:`~loadgen.records.result_base`); this module names them all and maps each file to its model.

A model dumps only the keys that were given (``exclude_unset``): validating a dict and dumping it gives the same
JSON back. Numbers are as :func:`loadgen.units.json_num` writes them: a float, an int, null, or the strings
``"inf"`` / ``"-inf"``.
"""

from __future__ import annotations

from loadgen.records.meta_file import (  # noqa: F401 (re-exported: the result models' one import path)
    CapacityRef,
    Meta,
    MetaTarget,
    MetaWatch,
    PageCache,
    ServerInfo,
    WeightsPrepared,
)
from loadgen.records.result_base import (  # noqa: F401 (re-exported: the result models' one import path)
    Num,
    ResultFile,
    ResultModel,
)
from loadgen.records.run_files import (  # noqa: F401 (re-exported: the result models' one import path)
    Capacity,
    CapacitySearch,
    CapacityStep,
    CapacityTarget,
    Check,
    ColdRules,
    ColdStart,
    MetricDefinitions,
    Regression,
    RepeatedSearch,
    RepeatRun,
    Repeats,
    RepeatSlo,
    RepeatTarget,
    RunCounts,
    RunStat,
    SearchSpread,
    StartGroup,
    StartRow,
    StartSpread,
    Watch,
    WatchTarget,
    WeightsFile,
)
from loadgen.records.summary_file import (  # noqa: F401 (re-exported: the result models' one import path)
    Burst,
    BurstTail,
    Contended,
    Conversations,
    FailureGroup,
    Failures,
    Generator,
    Headroom,
    HeadroomCapacity,
    HeadroomLevel,
    HeadroomObjective,
    HostPhase,
    HostSummary,
    HostTree,
    InFlight,
    Preflight,
    Recovery,
    RecoveryWindows,
    ServerExited,
    StateReset,
    Summary,
    Timeseries,
    TokenInfo,
    Trace,
    Turn,
)
from loadgen.records.summary_scope import (  # noqa: F401 (re-exported: the result models' one import path)
    Chunks,
    ClosedLoop,
    Gap,
    ImageSizeRow,
    MetricStats,
    Percentile,
    Reasoning,
    Scope,
    ScopeImages,
    ScopeMediaCache,
    ScopeStructured,
    ScopeTokens,
    ScopeToolCalls,
    ShortPhase,
    SloResult,
    Spread,
    ToolCountRow,
    UsageVsCounted,
)
from loadgen.records.summary_telemetry import (  # noqa: F401 (re-exported: the result models' one import path)
    ChecklistItem,
    TelemetryMove,
    TelemetryPhase,
    TelemetryStat,
    TelemetrySummary,
)

#: Result file name -> its model (the names are loadgen.records.rundir's RESULT_FILES).
RESULT_MODELS: dict[str, type[ResultFile]] = {
    "summary.json": Summary,
    "metrics.json": MetricDefinitions,
    "meta.json": Meta,
    "repeats.json": Repeats,
    "cold_start.json": ColdStart,
    "capacity.json": Capacity,
    "regression.json": Regression,
    "watch.json": Watch,
}


def result_schemas() -> dict[str, dict]:
    """The JSON Schema of each result file, by file name (validation mode: what a reader may meet)."""
    return {name: {"$id": schema_file(name), **model.model_json_schema()} for name, model in RESULT_MODELS.items()}


def schema_file(name: str) -> str:
    """The file that holds result file ``name``'s schema in the repository's ``schemas/``: ``meta.schema.json``."""
    return name.removesuffix(".json") + ".schema.json"
