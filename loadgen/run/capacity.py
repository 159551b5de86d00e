"""The capacity search: steady open-loop steps against one running target, as ``latbench capacity`` runs it.

Doubling from ``qps_min`` until a step fails (or ``qps_max`` passes), then geometric bisection between the
last passing and the first failing rate until they are within ``tolerance``. Whether a step held is
judged by :func:`loadgen.analysis.capacity.judge` (the rules are described there).

One idea at several stages, capacity planning, so one file name: :mod:`loadgen.analysis.capacity` (the judgement),
:mod:`reports.capacity` (the report), :mod:`loadgen.cli.capacity` (the command).
"""

from __future__ import annotations

import math
import time

from loadgen.analysis.capacity import (
    CAPACITY,
    LONGER,
    STEP_FAIL_FAST,
    Step,
    judge,
    knee,
    sectioned_intervals,
    step_goodput,
    step_load,
    step_objectives,
    unreachable,
)
from loadgen.analysis.metrics import build_summary, records_frame
from loadgen.analysis.verdict import Kind, Reason, Verdict, generator_limited_text, host_contended_text
from loadgen.engine.base import OnEngine
from loadgen.engine.single import SingleProcess
from loadgen.engine.telemetry import TelemetrySampler
from loadgen.errors import EXIT_INVALID
from loadgen.records.results import Capacity, CapacitySearch, CapacityTarget, Generator, StateReset
from loadgen.records.rundir import HOST, REQUESTS, SUMMARY, RunDir, RunMeta, write_json
from loadgen.records.schema import read_records
from loadgen.run.measurement import cli_target, exit_text, measure, server_info
from loadgen.run.runner import check_target_url
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.slo import SLO
from loadgen.schedule.arrivals import plan_phases


class _Contended(Exception):
    """A step failed while the process judged waited too long for a CPU: the search stops there."""


class _GeneratorLimited(Exception):
    """The first step failed while the load generator could not drive it: nothing held, and nothing says the
    target failed; the search stops there, invalid."""


