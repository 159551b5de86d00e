"""A whole run: targets one after another, each through its engine into the RunDir, then the verdict.

This is the library function behind ``latbench run``; the CLI only parses flags and prints. The run walks
down the stages once per target: start the target if latbench manages it (:mod:`loadgen.run.targets`),
send its load (:mod:`loadgen.engine`), summarize its records (:mod:`loadgen.analysis.metrics`), and judge
the run (:mod:`loadgen.analysis.verdict`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.analysis.coldstart import cold_start_summary
from loadgen.analysis.failures import failure_summary
from loadgen.analysis.metrics import build_summary
from loadgen.analysis.regression import check_baseline
from loadgen.analysis.repeated import RepeatRun, build_repeats, group_outcomes
from loadgen.analysis.repeated_baseline import baseline_reasons, build_regression
from loadgen.analysis.telemetry import telemetry_slos
from loadgen.analysis.verdict import Kind, TargetOutcome, Verdict, judge
from loadgen.engine.base import EngineResult, MeasuredTarget, OnEngine
from loadgen.engine.failfast import FAIL_FAST_SLACK
from loadgen.engine.options import EngineOptions
from loadgen.errors import RunDirWriteError, TargetStartError, UsageError
from loadgen.protocols.trace_workload import describe_trace
from loadgen.protocols.workload import CHAT_APIS, describe_tokens
from loadgen.records.results import (
    Capacity,
    CapacityRef,
    ColdStart,
    HostSummary,
    Preflight,
    Repeats,
    ServerExited,
    ServerInfo,
    Summary,
    Trace,
)
from loadgen.records.rundir import (
    CAPACITY,
    COLD_START,
    HOST,
    REGRESSION,
    REPEATS,
    REQUESTS,
    SERVER_LOG,
    SUMMARY,
    RunDir,
    RunMeta,
    write_json,
)
from loadgen.records.schema import read_records
from loadgen.run.coldstart import make_cold, prepare_weights
from loadgen.run.measurement import PreflightFailed, cli_target, exit_text, measure, server_info
from loadgen.run.preflight import Check
from loadgen.run.repeated import plan_runs
from loadgen.run.signals import received
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.model import Repeat, Target
from loadgen.scenario.urls import url_problem
from loadgen.schedule.arrivals import plan_phases
from loadgen.transports.factory import receive_stamps

log = logging.getLogger("latbench")


@dataclass
class TargetRun:
    """One target's part of a run (one fresh start of it, in a cold-start study)."""

    name: str
    dir: str
    url: str
    summary: Summary | None = None  # summary.json, as its model (None: the target did not run)
    server: ServerInfo = field(default_factory=ServerInfo)
    error: str | None = None
    failed_fast: str | None = None
    interrupted: bool = False
    group: str | None = None  # the target a fresh start or a repetition belongs to
    repetition: int | None = None  # repeated runs: which one (its objectives are judged over all of them)
    start: int | None = None  # cold-start studies: which fresh start of ``group`` (1-based)
    error_kind: Kind = Kind.TARGET_ERROR  # what ``error`` was: a start that failed, or the pre-flight
    server_exited: bool = False  # its managed server exited during the run (the summary says how)

    def outcome(self) -> TargetOutcome:
        return TargetOutcome(self.name, self.summary, self.error, self.failed_fast, self.interrupted,
                             slo=[] if self.repetition is not None else None, error_kind=self.error_kind,
                             group=self.group if self.start is not None else None, start=self.start)

    @property
    def stops_run(self) -> bool:
        """Nothing after this target can run meaningfully: it failed to start or its pre-flight, its server died,
        it was interrupted, or it failed fast."""
        return bool(self.error or self.interrupted or self.failed_fast or self.server_exited)


@dataclass
class RunResult:
    rundir: RunDir
    targets: list[TargetRun]
    interrupted: bool
    verdict: Verdict
    repeats: Repeats | None = None  # repeats.json of a repeated run (its targets judged over their runs)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def reasons(self) -> list[str]:
        return self.verdict.texts()


