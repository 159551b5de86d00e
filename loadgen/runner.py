"""A whole run: targets one after another, each through the engine into the RunDir, then summaries.

This is the library function behind ``latbench run``; the CLI only parses flags and prints.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import platform
import signal
import socket
import sys
import time
import urllib.request

import numpy as np
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loadgen import __version__
from loadgen.apis import make_protocol
from loadgen.engine import EngineSettings, NativeEngine, run_async
from loadgen.loader import LoadedScenario
from loadgen.metrics import records_frame, summarize
from loadgen.prompts import make_prompt_source
from loadgen.records import RecordWriter, read_records
from loadgen.failfast import FAIL_FAST_SLACK, FailFast
from loadgen.regression import compare_runs, describe_regressions
from loadgen.rundir import COLD_START, META, REGRESSION, REQUESTS, SERVER_METRICS, SUMMARY, RunDir, safe_name, scrub, write_json
from loadgen.scenario import Target
from loadgen.slo import show_value
from loadgen.scrape import MetricsScraper
from loadgen.schedule import plan_phases
from loadgen.targets import ManagedServer, TargetStartError, start_command, start_reference
from loadgen.transport_aiohttp import AiohttpTransport

log = logging.getLogger("latbench")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INVALID = 0, 1, 2, 3
_UNREACHABLE = {"connect", "dns", "tls"}


@dataclass
class TargetRun:
    name: str
    dir: str
    url: str
    summary: dict | None = None
    server: dict = field(default_factory=dict)
    error: str | None = None
    failed_fast: str | None = None
    interrupted: bool = False


@dataclass
class RunResult:
    rundir: RunDir
    targets: list[TargetRun]
    interrupted: bool
    exit_code: int
    verdict: str
    reasons: list[str]


def _resolve_model(target: Target, url: str, server: ManagedServer | None) -> str:
    if target.model:
        return target.model
    if target.reference is not None:
        return server.config.get("model_name") or target.reference.model
    if target.api == "http":
        return ""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=5) as resp:
            data = json.loads(resp.read())
        return data["data"][0]["id"]
    except Exception:  # no /models: send a neutral name; the server's answer will say if it matters
        return "default"


def _on_loopback(url: str) -> bool:
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_transport(target: Target):
    """``transport:`` when given; else httpx for ``http2: true``, the lean asyncio transport for plain
    http://, and aiohttp for TLS (and whatever else the lean path does not do)."""
    from loadgen.transport_lean import LeanTransport

    choice = target.transport
    if choice == "auto":
        choice = "httpx" if target.http2 else "lean" if LeanTransport.supports(target.url or "") else "aiohttp"
    if choice == "lean":
        if not LeanTransport.supports(target.url or ""):
            raise ValueError(f"transport: lean sends to http:// only, not {target.url!r}; use transport: aiohttp")
        return LeanTransport()
    if choice == "httpx":
        from loadgen.transport_httpx import HttpxTransport

        return HttpxTransport(verify=target.verify, http2=target.http2)
    return AiohttpTransport(verify=target.verify)


async def _run_target(loaded: LoadedScenario, target: Target, url: str, model: str, tdir: Path,
                      on_engine: Callable[[NativeEngine], None] | None, fail_fast: bool | float = False,
                      metrics_url: str | None = None) -> tuple:
    """``fail_fast``: True for --fail-fast's rule, or a number: stop once that many times the breaches an
    objective allows have happened (capacity steps stop only when the failure is beyond doubt)."""
    sc = loaded.scenario
    plans = plan_phases(sc.load)
    slack = fail_fast if not isinstance(fail_fast, bool) else FAIL_FAST_SLACK
    failfast = FailFast(sc.slo, plans, target.name, slack) if fail_fast else None
    protocol = make_protocol(target.model_copy(update={"url": url}), sc.workload, model)
    prompts = make_prompt_source(sc.workload, sc.load.seed, loaded.path.parent)
    settings = EngineSettings(plans, timeout=target.timeout, max_in_flight=sc.load.max_in_flight,
                              seed=sc.load.seed, burstiness=sc.load.burstiness, grace=sc.load.grace,
                              failfast=failfast)
    transport = make_transport(target.model_copy(update={"url": url}))
    await transport.start()
    engine = NativeEngine(settings, protocol, prompts, transport, RecordWriter(tdir / REQUESTS))
    if on_engine:
        on_engine(engine)
    scraper = None
    if metrics_url:
        scraper = MetricsScraper()
        await scraper.start(metrics_url, tdir / SERVER_METRICS, lambda: engine.t0)
    try:
        result = await engine.run()
    finally:
        if scraper is not None:
            await scraper.stop()
        await transport.close()
    if scraper is not None and scraper.note:
        result.notes.append(scraper.note)
    return plans, result


