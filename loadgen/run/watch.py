"""``latbench watch``: the scenario's workload and targets as a low, steady probe that runs until stopped,
its measurements served as Prometheus metrics.

One phase, ``watch``, at ``qps`` requests per second (open loop, the scenario's arrival process), per target,
all targets at once in one event loop (the native engine, unchanged: a watch is one long phase). Each target's
records go through a :class:`~loadgen.records.rotate.RotatingRecordWriter` (disk bounded) and, as each batch
is written, into the :class:`~loadgen.monitoring.exposition.WatchExporter` that ``/metrics`` serves. The run's
end (SIGINT/SIGTERM, or ``duration``) is a normal stop: in-flight requests get the scenario's grace, then
each target's retained records are summarized into ``summary.json`` as a one-phase run.

Each target's own telemetry (its /metrics, its GPUs) is sampled as a run's is, into its server_metrics.csv and
telemetry.csv and its summary's ``telemetry`` block, with older scrapes thinned so that the files stay bounded
however long the watch runs (``SUMMARY_BINS`` scrapes at most); Prometheus may scrape the server itself as well:
``latbench dashboards`` puts its panels beside the probe's.

One idea at several stages, ``latbench watch``, so one file name: :mod:`loadgen.cli.watch` (the command).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from loadgen.analysis.goodput import bounds_for
from loadgen.analysis.metrics import build_summary
from loadgen.analysis.verdict import TargetOutcome, Verdict, judge
from loadgen.engine.base import EngineResult, MeasuredTarget, RunControl, run_async
from loadgen.engine.live import LiveStats
from loadgen.engine.native import NativeEngine
from loadgen.engine.single import build_sender
from loadgen.engine.telemetry import TelemetrySampler
from loadgen.errors import EXIT_INVALID, EXIT_OK
from loadgen.monitoring.exposition import PHASE, WatchExporter, serve
from loadgen.monitoring.window import WindowState, watchable
from loadgen.records.results import MetaWatch, StateReset, Summary, Watch, WatchTarget
from loadgen.records.rotate import RotatingRecordWriter, disk_bytes, read_segments
from loadgen.records.rundir import HOST, SUMMARY, WATCH, RunDir, RunMeta, write_json
from loadgen.run.measurement import Measurement, cli_target, exit_text, measure, server_info
from loadgen.run.runner import check_target_url
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.model import TRACE_FIELDS
from loadgen.schedule.arrivals import PhasePlan

log = logging.getLogger("latbench.watch")

WATCH_JSON = WATCH
SUMMARY_BINS = 3600  # summary.json's time series: at most this many bins, however long the watch ran
HOST_SAMPLES = 2 * SUMMARY_BINS  # host.csv: at most about this many samples (older ones thinned), however long


@dataclass(frozen=True)
class WatchSettings:
    """How a watch runs. Times in seconds; ``duration`` None: until stopped."""

    qps: float = 1.0
    duration: float | None = None
    window_s: float = 300.0
    rotate_every_s: float = 3600.0
    keep: int = 24
    host: str = "127.0.0.1"
    port: int = 9464
    linger_s: float = 0.0  # /metrics stays up this long after the probe stopped, for a last scrape

    def plan(self, arrival: str) -> PhasePlan:
        end = self.duration if self.duration is not None else math.inf
        return PhasePlan(0, PHASE, 0.0, end, self.qps, self.qps, arrival=arrival)


@dataclass
class WatchedTarget:
    name: str
    dir: str
    url: str
    writer: RotatingRecordWriter | None = None
    result: EngineResult | None = None
    summary: Summary | None = None  # summary.json, as its model, once the watch ended
    skipped: list[str] = field(default_factory=list)  # objectives a watch does not judge, with why
    reset: StateReset | None = None  # what target.reset emptied before the probe started


@dataclass
class WatchResult:
    rundir: RunDir
    metrics_url: str
    targets: list[WatchedTarget]
    verdict: Verdict


class _ObservedWriter:
    """A RecordSink: each batch is written, then counted by the exporter. A failure to count is logged, never
    raised: the records matter more than the metrics made from them."""

    def __init__(self, inner: RotatingRecordWriter, observe: Callable[[pa.RecordBatch], None]):
        self.inner, self.observe = inner, observe
        self._warned = False

    def write(self, batch: pa.RecordBatch | None) -> None:
        self.inner.write(batch)
        if batch is not None and batch.num_rows:
            try:
                self.observe(batch)
            except Exception:
                if not self._warned:
                    self._warned = True
                    log.exception("the watch metrics could not count a batch of records")

    def close(self) -> None:
        self.inner.close()


class EngineGroup:
    """The :class:`~loadgen.engine.base.RunControl` of several engines running at once (a watch's targets), and
    the end of the watch: the linger after the probe stopped.

    Its methods only set flags and hand each engine's stop to that engine's loop, so ``call_soon`` runs them at
    once, from the signal handler: a stop is seen whenever it comes, before the engines start, while they run, or
    during the linger once their loop has ended."""

    def __init__(self):
        self.engines: list[NativeEngine] = []
        self.live = LiveStats(math.inf)
        self._stopped = False
        self.aborted = False
        self.stops = 0  # request_stop calls
        self.no_linger = False  # skip_linger(): the watch ends once its records are summarized
        self._stops_at_end: int | None = None  # stops when the probe ended (None: still probing)

    @property
    def t0(self) -> float:
        return min((e.t0 for e in self.engines if e.t0), default=0.0)

    @property
    def lingering(self) -> bool:
        """The probe has stopped; /metrics is still served."""
        return self._stops_at_end is not None

    def add(self, engine: NativeEngine) -> None:
        self.engines.append(engine)
        self.live = engine.live
        if self._stopped:
            engine.call_soon(engine.request_stop)

    def now(self) -> float:
        return self.engines[0].now() if self.engines else 0.0

    def request_stop(self) -> None:
        """Stop probing (in-flight requests get the grace); once the probe has stopped, end the linger."""
        self._stopped = True
        self.stops += 1
        for e in self.engines:
            e.call_soon(e.request_stop)

    def abort(self) -> None:
        self._stopped = self.aborted = True
        for e in self.engines:
            e.call_soon(e.abort)

    def skip_linger(self) -> None:
        """No linger (a SIGTERM: a service manager stopping the watch waits for no last scrape)."""
        self.no_linger = True

    def call_soon(self, fn: Callable[[], None]) -> None:
        fn()  # the group's methods are safe anywhere (see the class)

    def probe_ended(self) -> None:
        """The engines have returned: from now on a stop ends the linger."""
        self._stops_at_end = self.stops

    def linger(self, seconds: float) -> None:
        """Keep /metrics up ``seconds`` after the probe ended, for a last scrape; it ends at once on a stop asked
        since the probe ended (the Ctrl-C that stopped the probe does not count: a second one does), on
        :meth:`skip_linger`, or on an abort."""
        deadline = time.monotonic() + seconds
        while not (self.aborted or self.no_linger or self.stops != self._stops_at_end):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(0.05, left))


def watch_scenario(loaded: LoadedScenario, settings: WatchSettings, out: str | None = None,
                   target_url: str | None = None, on_ready: Callable[[str], None] | None = None,
                   on_engine: Callable[[RunControl], None] | None = None,
                   on_status: Callable[[list[TargetStatus]], None] | None = None,
                   status_every_s: float = 10.0, preflight: bool = True) -> WatchResult:
    """Probe every target of ``loaded`` at ``settings.qps`` and serve the metrics until stopped.

    ``on_ready(metrics_url)`` is called once /metrics is served and the targets are up; ``on_engine`` with the
    :class:`EngineGroup` to stop it (the signal handler's), once the targets are up, as the probe starts (a managed
    server still starting is interrupted, not waited for); ``on_status`` every ``status_every_s`` seconds with
    each target's judgement (called in a worker thread). After the probe, /metrics stays up ``settings.linger_s``
    (:meth:`EngineGroup.linger`: a stop then, or :meth:`EngineGroup.skip_linger` at any time, ends it)."""
    sc = loaded.scenario
    check_target_url(target_url)
    redactor = loaded.redactor
    redactor.add_url(target_url)  # its password and keys are secret too, wherever they resurface
    targets = cli_target(sc.target_list(), target_url)
    rd = RunDir.create(out, f"{sc.name}-watch")
    rd.write_metric_definitions()
    exporter = WatchExporter(sc.name, settings.window_s)
    plan = settings.plan(sc.load.arrival)
    _write_scenario(rd, loaded, settings, settings.duration)
    meta = RunMeta.start(rd, sc.name, "native", redactor, mode="watch", watch=_watch_meta(settings))
    watched: list[WatchedTarget] = []
    group = EngineGroup()
    stop_metrics = None
    measurements: list[Measurement] = []
    stack = ExitStack()  # every target's measurement (its managed server) ends with the watch
    try:
        # the port first: a taken one is a usage error found before anything is sent (on_ready comes later)
        metrics_url, stop_metrics = serve(exporter, settings.host, settings.port)
        mts = []
        for index, target in enumerate(targets):
            tdir = rd.new_target_dir(target.name)
            m = stack.enter_context(measure(loaded, target, tdir, check=preflight, fix_prefix=bool(target_url)))
            m.on_engine(None)(group)  # a managed server that exits stops the whole watch
            measurements.append(m)
            url, model = m.url, m.model
            wt = WatchedTarget(target.name, tdir.name, url, reset=m.reset())  # once, before the probe starts
            mt = MeasuredTarget(loaded, m.target, url, model, tdir, index)
            slos, skipped = watchable(list(sc.slo), target.name)
            wt.skipped = [f"{s.expr}: {why}" for s, why in skipped]
            meta.add_target(target.name, wt.dir, url=url, model=model, server=server_info(m.server),
                            slo_not_watched=wt.skipped, **({"reset": wt.reset} if wt.reset else {}))
            watched.append(wt)
            mts.append((mt, slos))
        holders = [dict() for _ in mts]
        for (mt, slos), holder in zip(mts, holders):
            exporter.add_target(mt.name, slos, settings.qps, _clock_of(holder), all_slos=list(sc.slo),
                                send_lag_threshold=sc.load.send_lag_threshold,
                                goodput_bounds=bounds_for(sc.goodput or [], mt.name, PHASE))
        meta.update(watch=_watch_meta(settings, metrics_url))
        if on_ready:
            on_ready(metrics_url)

        async def main():
            ticker = asyncio.ensure_future(_status_loop(exporter, watched, on_status, status_every_s))
            try:
                return await asyncio.gather(*(_watch_one(mt, plan, settings, exporter, group, holder, wt)
                                              for (mt, _), holder, wt in zip(mts, holders, watched)))
            finally:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)

        if on_engine:  # from here a signal stops the probe; before, it interrupts the start (KeyboardInterrupt)
            on_engine(group)
        # each target's CPU waits (and latbench's) while the probe runs: a watch on a contended host is invalid
        with ExitStack() as sampling:
            samplers = [sampling.enter_context(m.sampling(max_samples=HOST_SAMPLES)) for m in measurements]
            tels = [sampling.enter_context(m.telemetry(mt.tdir, max_scrapes=SUMMARY_BINS))
                    for m, (mt, _) in zip(measurements, mts)]
            try:
                results = run_async(main())
            finally:
                group.probe_ended()
        for wt, (mt, slos), res, m, host, tel in zip(watched, mts, results, measurements, samplers, tels):
            wt.result = res
            host.write(mt.tdir / HOST, res.t0)
            summary = _summary(mt, res, slos, settings, wt, m, host.note, tel)
            if m.exited is not None:
                summary.server_exit = exit_text(m.exited, res.t0, [settings.plan(sc.load.arrival)])
            summary.reset = wt.reset
            write_json(mt.tdir / SUMMARY, summary, redactor)
            wt.summary = summary
        elapsed = max((r.duration for r in results), default=0.0)
        _write_scenario(rd, loaded, settings, max(elapsed, 0.001))
        verdict = judge([TargetOutcome(w.name, w.summary, None, None, False) for w in watched],
                        interrupted=False, expected_targets=len(watched))
        for entry, w in zip(meta.targets, watched):
            entry.update(wall_start=w.result.wall_start, duration_s=w.result.duration, requests=w.result.requests)
        # the watch's own exit: 3 when it measured something else; an objective missed is for /metrics to alert on
        meta.update(complete=True, exit_code=verdict.exit_code if verdict.exit_code == EXIT_INVALID else EXIT_OK,
                    verdict=verdict.to_json())
        write_json(rd.path / WATCH_JSON, _watch_facts(watched, exporter, settings), redactor)
        group.linger(settings.linger_s)  # watch.json first: whoever sees it scrapes final counts
    finally:
        if stop_metrics is not None:
            stop_metrics()
        stack.close()
    return WatchResult(rd, metrics_url, watched, verdict)


@dataclass(frozen=True)
class TargetStatus:
    """One target's state for the console: requests by error class ('' ok), the window's judgement."""

    name: str
    requests: dict[str, int]
    window: WindowState | None


async def _status_loop(exporter: WatchExporter, watched: list[WatchedTarget],
                       on_status: Callable[[list[TargetStatus]], None] | None, every_s: float) -> None:
    if on_status is None:
        return
    while True:
        await asyncio.sleep(every_s)
        # judged in a thread: a judgement is pandas work, and the loop has requests to send on time
        await asyncio.to_thread(lambda: on_status([TargetStatus(w.name, exporter.requests(w.name),
                                                                exporter.judge(w.name)) for w in watched]))


def _clock_of(holder: dict) -> Callable[[], float | None]:
    def now() -> float | None:
        engine = holder.get("engine")
        return engine.now() if engine is not None and engine.t0 else None

    return now


async def _watch_one(mt: MeasuredTarget, plan: PhasePlan, settings: WatchSettings, exporter: WatchExporter,
                     group: EngineGroup, holder: dict, wt: WatchedTarget) -> EngineResult:
    eng_settings, protocol, prompts, transport = build_sender(mt, None, plans=[plan])
    wt.writer = RotatingRecordWriter(mt.tdir, settings.rotate_every_s, settings.keep)
    writer = _ObservedWriter(wt.writer, lambda batch: exporter.observe(mt.name, batch))
    await transport.start()
    try:
        engine = NativeEngine(eng_settings, protocol, prompts, transport, writer)
        holder["engine"] = engine
        group.add(engine)
        return await engine.run()
    finally:
        await transport.close()


def _summary(mt: MeasuredTarget, res: EngineResult, slos, settings: WatchSettings, wt: WatchedTarget,
             m: Measurement, host_note: str | None, tel: TelemetrySampler) -> Summary:
    """summary.json over the records still on disk, as a one-phase run from the oldest of them to the end, with the
    host's CPU waits and the target's own telemetry over the same span (``m``: the target's measurement, whose
    host.csv it reads; ``tel``: its telemetry sampler)."""
    table = read_segments(mt.tdir)
    start = 0.0
    notes = list(res.notes) + [f"not judged by a watch: {s}" for s in wt.skipped]
    if wt.writer is not None and wt.writer.deleted_rows:
        sched = table.column("scheduled").to_numpy()
        start = float(sched.min()) if len(sched) else res.duration
        notes.append(f"{wt.writer.deleted_rows} older records were deleted by rotation "
                     f"(every {settings.rotate_every_s:g} s, {settings.keep} kept); this summary covers "
                     f"{start:.0f}..{res.duration:.0f} s")
    sc = mt.loaded.scenario
    plan = PhasePlan(0, PHASE, start, max(res.duration, start + 1e-3), settings.qps, settings.qps,
                     arrival=sc.load.arrival)
    s = build_summary(table, [plan], slos, res.duration, target=mt.name, scenario=sc.name, complete=True,
                      notes=notes, send_lag_threshold=sc.load.send_lag_threshold, cpu_seconds=res.cpu_seconds,
                      timeseries_step=max(1.0, math.ceil(res.duration / SUMMARY_BINS)), goodput=sc.goodput)
    s.model, s.engine, s.run_name, s.mode = mt.model, "native", mt.name, "watch"
    s.host = m.host_block(mt.tdir, [plan], res.duration, host_note, sc.load.host_wait_limit)
    s.telemetry = m.telemetry_block(mt.tdir, tel, res.t0, [plan], res.duration, s)
    return s


def _write_scenario(rd: RunDir, loaded: LoadedScenario, settings: WatchSettings, duration: float | None) -> None:
    """scenario.yaml of a watch: the scenario as written, its phases replaced by the one the watch sent and its
    objectives by those a watch judges (so the file loads, and re-renders the summary, as a run's does)."""
    data = loaded.redacted()
    load = dict(data.get("load") or {})
    for key in ("mode", "sweep", "starts", "trace", *TRACE_FIELDS):  # a trace's prompts are sent, not its times
        load.pop(key, None)
    load["phases"] = [{"name": PHASE, "duration": f"{duration:g}s" if duration else "168h", "qps": settings.qps}]
    data["load"] = load
    names = [t.name for t in loaded.scenario.target_list()]
    kept = {s.expr for n in names for s in watchable(list(loaded.scenario.slo), n)[0]}
    data["slo"] = [line for line, s in zip(data.get("slo") or [], loaded.scenario.slo) if s.expr in kept]
    data["description"] = f"latbench watch at {settings.qps:g} req/s. " + str(data.get("description") or "")
    rd.write_scenario(data, loaded.redactor)


def _watch_meta(settings: WatchSettings, metrics_url: str | None = None) -> MetaWatch:
    """meta.json's ``watch``: the watch's settings, and its /metrics URL once it serves one."""
    w = MetaWatch(qps=settings.qps, window_s=settings.window_s, rotate_every_s=settings.rotate_every_s,
                  keep=settings.keep, duration_s=settings.duration)
    if metrics_url is not None:
        w.metrics_url = metrics_url
    return w


def _watch_facts(watched: list[WatchedTarget], exporter: WatchExporter, settings: WatchSettings) -> Watch:
    """watch.json: per target, requests counted, the last judgement, and what rotation kept on disk."""
    return Watch(settings={"qps": settings.qps, "window_s": settings.window_s,
                           "rotate_every_s": settings.rotate_every_s, "keep": settings.keep},
                 targets=[_target_facts(w, exporter) for w in watched])


def _target_facts(w: WatchedTarget, exporter: WatchExporter) -> WatchTarget:
    state = exporter.judge(w.name)
    wr = w.writer
    window = None if state is None else {
        "count": state.count, "errors": state.errors, "send_lag_p99": state.send_lag_p99,
        "probe_lagging": state.lagging,
        "slo": [{"expr": s.slo.expr, "value": s.value, "holding": s.holding} for s in state.slos]}
    return WatchTarget(name=w.name, requests=exporter.requests(w.name), window=window,
                       rows_written=wr.rows if wr else 0, rows_deleted=wr.deleted_rows if wr else 0,
                       segments_deleted=wr.deleted_segments if wr else 0, rotations=wr.rotations if wr else 0,
                       disk_bytes=disk_bytes(wr.tdir) if wr else 0)