def find_capacity(loaded: LoadedScenario, run_step, rd: RunDir, slos: list[SLO], qps_min: float, qps_max: float,
                  step_duration: float, warmup: float, tolerance: float = 0.1, max_steps: int = 12,
                  on_step=None, blocks_of=None) -> Capacity:
    """Search for the highest sustainable rate. ``run_step(loaded_for_step, tdir) -> EngineResult`` sends one
    step's load (the caller owns the target's lifetime). Returns capacity.json's model.

    ``blocks_of(tdir, plans, result, summary) -> dict``: blocks of the step's summary measured around its run:
    ``host`` (its CPU waits, :meth:`loadgen.run.measurement.Measurement.host_block`), ``telemetry`` (the target's
    own, :meth:`~loadgen.run.measurement.Measurement.telemetry_block`) and ``reset`` (the state emptied before it).
    A step that fails while the judged process waited too long for a CPU ends the search: the failure may be the
    host's, so the search is invalid, not an answer."""
    sc = loaded.scenario
    slos = step_objectives(slos)
    steps: list[Step] = []

    def run_at(qps: float, longer: bool = False) -> Step:
        load = step_load(sc.load, qps, step_duration * (LONGER if longer else 1), warmup, len(steps))
        step_sc = sc.model_copy(update={"load": load, "slo": slos})
        name = f"qps-{qps:.4g}" + (f"-x{LONGER}" if longer else "")
        tdir = rd.new_target_dir(name)
        res = run_step(LoadedScenario(step_sc, loaded.path, loaded.raw, loaded.redactor), tdir)
        table = read_records(tdir / REQUESTS)
        model = build_summary(table, plan_phases(load), slos, res.duration, target=name, scenario=sc.name,
                              complete=not res.interrupted, notes=res.notes,
                              send_lag_threshold=sc.load.send_lag_threshold,
                              cpu_seconds=res.cpu_seconds, failed_fast=res.failed_fast,
                              goodput=step_goodput(sc.goodput))
        for key, block in (blocks_of(tdir, plan_phases(load), res, model) if blocks_of is not None else {}).items():
            setattr(model, key, block)
        sectioned_intervals(records_frame(table), model.slo)
        write_json(tdir / SUMMARY, model, loaded.redactor)
        ok, reasons, unsure = judge(model, qps)
        step = model.phases["step"]
        m = step.metrics
        contended = model.host.contended if model.host else None
        st = Step(qps, ok and not res.interrupted, step.achieved_qps,
                  m["latency"].stat("p50"), m["latency"].stat("p99"), m["ttft"].stat("p99"),
                  step.error_rate, bool(res.failed_fast), reasons, tdir.name,
                  inconclusive=unsure and not longer, unreachable=unreachable(model),
                  contended=host_contended_text(contended) if contended else None,
                  generator_limited=(generator_limited_text(model.generator or Generator())
                                     if model.generator_limited else None))
        steps.append(st)
        if on_step:
            on_step(st)
        if res.interrupted:
            raise KeyboardInterrupt
        if st.contended and not st.passed:
            raise _Contended(f"step {st.dir}: {st.contended}")
        if st.generator_limited and not st.passed and not any(s.passed for s in steps):
            raise _GeneratorLimited(f"step {st.dir}: {st.generator_limited}")
        return st

    def holds(qps: float) -> bool:
        """One step at ``qps``; an inconclusive one is run again, LONGER times as long, and that run decides
        (still in doubt, it does not hold). Taking a doubtful step as failed would pull the answer below
        what the target holds whenever one short step was unlucky, and taking it as passed, above."""
        st = run_at(qps)
        if st.inconclusive and len(steps) < max_steps:
            st = run_at(qps, longer=True)
        return st.passed

    t_start = time.perf_counter()
    lo, hi = None, None  # last passing, first failing
    qps = qps_min
    interrupted = False
    contended = generator = None
    try:
        while qps <= qps_max * (1 + 1e-9) and len(steps) < max_steps:
            if holds(qps):
                lo = qps
                if qps >= qps_max:
                    break
                qps = min(qps * 2, qps_max)
            else:
                hi = qps
                break
        while lo is not None and hi is not None and hi / lo > 1 + tolerance and len(steps) < max_steps:
            mid = math.sqrt(lo * hi)
            if holds(mid):
                lo = mid
            else:
                hi = mid
    except KeyboardInterrupt:
        interrupted = True
    except _Contended as exc:
        contended = str(exc)
    except _GeneratorLimited as exc:
        generator = str(exc)
    expected = sc.load.expected_qps
    failing = next((st for st in steps if hi is not None and st.qps == hi), None)
    search = CapacitySearch(qps_min=qps_min, qps_max=qps_max, step_duration_s=step_duration, warmup_s=warmup,
                            tolerance=tolerance, seconds=time.perf_counter() - t_start)
    return Capacity(
        # the first failing step failed for the generator alone: the target holds at least the last passing rate
        limited_by_generator=bool(failing and failing.generator_limited
                                  and failing.reasons == [failing.generator_limited]), scenario=sc.name,
        slo=[s.expr for s in slos], search=search, max_sustainable_qps=lo, first_failing_qps=hi, bracket=[lo, hi],
        knee_qps=knee(steps), expected_qps=expected,
        headroom=(lo / expected - 1.0) if (lo is not None and expected) else None,
        complete=not interrupted and contended is None and generator is None,
        host_contended=contended,  # why the search stopped at a step the host may have failed: invalid
        generator_limited=generator,  # the first step failed as the load generator fell behind: invalid
        unreachable=lo is None and bool(steps) and steps[0].unreachable,  # an invalid search: exit 3
        steps=[s.result() for s in steps])


