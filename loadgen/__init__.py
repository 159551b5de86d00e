"""latbench: latency benchmarking and load testing for AI inference APIs.

The public API, imported lazily (PEP 562): ``import loadgen`` loads nothing heavy, so ``latbench
--version`` and every child process stay light; ``loadgen.run_scenario`` imports what it needs when it
is first used.

    import loadgen
    loaded = loadgen.load_scenario("scenarios/steady.yaml")
    result = loadgen.run_scenario(loaded, out="runs")
    print(result.verdict.outcome, result.exit_code)

The stages, in the order data flows (imports point down this list only): ``scenario`` -> ``schedule``
-> ``records`` -> ``protocols`` -> ``transports`` -> ``engine`` -> ``analysis`` -> ``monitoring`` -> ``run``
-> ``cli``.
"""

from __future__ import annotations

import importlib

from loadgen.version import __version__

_EXPORTS = {
    # scenarios
    "load_scenario": "loadgen.scenario.loader",
    "scenario_schema": "loadgen.scenario.loader",
    "LoadedScenario": "loadgen.scenario.loader",
    "Scenario": "loadgen.scenario.model",
    "Target": "loadgen.scenario.model",
    "SLO": "loadgen.scenario.slo",
    "parse_slo": "loadgen.scenario.slo",
    # records and RunDirs
    "RunDir": "loadgen.records.rundir",
    "read_records": "loadgen.records.schema",
    # building blocks of a sender (for embedding and for benchmarks/)
    "plan_phases": "loadgen.schedule.arrivals",
    "make_prompt_source": "loadgen.scenario.prompts",
    "make_protocol": "loadgen.protocols.registry",
    "make_transport": "loadgen.transports.factory",
    "LeanTransport": "loadgen.transports.lean",
    "AiohttpTransport": "loadgen.transports.aiohttp_client",
    "HttpxTransport": "loadgen.transports.httpx_client",
    "RecordWriter": "loadgen.records.schema",
    # engines
    "Engine": "loadgen.engine.base",
    "EngineSettings": "loadgen.engine.base",
    "RunControl": "loadgen.engine.base",
    "run_async": "loadgen.engine.base",
    "NativeEngine": "loadgen.engine.native",
    "SingleProcess": "loadgen.engine.single",
    "MultiProcess": "loadgen.engine.multiproc",
    "LocustEngine": "loadgen.engine.locust",
    "EngineResult": "loadgen.engine.base",
    "MeasuredTarget": "loadgen.engine.base",
    "EngineOptions": "loadgen.engine.options",
    # analysis
    "summarize": "loadgen.analysis.metrics",
    "Verdict": "loadgen.analysis.verdict",
    "Reason": "loadgen.analysis.verdict",
    # running
    "run_scenario": "loadgen.run.runner",
    "RunResult": "loadgen.run.runner",
    "run_capacity": "loadgen.run.capacity",
    "gate_rundir": "loadgen.run.gate",
    # errors
    "LatbenchError": "loadgen.errors",
    "ScenarioError": "loadgen.errors",
    "TargetError": "loadgen.errors",
    "TargetStartError": "loadgen.errors",
    "TransportError": "loadgen.errors",
    "RunDirError": "loadgen.errors",
    "RunDirWriteError": "loadgen.errors",
    "UsageError": "loadgen.errors",
}

__all__ = [
    "__version__",
    "AiohttpTransport",
    "Engine",
    "EngineOptions",
    "EngineResult",
    "EngineSettings",
    "HttpxTransport",
    "LatbenchError",
    "LeanTransport",
    "LoadedScenario",
    "LocustEngine",
    "MeasuredTarget",
    "MultiProcess",
    "NativeEngine",
    "Reason",
    "RecordWriter",
    "RunControl",
    "RunDir",
    "RunDirError",
    "RunDirWriteError",
    "RunResult",
    "SLO",
    "Scenario",
    "ScenarioError",
    "SingleProcess",
    "Target",
    "TargetError",
    "TargetStartError",
    "TransportError",
    "UsageError",
    "Verdict",
    "gate_rundir",
    "load_scenario",
    "make_prompt_source",
    "make_protocol",
    "make_transport",
    "parse_slo",
    "plan_phases",
    "read_records",
    "run_async",
    "run_capacity",
    "run_scenario",
    "scenario_schema",
    "summarize",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