@dataclass
class EngineOptions:
    """Which engine sends the load: the native asyncio engine, or Locust's master/worker runners."""

    engine: str = "native"  # native | locust
    workers: int = 1  # locust: local worker processes
    expect_workers: int | None = None  # locust: workers joining from other hosts
    master_bind: str = "127.0.0.1"
    on_progress: Callable[[dict], None] | None = None  # locust: about once a second
    processes: int = 1  # native: generator processes, each with its own event loop (0: what the machine can spare)

    def processes_for(self, target: Target) -> int:
        """0 means: one process when the target shares this machine (it needs the other cores), else all
        cores but one, at most 8."""
        if self.processes:
            return self.processes
        if target.reference is not None or target.command is not None or _on_loopback(target.url or ""):
            return 1
        return max(1, min(8, (os.cpu_count() or 2) - 1))


def run_scenario(loaded: LoadedScenario, out: str | None = None, target_url: str | None = None,
                 on_engine: Callable[[NativeEngine], None] | None = None, exact_out: bool = False,
                 fail_fast: bool = False, baseline: str | None = None, max_regression: float = 0.10,
                 opts: EngineOptions = EngineOptions()) -> RunResult:
    """Run every target of a scenario, write the RunDir, and return the verdict.

    ``target_url`` replaces the scenario's target(s) by one URL (the ``--target`` flag).
    ``on_engine`` is called with each engine before it starts (the CLI attaches its display there).
    ``fail_fast`` stops a target as soon as an objective can no longer be met. ``baseline`` names a
    RunDir to check for regressions beyond ``max_regression`` (a fraction).
    """
    if baseline is not None and not (Path(baseline) / META).is_file():
        raise ValueError(f"--baseline {baseline}: not a RunDir (no {META})")
    sc = loaded.scenario
    rd = RunDir.create(out, sc.name, exact=exact_out)
    rd.write_scenario(loaded.redacted())
    rd.write_metric_definitions()
    targets = sc.target_list()
    if target_url:
        targets = [targets[0].model_copy(update={"url": target_url, "reference": None, "command": None})]
    secrets = loaded.secrets
    meta = {
        "latbench_version": __version__,
        "engine": opts.engine,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "scenario": sc.name,
        "targets": [],
        "complete": False,
    }
    rd.write_meta(meta, secrets)
    runs: list[TargetRun] = []
    interrupted = False
    for index, target in enumerate(targets):
        starts = sc.load.starts if (target.reference or target.command) else 1
        for k in range(1, starts + 1):
            name = target.name if starts == 1 else f"{target.name}-start{k}"
            tr = _run_one(loaded, target, name, rd, meta, on_engine, fail_fast, index, opts)
            if starts > 1:
                meta["targets"][-1].update(group=target.name, start=k)
                rd.write_meta(meta, secrets)
            runs.append(tr)
            if tr.error or tr.interrupted or (tr.failed_fast and fail_fast):
                break
        if runs and (runs[-1].error or runs[-1].interrupted or (runs[-1].failed_fast and fail_fast)):
            interrupted = runs[-1].interrupted
            break
    if sc.load.starts > 1:
        write_json(rd.path / COLD_START, cold_start_summary(runs, meta, rd.path), secrets)
    regression = None
    if baseline is not None and not interrupted:
        regression = compare_runs(rd, RunDir(baseline), max_regression)
        write_json(rd.path / REGRESSION, regression)
    expected = sum(sc.load.starts if (t.reference or t.command) else 1 for t in targets)
    code, verdict, reasons = verdict_of(runs, interrupted, expected, regression)
    meta.update(complete=not interrupted and len(runs) == expected and all(r.summary for r in runs),
                exit_code=code, verdict=verdict, reasons=reasons)
    rd.write_meta(meta, secrets)
    return RunResult(rd, runs, interrupted, code, verdict, reasons)