def run_capacity(loaded: LoadedScenario, slos: list[SLO], qps_min: float, qps_max: float, step_duration: float,
                 warmup: float, tolerance: float = 0.1, out: str | None = None, target_url: str | None = None,
                 on_engine: OnEngine | None = None, on_step=None, exact_out: bool = False,
                 preflight: bool = True) -> tuple[RunDir, Capacity]:
    """Start the scenario's (first) target once, search its capacity step by step, write the RunDir; returns it
    and its capacity.json, as its model.

    Rates in requests per second, durations in seconds. ``on_step(Step)`` after each step. ``exact_out``:
    ``out`` is the RunDir itself (one search of a repeated one, :mod:`loadgen.run.repeated_capacity`)."""
    check_target_url(target_url)
    sc = loaded.scenario
    target = cli_target(sc.target_list(), target_url)[0]
    redactor = loaded.redactor
    redactor.add_url(target_url)
    rd = RunDir.create(out, f"capacity_{sc.name}", exact=exact_out)
    rd.write_scenario(loaded.redacted(), redactor)
    rd.write_metric_definitions()
    meta = RunMeta.start(rd, sc.name, "native", redactor, kind="capacity")
    engine = SingleProcess()
    t0 = [0.0]
    # one server for the whole search, checked once before the first step; its log is the RunDir's server.log
    with measure(loaded, target, rd.path, check=preflight, fix_prefix=bool(target_url)) as m:
        url, model, server = m.url, m.model, server_info(m.server)

        host_notes: dict[str, str | None] = {}
        telemetry: dict[str, TelemetrySampler] = {}
        resets: dict[str, StateReset] = {}

        def run_step(step_loaded: LoadedScenario, tdir):
            reset = m.reset()  # each step starts from the same state: no step inherits the last one's cache
            if reset is not None:
                resets[tdir.name] = reset
            # each step's CPU waits (a step the host failed is no capacity) and the target's own telemetry
            with m.sampling() as host, m.telemetry(tdir) as tel:
                res = engine.run(m.measured(tdir, loaded=step_loaded), m.on_engine(on_engine),
                                 fail_fast=STEP_FAIL_FAST)
            host.write(tdir / HOST, res.t0)
            host_notes[tdir.name], telemetry[tdir.name] = host.note, tel
            t0[0] = res.t0
            return res

        def blocks_of(tdir, plans, res, summary) -> dict:
            host = m.host_block(tdir, plans, res.duration, host_notes.get(tdir.name), sc.load.host_wait_limit)
            tel = m.telemetry_block(tdir, telemetry.pop(tdir.name), res.t0, plans, res.duration, summary)
            return {"host": host, "telemetry": tel, **({"reset": resets[tdir.name]} if tdir.name in resets else {})}

        def step_done(st: Step) -> None:
            reset = {"reset": resets[st.dir]} if st.dir in resets else {}
            meta.add_target(st.dir, st.dir, url=url, model=model, qps=st.qps, server=server, **reset)
            if on_step:
                on_step(st)

        found = find_capacity(loaded, run_step, rd, slos, qps_min, qps_max, step_duration, warmup, tolerance,
                              on_step=step_done, blocks_of=blocks_of)
    if m.exited is not None:  # the search stopped at the step the server died in: invalid, not a capacity
        found.server_exit = exit_text(m.exited, t0[0], [])
        found.complete = False
    found.target = CapacityTarget(name=target.name, url=url, model=model, server=server)
    write_json(rd.path / CAPACITY, found, redactor)
    reasons = ([Reason(Kind.SERVER_EXITED, target.name, found.server_exit.text)] if m.exited is not None
               else []) + ([Reason(Kind.HOST_CONTENDED, target.name, found.host_contended)]
                           if found.host_contended else []) \
        + ([Reason(Kind.GENERATOR_LIMITED, target.name, found.generator_limited)] if found.generator_limited else [])
    # a search that measured something else says so where a run's verdict stands
    verdict = {"verdict": Verdict("invalid", EXIT_INVALID, reasons).to_json()} if reasons else {}
    meta.update(complete=found.complete, capacity=found.bracket, **verdict)
    return rd, found
