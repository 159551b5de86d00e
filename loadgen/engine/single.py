"""The default engine: one asyncio process (:class:`NativeEngine`) with its protocol, prompts and transport.

Also the wiring that every native sender shares (:func:`build_sender`): the multi-process engine's
children build theirs the same way.
"""

from __future__ import annotations

from typing import Callable

from loadgen.engine.base import EngineResult, EngineSettings, MeasuredTarget, OnEngine, run_async
from loadgen.engine.failfast import FailFast
from loadgen.engine.native import NativeEngine
from loadgen.protocols.workload import make_workload
from loadgen.records.rundir import REQUESTS
from loadgen.records.schema import RecordWriter
from loadgen.scenario.model import Target
from loadgen.schedule.arrivals import PhasePlan, plan_phases
from loadgen.schedule.sharding import share
from loadgen.transports.factory import make_transport

TransportFactory = Callable[[Target], object]


def build_sender(mt: MeasuredTarget, fail_fast: float | None, k: int = 0, p: int = 1,
                 transport_factory: TransportFactory = make_transport, plans: list[PhasePlan] | None = None):
    """(settings, protocol, prompts, transport) for sender ``k`` of ``p`` (``max_in_flight`` split between them).

    ``plans``: phases to send instead of the scenario's (``latbench watch`` sends one of its own).
    The transport is made but not started."""
    sc = mt.loaded.scenario
    plans = plan_phases(sc.load) if plans is None else plans
    failfast = FailFast(sc.slo, plans, mt.name, fail_fast) if fail_fast else None
    settings = EngineSettings(plans, timeout=mt.target.timeout,
                              max_in_flight=max(1, share(sc.load.max_in_flight, k, p)),
                              seed=sc.load.seed, burstiness=sc.load.burstiness, grace=sc.load.grace, worker=k,
                              failfast=failfast, cancel=sc.workload.cancel,
                              label=mt.name)
    protocol, prompts = make_workload(mt.target, sc.workload, mt.model, mt.url, sc.load.seed, mt.loaded.path.parent,
                                      trace=sc.load.trace)
    return settings, protocol, prompts, transport_factory(mt.target)


async def run_single(mt: MeasuredTarget, on_engine: OnEngine | None = None,
                     fail_fast: float | None = None) -> EngineResult:
    """Run one target in this process (its telemetry is sampled around the run, by
    :meth:`loadgen.run.measurement.Measurement.telemetry`)."""
    settings, protocol, prompts, transport = build_sender(mt, fail_fast)
    await transport.start()
    engine = NativeEngine(settings, protocol, prompts, transport, RecordWriter(mt.tdir / REQUESTS))
    if on_engine:
        on_engine(engine)
    try:
        return await engine.run()
    finally:
        await transport.close()


class SingleProcess:
    """The :class:`~loadgen.engine.base.Engine` of one asyncio process (uvloop when installed)."""

    name = "native"

    def run(self, mt: MeasuredTarget, on_engine: OnEngine | None = None,
            fail_fast: float | None = None) -> EngineResult:
        return run_async(run_single(mt, on_engine, fail_fast))