def _run_one(loaded: LoadedScenario, target: Target, name: str, rd: RunDir, meta: dict,
             on_engine, fail_fast: bool, index: int = 0, opts: EngineOptions = EngineOptions()) -> TargetRun:
    """Start the target if latbench manages it, run the phases against it, summarize, stop it."""
    sc, secrets = loaded.scenario, loaded.secrets
    tr = TargetRun(name, safe_name(name), target.url or "")
    entry = {"name": name, "dir": tr.dir}
    meta["targets"].append(entry)
    rd.write_meta(meta, secrets)
    tdir = rd.target_dir(name)
    server = None
    try:
        if target.reference is not None:
            server = start_reference(target.reference)
        elif target.command is not None:
            server = start_command(target.command)
    except TargetStartError as exc:
        tr.error = scrub(str(exc), secrets)
        log.error("target %s did not start: %s", name, tr.error)
        return tr
    url = server.url if server else target.url
    tr.url = url
    if server:
        tr.server = {**server.config, "listen_s": server.listen_s, "ready_s": server.ready_s}
    try:
        model = _resolve_model(target, url, server)
        metrics_url = target.metrics_url or (server.root + "/metrics" if target.reference is not None else None)
        procs = opts.processes_for(target)
        if opts.engine == "native" and procs > 1:
            from loadgen.multiproc import run_target_processes

            plans, res = run_async(run_target_processes(loaded, target, url, model, tdir, on_engine, fail_fast,
                                                        processes=procs))
        elif opts.engine == "locust":
            from loadgen.locust_engine import run_target_locust

            plans, res = run_target_locust(loaded.path, index, url, model, tdir, workers=opts.workers,
                                           expect_workers=opts.expect_workers, master_bind=opts.master_bind,
                                           on_progress=opts.on_progress)
        else:
            plans, res = run_async(_run_target(loaded, target, url, model, tdir, on_engine, fail_fast, metrics_url))
    finally:
        if server:
            server.stop()
    tr.interrupted = res.interrupted
    tr.failed_fast = res.failed_fast
    table = read_records(tdir / REQUESTS)
    tr.summary = summarize(table, plans, sc.slo, res.duration, target=target.name, scenario=sc.name,
                           complete=not (res.interrupted or res.failed_fast), notes=res.notes,
                           send_lag_threshold=sc.load.send_lag_threshold, cpu_seconds=res.cpu_seconds,
                           processes=getattr(res, "processes", 1))
    tr.summary["model"] = model
    tr.summary["engine"] = opts.engine
    tr.summary["run_name"] = name  # differs from "target" for the fresh starts of a cold-start study
    write_json(tdir / SUMMARY, tr.summary, secrets)
    # t0_monotonic: perf_counter at t0, which on Linux is CLOCK_MONOTONIC (one clock for every process of the
    # host), so t0_monotonic + a record's time can be set against another program's time.monotonic()
    entry.update(url=url, model=model, server=tr.server, wall_start=res.wall_start, t0_monotonic=res.t0,
                 duration_s=res.duration, requests=res.requests)
    rd.write_meta(meta, secrets)
    return tr