def capacity_fields(path: str) -> CapacityRef:
    """What a headroom headline needs from the capacity.json of a ``latbench capacity`` RunDir."""
    f = Path(path) / CAPACITY
    try:
        result = Capacity.model_validate(json.loads(f.read_text()))
    except (OSError, ValueError) as exc:  # a file its model refuses too (pydantic's ValidationError)
        raise UsageError(f"--capacity {path}: not a capacity RunDir ({f.name}: {exc})") from None
    return CapacityRef(rundir=Path(path).name, target=result.target.name if result.target else None, slo=result.slo,
                       knee_qps=result.knee_qps, max_sustainable_qps=result.max_sustainable_qps,
                       first_failing_qps=result.first_failing_qps)


def check_target_url(url: str | None) -> None:
    """A ``--target`` URL latbench can send to, or a UsageError (exit 2) saying why not (never quoting it)."""
    problem = url_problem(url) if url is not None else None
    if problem:
        raise UsageError(f"--target: {problem}")


def run_scenario(loaded: LoadedScenario, out: str | None = None, target_url: str | None = None,
                 on_engine: OnEngine | None = None, exact_out: bool = False,
                 fail_fast: bool = False, baseline: str | None = None, max_regression: float = 0.10,
                 opts: EngineOptions | None = None, capacity: str | None = None,
                 repeat: Repeat | None = None, preflight: bool = True) -> RunResult:
    """Run every target of a scenario, write the RunDir, and return the verdict.

    ``target_url`` replaces the scenario's target(s) by one URL (the ``--target`` flag).
    ``on_engine`` is called with each engine before it starts (the CLI attaches its display there).
    ``fail_fast`` stops a target as soon as an objective can no longer be met. ``baseline`` names a
    RunDir to check for regressions beyond ``max_regression`` (a fraction). ``capacity`` names the RunDir
    of a capacity search of the same target: the headroom headline then says how far the run's highest
    rate sits from its knee. ``repeat`` (default: the scenario's) runs everything several times,
    interleaved (:mod:`loadgen.run.repeated`), and judges the objectives over the runs
    (:mod:`loadgen.analysis.repeated`). ``preflight``: check each target before its load
    (:mod:`loadgen.run.preflight`; a ``--target`` URL without the ``/v1`` its API needs gains it there).
    """
    check_target_url(target_url)
    if baseline is not None:
        check_baseline(baseline)  # before any traffic: a baseline that cannot be read is a usage error (exit 2)
    cap = capacity_fields(capacity) if capacity is not None else None
    opts = opts or EngineOptions()
    sc = loaded.scenario
    repeat = repeat or sc.repeat
    if repeat.runs > 1 and sc.load.starts > 1:
        raise UsageError("repeated runs and load.starts both repeat the run from fresh servers: give one of them")
    if repeat.runs > 1 and fail_fast:
        raise UsageError("--fail-fast judges one run; repeated runs are judged together: drop one of them")
    redactor = loaded.redactor
    redactor.add_url(target_url)  # its password and keys are secret too, wherever they resurface
    rd = RunDir.create(out, sc.name, exact=exact_out)
    rd.write_scenario(loaded.redacted(), redactor)
    rd.write_metric_definitions()
    targets = cli_target(sc.target_list(), target_url)
    meta = RunMeta.start(rd, sc.name, opts.engine, redactor, preflight=preflight,
                         **({"capacity": cap} if cap is not None else {}),
                         **({"repeat": repeat.model_dump()} if repeat.runs > 1 else {}))
    try:
        runs: list[TargetRun] = []
        slack = FAIL_FAST_SLACK if fail_fast else None
        plan = plan_runs(targets, sc.load.starts, repeat.runs)
        expected = len(plan)
        # cold-start studies: each target's weights drawn once, before (not in) any of its starts
        weights = {slot.index: prepare_weights(slot.target) for slot in plan if slot.start == 1}
        signals_before, stopped = received(), False
        for i, slot in enumerate(plan):
            if i and repeat.pause > 0 and _pause(repeat.pause, signals_before):
                stopped = True  # Ctrl-C between two runs: no more runs, the ones taken are kept and judged
                break
            cold = make_cold(weights[slot.index]) if slot.start is not None else None  # weights out of the page cache
            tr = _run_one(loaded, slot.target, slot.name, rd, meta, on_engine, slack, slot.index, opts,
                          check=preflight, fix_prefix=bool(target_url))
            if slot.group is not None:
                tr.group, tr.repetition, tr.start = slot.group, slot.repetition, slot.start
                cold_fields = {"cold": cold, "weights_prepared": weights[slot.index]} if slot.start is not None else {}
                meta.targets[-1].update(**slot.meta_fields(), **cold_fields)
            runs.append(tr)
            if tr.stops_run:
                break
        interrupted = stopped or (bool(runs) and runs[-1].interrupted)
        if sc.load.starts > 1:
            write_json(rd.path / COLD_START, ColdStart(groups=cold_start_summary(rd.path, meta.model())), redactor)
        groups, repeats = [], None
        if repeat.runs > 1:
            repeats = build_repeats([RepeatRun(tr.group, tr.repetition, tr.dir, tr.summary) for tr in runs],
                                    sc.slo, repeat.judge, order=[tr.dir for tr in runs])
            write_json(rd.path / REPEATS, repeats, redactor)
            groups = group_outcomes(repeats)
        regressions = []
        if baseline is not None and not interrupted:
            regression = build_regression(rd, RunDir(baseline), max_regression)
            write_json(rd.path / REGRESSION, regression, redactor)
            regressions = baseline_reasons(regression)
            for note in regression.notes:
                log.warning("baseline: %s", note)
        verdict = judge([r.outcome() for r in runs], interrupted=interrupted, expected_targets=expected,
                        regressions=regressions, groups=groups)
        meta.update(complete=not interrupted and len(runs) == expected
                    and all(r.summary and not r.server_exited for r in runs),
                    exit_code=verdict.exit_code, verdict=verdict.to_json())
        return RunResult(rd, runs, interrupted, verdict, repeats)
    except RunDirWriteError as exc:  # what the CLI says: whether the records taken before it are kept
        exc.records_kept = rd.records_written()
        raise


