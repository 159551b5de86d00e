"""One measurement of one target, the same for every command that sends load (``run``, ``capacity``, ``watch``).

:func:`measure` is a context manager around the engine's run. On the way in it starts the target when latbench
manages it (its output into ``server.log``), resolves its URL and model, and checks it before any load
(:mod:`loadgen.run.preflight`); while the load runs it watches the managed process; on the way out it stops
the process and keeps its log. What could have bent the numbers is measured here, once, for every command:

- a managed server that exits during the run stops the load at once (in-flight requests are recorded as
  cancelled, every record kept), and the summary says which process, how and when
  (:func:`exit_text`): the run is invalid, not failed;
- a target that cannot be reached, is not at its URL, refuses the credentials, lacks the model or does not
  answer in its API's shape stops the run before any load (:class:`PreflightFailed`, exit 3);
- the CPU waits of latbench and of the managed server are sampled while each engine runs
  (:meth:`Measurement.sampling`, ``host.csv``), and a phase in which the judged one waited too long for a CPU
  makes the run (or the capacity step, or the watch) invalid (:meth:`Measurement.host_block`);
- the target's own telemetry (its /metrics, its GPUs: NVML here or a DCGM exporter) is sampled while each engine
  runs, whatever the engine (:meth:`Measurement.telemetry`), and read per phase into summary.json's ``telemetry``
  and ``telemetry.csv`` (:meth:`Measurement.telemetry_block`).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from loadgen.analysis.host import host_summary, read_host
from loadgen.analysis.telemetry import read_samples, telemetry_summary
from loadgen.engine.base import MeasuredTarget, OnEngine, RunControl
from loadgen.engine.host import INTERVAL, HostSampler, watch_run
from loadgen.engine.scrape import INTERVAL as SCRAPE_INTERVAL
from loadgen.engine.telemetry import TelemetrySampler
from loadgen.errors import TargetError
from loadgen.fetch import FetchError, fetch
from loadgen.records.results import HostSummary, ServerExited, ServerInfo, StateReset, Summary, TelemetrySummary
from loadgen.records.rundir import GPU_METRICS, HOST, SERVER_LOG, SERVER_METRICS, TELEMETRY
from loadgen.records.series_file import write_series
from loadgen.run.preflight import Check, check_tokenizer, preflight
from loadgen.run.reset import reset_state
from loadgen.run.targets import ManagedServer, ServerExit, ServerLog, start_managed
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.model import Target
from loadgen.scenario.urls import join_url
from loadgen.schedule.arrivals import PhasePlan
from loadgen.units import json_num

log = logging.getLogger("latbench")


class PreflightFailed(TargetError):
    """The pre-flight check found the target unusable: nothing was sent (exit 3)."""

    def __init__(self, check: Check):
        self.check = check
        super().__init__(f"pre-flight: {check.problem}")


def cli_target(targets: list[Target], target_url: str | None) -> list[Target]:
    """The scenario's targets, or with ``--target URL`` its first one sent to that URL (no managed server)."""
    if not target_url:
        return targets
    return [targets[0].model_copy(update={"url": target_url, "reference": None, "command": None})]


def host_judged(target: Target) -> tuple[str, dict[str, str]]:
    """Whose CPU waits judge the run (the managed server's; latbench's for an external target), and how the reasons
    name each tree host.csv watches."""
    labels = {"latbench": "latbench"}
    if target.reference is not None:
        labels["server"] = "the reference server"
    elif target.command is not None:
        labels["server"] = f"the server command {Path(target.command.run[0]).name!r}"
    return ("server" if "server" in labels else "latbench"), labels


def resolve_model(target: Target, url: str, server: ManagedServer | None) -> str:
    """The model name to send: the scenario's, the managed server's, or the first one ``/models`` lists."""
    if target.model:
        return target.model
    if target.reference is not None and server is not None:
        return server.config.get("model_name") or target.reference.model
    if target.api == "http" or not url.startswith(("http://", "https://")):
        return ""
    try:  # latbench's one non-load client: a deadline, a size cap, the headers never sent to another origin
        resp = fetch("GET", join_url(url, "/models"), headers=target.headers)
        return str(resp.json()["data"][0]["id"]) if resp.ok else "default"
    except (FetchError, ValueError, KeyError, IndexError, TypeError):  # no /models: a neutral name
        return "default"