def cold_start_summary(runs: list[TargetRun], meta: dict, root: Path) -> dict:
    """Per target over its fresh starts: time to listen, to ready, first-request latency and TTFT, and
    the warm-up curve (median latency of request 1..N across starts)."""
    groups: dict[str, list[TargetRun]] = {}
    for tr, entry in zip(runs, meta["targets"]):
        groups.setdefault(entry.get("group", tr.name), []).append(tr)
    out = {}
    for group, trs in groups.items():
        curves, first_lat, first_ttft = [], [], []
        for tr in trs:
            if tr.summary is None:
                continue
            df = records_frame(read_records(root / tr.dir / REQUESTS)).sort_values("scheduled")
            lat = np.where(df["ok"], df["latency"], np.inf)
            curves.append(lat)
            if len(df):
                first_lat.append(float(lat[0]))
                first_ttft.append(float(df["ttft"].iloc[0]))
        n = max((len(c) for c in curves), default=0)
        curve = [float(np.median([c[i] for c in curves if len(c) > i])) for i in range(n)]
        out[group] = {
            "starts": len(trs),
            "listen_s": [tr.server.get("listen_s") for tr in trs],
            "ready_s": [tr.server.get("ready_s") for tr in trs],
            "first_latency_s": first_lat,
            "first_ttft_s": first_ttft,
            "warmup_curve_s": curve,
            "steady_latency_s": float(np.median(curve[len(curve) // 2:])) if curve else None,
        }
    return out


def verdict_of(runs: list[TargetRun], interrupted: bool, n_targets: int,
               regression: dict | None = None) -> tuple[int, str, list[str]]:
    """Exit code, one-word verdict and reasons. Invalid runs (3) outrank SLO failures (1)."""
    invalid, failed = [], []
    if regression is not None:
        failed += describe_regressions(regression)
    if interrupted:
        invalid.append("the run was interrupted: its numbers are incomplete")
    for r in runs:
        if r.error:
            invalid.append(f"{r.name}: {r.error}")
            continue
        s = r.summary
        if s is None:
            continue
        ov = s["overall"]
        if ov["count"] and ov["ok"] == 0 and set(ov["errors"]) <= _UNREACHABLE:
            invalid.append(f"{r.name}: target unreachable ({', '.join(sorted(ov['errors']))} on every request)")
        if s["generator_limited"]:
            g = s["generator"]
            lag = g["send_lag_p99"]
            invalid.append(f"{r.name}: generator-limited (send lag p99 {lag * 1e3:.1f} ms > {g['send_lag_threshold'] * 1e3:g} ms"
                           + (", generator CPU saturated" if g["cpu_saturated"] else "") + ")"
                           if lag is not None and not math.isnan(lag) else f"{r.name}: generator-limited")
        if r.failed_fast:
            failed.append(f"{r.name}: stopped early by --fail-fast: {r.failed_fast} can no longer be met")
        for slo in s["slo"]:
            if slo["applies"] and not slo["passed"]:
                failed.append(f"{r.name}: {slo['expr']} (measured {show_value(slo)})")
    if len(runs) < n_targets and not interrupted and not any(r.failed_fast for r in runs):
        invalid.append(f"only {len(runs)} of {n_targets} targets ran")
    if invalid:
        return EXIT_INVALID, "invalid", invalid + failed
    if failed:
        return EXIT_FAILED, "failed", failed
    return EXIT_OK, "passed", []


def install_signal_handlers(get_engine: Callable[[], NativeEngine | None], announce: Callable[[str], None]):
    """SIGINT/SIGTERM: the first stops sending and lets in-flight requests finish; a second aborts."""
    count = [0]

    def handler(signum, frame):
        count[0] += 1
        eng = get_engine()
        if eng is None:
            raise KeyboardInterrupt
        loop = getattr(eng, "_loop", None)
        if count[0] == 1:
            announce("stopping: no new requests; waiting for those in flight (Ctrl-C again to abort)")
            _call(loop, eng.request_stop)
        else:
            announce("aborting: in-flight requests are recorded as cancelled")
            _call(loop, eng.abort)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _call(loop, fn):
    if loop is not None and loop.is_running():
        loop.call_soon_threadsafe(fn)
    else:
        fn()


def gate_rundir(path: str, baseline: str | None = None, max_regression: float = 0.10) -> tuple[int, str, list[str]]:
    """The verdict of an existing RunDir (its SLOs as recorded), optionally against a baseline."""
    rd = RunDir(path)
    meta = rd.meta()
    runs = []
    for t in meta.get("targets", []):
        f = rd.path / t["dir"] / SUMMARY
        tr = TargetRun(t["name"], t["dir"], t.get("url", ""))
        if f.is_file():
            tr.summary = json.loads(f.read_text())
            if any("--fail-fast" in n for n in tr.summary.get("notes", [])):
                tr.failed_fast = next(n for n in tr.summary["notes"] if "--fail-fast" in n)
        else:
            tr.error = "no summary.json: the run did not finish this target"
        runs.append(tr)
    interrupted = not meta.get("complete", False) and not any(r.failed_fast for r in runs)
    regression = None
    if baseline is not None:
        if not (Path(baseline) / META).is_file():
            raise ValueError(f"--baseline {baseline}: not a RunDir (no {META})")
        regression = compare_runs(rd, RunDir(baseline), max_regression)
        write_json(rd.path / REGRESSION, regression)
    return verdict_of(runs, interrupted, len(runs), regression)


def run_capacity(loaded: LoadedScenario, slos, qps_min: float, qps_max: float, step_duration: float, warmup: float,
                 tolerance: float = 0.1, out: str | None = None, target_url: str | None = None,
                 on_engine=None, on_step=None) -> tuple[RunDir, dict]:
    """Start the scenario's (first) target once, search its capacity step by step, write the RunDir."""
    from loadgen.capacity import CAPACITY, find_capacity, run_step_with

    sc = loaded.scenario
    target = sc.target_list()[0]
    if target_url:
        target = target.model_copy(update={"url": target_url, "reference": None, "command": None})
    rd = RunDir.create(out, f"capacity_{sc.name}")
    rd.write_scenario(loaded.redacted())
    rd.write_metric_definitions()
    meta = {"latbench_version": __version__, "engine": "native", "kind": "capacity", "host": socket.gethostname(),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "scenario": sc.name, "targets": [], "complete": False}
    rd.write_meta(meta, loaded.secrets)
    server = None
    if target.reference is not None:
        server = start_reference(target.reference)
    elif target.command is not None:
        server = start_command(target.command)
    try:
        url = server.url if server else target.url
        model = _resolve_model(target, url, server)
        run_step = run_step_with(target, url, model, on_engine)

        def step_done(st) -> None:
            meta["targets"].append({"name": st.dir, "dir": st.dir, "url": url, "model": model, "qps": st.qps,
                                    "server": dict(server.config) if server else {}})
            rd.write_meta(meta, loaded.secrets)
            if on_step:
                on_step(st)

        result = find_capacity(loaded, run_step, rd, slos, qps_min, qps_max, step_duration, warmup, tolerance,
                               on_step=step_done)
    finally:
        if server:
            server.stop()
    result["target"] = {"name": target.name, "url": url, "model": model, "server": dict(server.config) if server else {}}
    write_json(rd.path / CAPACITY, result, loaded.secrets)
    meta.update(complete=result["complete"], capacity=result["bracket"])
    rd.write_meta(meta, loaded.secrets)
    return rd, result