def _pause(seconds: float, signals_before: int) -> bool:
    """Wait ``seconds`` between two runs; True as soon as a Ctrl-C or SIGTERM has come since the first run began."""
    end = time.monotonic() + seconds
    while received() == signals_before:
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.05, left))
    return True


def _run_one(loaded: LoadedScenario, target: Target, name: str, rd: RunDir, meta: RunMeta,
             on_engine: OnEngine | None, fail_fast: float | None, index: int, opts: EngineOptions,
             check: bool = True, fix_prefix: bool = False) -> TargetRun:
    """Measure one target (:func:`loadgen.run.measurement.measure`: start, check, watch, stop), summarize it."""
    redactor = loaded.redactor
    tdir = rd.new_target_dir(name)
    tr = TargetRun(name, tdir.name, target.url or "")
    entry = meta.add_target(name, tr.dir)
    sc = loaded.scenario
    try:
        with measure(loaded, target, tdir, check=check, generate=sc.load.starts == 1,
                     fix_prefix=fix_prefix) as m:
            tr.url, tr.server = m.url, server_info(m.server)
            entry.update(url=m.url, model=m.model, server=tr.server,
                         **({"preflight": m.check.result()} if m.check is not None else {}))
            mt = m.measured(tdir, index)
            tokens = describe_tokens(mt.target, sc.workload, m.model, m.url, loaded.path.parent)
            spec = sc.load.trace
            trace = (describe_trace(mt.target, sc.workload, spec, m.model, m.url, loaded.path.parent,
                                    chat=target.api in CHAT_APIS) if spec is not None else None)
            reset = m.reset()  # after the pre-flight, right before the load: its request is not left cached
            if reset is not None:
                entry.update(reset=reset)
            with m.sampling() as host, m.telemetry(tdir) as tel:  # CPU waits and steal, /metrics, GPUs
                res = opts.engine_for(target).run(mt, m.on_engine(on_engine), fail_fast)
    except PreflightFailed as exc:
        tr.error, tr.error_kind = exc.check.problem, Kind.PREFLIGHT
        log.error("target %s: pre-flight: %s (nothing was sent)", name, tr.error)
        entry.update(url=exc.check.url, preflight=exc.check.result())
        return tr
    except TargetStartError as exc:
        tr.error = str(exc)  # written and printed through the redactor, as everything is
        log.error("target %s did not start: %s", name, tr.error)
        return tr
    except KeyboardInterrupt:  # Ctrl-C while it started (it is stopped): an interrupted run, exit 3
        tr.interrupted = True
        return tr
    host.write(tdir / HOST, res.t0)
    exited = exit_text(m.exited, res.t0, plan_phases(sc.load)) if m.exited is not None else None
    tr.interrupted = res.interrupted and exited is None  # a dead server stopped it, not the user
    tr.failed_fast = res.failed_fast
    tr.server_exited = exited is not None
    summary = summarize_target(mt, res, opts.engine, run_name=name, capacity=meta.model().capacity, tokens=tokens,
                               trace=trace, server_exit=exited, check=m.check,
                               host=m.host_block(tdir, plan_phases(sc.load), res.duration, host.note,
                                                 sc.load.host_wait_limit))
    summary.telemetry = m.telemetry_block(tdir, tel, res.t0, plan_phases(sc.load), res.duration, summary)
    telemetry_slos(summary, sc.slo)
    if reset is not None:
        summary.reset = reset
    write_json(tdir / SUMMARY, summary, redactor)
    tr.summary = summary
    # t0_monotonic: perf_counter at t0, which on Linux is CLOCK_MONOTONIC (one clock for every process of the
    # host), so t0_monotonic + a record's time can be set against another program's time.monotonic()
    log_field = {"server_log": f"{tdir.name}/{SERVER_LOG}"} if m.log is not None and m.log.path is not None else {}
    entry.update(wall_start=res.wall_start, t0_monotonic=res.t0, duration_s=res.duration, requests=res.requests,
                 **log_field)
    return tr