@dataclass
class Measurement:
    """A target ready to be measured: started, resolved, checked, watched."""

    loaded: LoadedScenario
    target: Target  # with the resolved url
    url: str
    model: str
    server: ManagedServer | None
    metrics_url: str | None
    check: Check | None
    log: ServerLog | None
    _control: RunControl | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def exited(self) -> ServerExit | None:
        """The managed server's exit, when it ended before latbench stopped it."""
        return self.server.exited if self.server is not None else None

    def measured(self, tdir: Path, index: int = 0, loaded: LoadedScenario | None = None) -> MeasuredTarget:
        return MeasuredTarget(loaded or self.loaded, self.target, self.url, self.model, tdir, index)

    def on_engine(self, inner: OnEngine | None) -> OnEngine:
        """``inner``, and the engine remembered: a server that exits aborts it."""
        def attach(control: RunControl) -> None:
            with self._lock:
                self._control = control
                dead = self.exited is not None
            if dead:
                control.call_soon(control.abort)
            if inner is not None:
                inner(control)

        return attach

    @contextmanager
    def sampling(self, interval: float = INTERVAL, max_samples: int | None = None) -> Iterator[HostSampler]:
        """The host sampled around one engine run: latbench's process tree and the managed server's (CPU time,
        time waiting for a CPU, steal). ``write`` the sampler's rows to ``host.csv`` once the run's t0 is known;
        ``max_samples`` bounds its memory for a watch that runs for days (older samples are thinned)."""
        sampler = HostSampler(watch_run(self.server.proc.pid if self.server else None), interval=interval,
                              max_samples=max_samples).start()
        try:
            yield sampler
        finally:
            sampler.stop()  # before the server stops, on the way out of the measurement

    def host_block(self, tdir: Path, plans: list[PhasePlan], duration: float, note: str | None,
                   limit: float) -> HostSummary:
        """summary.json's ``host`` from ``tdir``'s host.csv: per phase, and the phases in which the judged tree
        (the managed server, or latbench for an external target) waited for a CPU more than ``limit`` of the
        time it had work (:func:`loadgen.analysis.host.host_summary`)."""
        judged, labels = host_judged(self.target)
        return host_summary(read_host(Path(tdir) / HOST), plans, duration, judged, labels, note=note, limit=limit)

    @contextmanager
    def telemetry(self, tdir: Path, max_scrapes: int | None = None) -> Iterator[TelemetrySampler]:
        """The target's own telemetry sampled around one engine run, whatever the engine: its /metrics into
        ``tdir``'s server_metrics.csv, a DCGM exporter's (``gpu_metrics_url``) or this host's GPUs through NVML
        (``target.telemetry.nvml``) into gpu_metrics.csv. Pass the sampler to :meth:`telemetry_block` once the
        run's t0 is known; ``max_scrapes`` bounds the files of a watch that runs for days."""
        tdir = Path(tdir)
        urls = ((self.metrics_url, SERVER_METRICS), (self.target.gpu_metrics_url, GPU_METRICS))
        sampler = TelemetrySampler([(url, tdir / name) for url, name in urls if url],
                                   nvml=self.target.telemetry.nvml and not self.target.gpu_metrics_url,
                                   redactor=self.loaded.redactor, max_scrapes=max_scrapes).start()
        try:
            yield sampler
        finally:
            sampler.stop()  # before the server stops, on the way out of the measurement

    def telemetry_block(self, tdir: Path, sampler: TelemetrySampler, t0: float, plans: list[PhasePlan],
                        duration: float, summary: Summary) -> TelemetrySummary:
        """summary.json's ``telemetry``: ``sampler``'s files put on the run's clock (``t0``), read per phase, and
        ``telemetry.csv`` written beside them (:func:`loadgen.analysis.telemetry.telemetry_summary`)."""
        tdir = Path(tdir)
        notes = sampler.write(t0, tdir / GPU_METRICS)
        server, gpu = read_samples(tdir / SERVER_METRICS), read_samples(tdir / GPU_METRICS)
        cfg = self.server.config if self.server is not None else None
        t = self.target.telemetry
        block, rows = telemetry_summary(server, gpu, plans, duration, summary, t.engine, t.names, cfg, notes,
                                        SCRAPE_INTERVAL)
        if rows:
            write_series(tdir / TELEMETRY, rows)
        return block

    def reset(self) -> StateReset | None:
        """Empty what ``target.reset`` names before a run (None when it names nothing): the outcome, never an
        exception (a reset that cannot be made leaves the cache as it was, and says so)."""
        spec = self.target.reset
        if spec is None:
            return None
        ref = self.target.reference is not None and self.server is not None
        # a managed reference server's own root: its API URL may be a gRPC address (transport: grpc)
        out = reset_state(spec, self.server.root if ref else self.url, self.metrics_url, self.target.headers,
                          engine="refserver" if ref else None)
        (log.info if out.done else log.warning)("%s: %s", self.target.name or "target", out.text)
        return out

    def _on_exit(self, ex: ServerExit) -> None:
        log.error("%s exited (%s) during the run: stopping the load", ex.what, ex.how)
        with self._lock:
            control = self._control
        if control is not None:
            control.call_soon(control.abort)