def trace_note(trace: Trace) -> str:
    """The summary's note on a trace replay whose requests were clipped to fit the target."""
    sources = {"scenario": "load.trace.max_model_len", "target": "the target's /v1/models"}
    src = sources.get(trace.max_model_len_source)
    limit = f"max_model_len {trace.max_model_len} ({src})" if trace.max_model_len else ""
    if trace.max_input_tokens:
        limit += (" and " if limit else "") + f"max_input_tokens {trace.max_input_tokens}"
    return (f"{trace.clipped} of {trace.requests} trace requests were clipped to fit {limit}: "
            f"{trace.clipped_input_tokens} input and {trace.clipped_output_tokens} output tokens cut")


def summarize_target(mt: MeasuredTarget, res: EngineResult, engine: str, run_name: str | None = None,
                     capacity: CapacityRef | None = None, tokens: dict | None = None, trace: Trace | None = None,
                     server_exit: ServerExited | None = None, check: Check | None = None,
                     host: HostSummary | None = None) -> Summary:
    """summary.json of one target from its records and its engine's result, as its model (``capacity``: see
    :func:`capacity_fields`; ``tokens``: how its token counts were made; ``trace``: the trace replayed, with the
    requests clipped to fit the target)."""
    sc = mt.loaded.scenario
    notes = list(res.notes) + ([trace_note(trace)] if trace and trace.clipped else [])
    table = read_records(mt.tdir / REQUESTS)
    summary = build_summary(table, plan_phases(sc.load), sc.slo, res.duration,
                            target=mt.name, scenario=sc.name,
                            complete=not (res.interrupted or res.failed_fast or server_exit),
                            notes=notes, send_lag_threshold=sc.load.send_lag_threshold,
                            cpu_seconds=res.cpu_seconds, processes=res.processes, failed_fast=res.failed_fast,
                            expected_qps=sc.load.expected_qps, capacity=capacity, goodput=sc.goodput,
                            tokens=tokens)
    summary.model = mt.model
    summary.engine = engine
    summary.generator.receive_stamps = receive_stamps(mt.target, engine)  # arrival (kernel) or read time
    summary.lost_workers = [w.to_json() for w in res.lost_workers]  # the verdict names each (its target's)
    if trace is not None:
        summary.trace = trace
    summary.host = host if host is not None else HostSummary(measured=False, note="host not measured")
    summary.run_name = run_name or mt.name  # differs from "target" for the fresh starts of a cold-start study
    example = res.error_example
    if example:  # what a server said, redacted where it stands (its first 200 characters may cut a secret short)
        example = {**example, "detail": mt.loaded.redactor.text(example["detail"])}
    summary.failures = failure_summary(table, example)
    if server_exit is not None:
        summary.server_exit = server_exit
    summary.preflight = check.result() if check is not None else Preflight(ok=None, skipped=True)
    return summary