def server_info(server: ManagedServer | None) -> ServerInfo:
    """What meta.json (and capacity.json) say of a target's server, in one shape: a managed server's settings
    (its config line: arch, backend, model, port...) with its ``listen_s`` and ``ready_s``; nothing for a
    server latbench does not manage."""
    if server is None:
        return ServerInfo()
    return ServerInfo.model_validate({**server.config, "listen_s": json_num(server.listen_s),
                                      "ready_s": json_num(server.ready_s)})


def exit_text(ex: ServerExit, t0: float, plans: list[PhasePlan]) -> ServerExited:
    """A managed server's exit as the summary holds it: what, how, seconds into the run, the phase."""
    t = ex.at - t0 if t0 else float("nan")
    phase = next((p.name for p in plans if p.start <= t < p.end), plans[-1].name if plans and t >= 0 else None)
    where = f" {t:.1f} s into phase {phase}" if phase is not None and t == t else ""
    return ServerExited(what=ex.what, code=ex.code, t=t, phase=phase, text=f"{ex.what} exited ({ex.how}){where}")


@contextmanager
def measure(loaded: LoadedScenario, target: Target, log_dir: Path | None, *, check: bool = True,
            generate: bool = True, fix_prefix: bool = False) -> Iterator[Measurement]:
    """Start, resolve, check and watch ``target``; stop it and close its log on the way out.

    ``log_dir``: where ``server.log`` goes (a managed target's output). ``check``: run the pre-flight;
    ``generate``: with its minimal request (not in a fresh-start study); ``fix_prefix``: a URL given on the
    command line may gain the ``/v1`` it lacks. Raises TargetStartError, or PreflightFailed."""
    managed = target.reference is not None or target.command is not None
    slog = ServerLog(Path(log_dir) / SERVER_LOG if (managed and log_dir is not None) else None,
                     loaded.redactor.text) if managed else None
    server = None
    try:
        server = start_managed(target, slog)
        url = server.url_for(target.api, target.transport) if server else target.url
        # with the pre-flight, its model list names the model (one request fewer, one deadline less to wait)
        model = resolve_model(target, url, server) if not check or target.model or server else ""
        result = None
        if check:
            check_tokenizer(target, url, model, loaded.scenario.workload)  # prompts are built with it: first
            result = preflight(target, url, model, loaded.scenario.workload, generate=generate,
                               fix_prefix=fix_prefix and not managed, redact=loaded.redactor.text)
            for note in result.notes:
                log.warning("%s: pre-flight: %s", target.name, note)
            if not result.ok:
                raise PreflightFailed(result)
            url = result.url
            if not model:  # as resolve_model would: the first model listed, else a neutral name
                model = result.model or ("" if target.api == "http" or not url.startswith("http") else "default")
        metrics_url = target.metrics_url or (server.root + "/metrics" if target.reference is not None else None)
        if metrics_url and target.command is not None:  # '{port}' is the started command's port, as in its url
            metrics_url = metrics_url.replace("{port}", str(server.config["port"]))
        m = Measurement(loaded, target.model_copy(update={"url": url}), url, model, server, metrics_url, result, slog)
        if server is not None:
            server.watch(m._on_exit)
        yield m
    finally:
        if server is not None:
            server.stop()
        if slog is not None:
            slog.close()


@dataclass(frozen=True)
class TargetCheck:
    """One target's answer to ``latbench check``: ``check`` (None when it did not start: ``error`` says why)."""

    name: str
    check: Check | None
    model: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.check is not None and self.check.ok


def check_targets(loaded: LoadedScenario, target_url: str | None = None) -> list[TargetCheck]:
    """The pre-flight of every target of a scenario, nothing else: managed targets are started, checked and stopped
    (their output is not kept); nothing is recorded. A fresh-start study's targets are asked only what does not
    touch the model, as in its run."""
    out = []
    generate = loaded.scenario.load.starts == 1
    for target in cli_target(loaded.scenario.target_list(), target_url):
        try:
            with measure(loaded, target, None, generate=generate, fix_prefix=bool(target_url)) as m:
                out.append(TargetCheck(target.name, m.check, m.model))
        except PreflightFailed as exc:
            out.append(TargetCheck(target.name, exc.check))
        except TargetError as exc:
            out.append(TargetCheck(target.name, None, error=str(exc)))
    return out
