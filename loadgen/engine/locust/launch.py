"""The caller's side of the Locust engine: start the master process, relay its progress, read its result.

Nothing here imports locust or gevent: the master and the workers are separate processes (locust
monkey-patches the standard library through gevent, which must never happen to the process that
runs the native engine or the CLI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loadgen.engine.base import EngineResult, MeasuredTarget, OnEngine
from loadgen.engine.lifeline import Lifeline, kill_group
from loadgen.engine.locust.auth import SECRET_ENV, SECRET_FILE_ENV, new_secret, read_secret
from loadgen.errors import UsageError
from loadgen.records.rundir import REQUESTS
from loadgen.records.schema import RecordWriter, records_exist
from loadgen.records.workers import LostWorker

_ROOT = Path(__file__).resolve().parents[3]  # the folder holding the loadgen package


@dataclass
class LocustResult(EngineResult):
    """An :class:`EngineResult` with what a distributed run adds.

    ``cpu_seconds`` is the sum over workers and ``processes`` how many there were. ``workers``: one dict
    per worker with ``k``, ``label``, ``host``, ``pid``, ``records`` (received by the master) and ``state``
    (``done`` | ``dead`` | ``unfinished``).
    """

    workers: list[dict] = field(default_factory=list)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


#: How the master learns the target's URL: through its environment, not its command line, which every user of
#: the machine can read (``ps``) and which may hold a password or a key.
URL_ENV = "LATBENCH_TARGET_URL"


def master_argv(scenario_path: Path, target_index: int, model: str, tdir: Path, workers: int,
                expect_workers: int | None, master_bind: str, connect_timeout: float) -> list[str]:
    """The master's command line (the URL goes in its environment, as :data:`URL_ENV`)."""
    return [sys.executable, "-m", "loadgen.engine.locust.master", "--scenario", str(scenario_path),
            "--target-index", str(target_index), "--model", model or "", "--out", str(tdir),
            "--workers", str(workers), "--expect-workers", str(expect_workers or 0), "--bind", master_bind,
            "--connect-timeout", str(connect_timeout)]


def worker_secret(expect_workers: int | None) -> str:
    """The secret this run's workers must prove they know: the user's (:func:`~loadgen.engine.locust.auth.
    read_secret`), else, with only local workers, a fresh one. Workers from other hosts need the user's: a
    UsageError says how to give it."""
    secret = read_secret()
    if secret is None and expect_workers:
        raise UsageError(f"--expect-workers: workers from other hosts must prove they know the run's secret: set "
                         f"{SECRET_ENV} (or {SECRET_FILE_ENV}, a file holding it) for latbench run and for each "
                         "latbench worker (which also takes --secret-file)")
    return secret or new_secret()


def run_target_locust(scenario_path: Path, target_index: int, url: str, model: str, tdir: Path, workers: int = 1,
                      expect_workers: int | None = None, master_bind: str = "127.0.0.1",
                      on_progress: Callable[[dict], None] | None = None, connect_timeout: float = 60.0,
                      on_master: Callable[[dict], None] | None = None,
                      secret: str | None = None) -> LocustResult:
    """Run one target of a scenario on Locust's master/worker runners; records go to ``tdir/requests.parquet``.

    The caller summarizes from ``requests.parquet`` as for the native engine. ``workers`` local worker processes
    are started; ``expect_workers`` more are awaited from other hosts (``latbench worker --master
    HOST:PORT``) for up to ``connect_timeout`` seconds. ``master_bind`` is ``HOST[:PORT]``; without a port,
    5557 when remote workers are expected, else a free port.

    ``on_progress(dict)`` about once a second: ``t`` (run seconds), ``records`` (written), ``sent``,
    ``in_flight``, ``errors``, ``workers`` (alive) and ``of``. ``on_master(dict)`` once the master is
    bound: ``host``, ``port``.

    ``secret``: what every worker must prove it knows before the master sends it anything (default
    :func:`worker_secret`); it reaches the master and its local workers through their environment only.

    Interruption: a KeyboardInterrupt while waiting stops sending (in-flight requests get the grace
    period); a second aborts them. Either way the records taken are kept and ``interrupted`` is True.
    A worker that dies mid-run, or a local one during start-up (found within a second: the run does not
    start), also makes ``interrupted`` True, with a note and a ``lost_workers`` entry naming it. A master
    that fails returns ``interrupted`` with a note (never raises for it).
    """
    secret = secret or worker_secret(expect_workers)
    tdir = Path(tdir)
    tdir.mkdir(parents=True, exist_ok=True)
    argv = master_argv(scenario_path, target_index, model, tdir, workers, expect_workers, master_bind,
                       connect_timeout)
    started_wall, started = time.time(), time.perf_counter()
    # A session of its own (a terminal's Ctrl-C reaches us, and we decide), under a lifeline: the master and its
    # local workers end with this process, however it ends (loadgen.engine.lifeline).
    lifeline = Lifeline()
    proc = subprocess.Popen(lifeline.wrap(argv), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**child_env(), URL_ENV: url, SECRET_ENV: secret},
                            pass_fds=lifeline.pass_fds,
                            start_new_session=True)
    lifeline.started()
    # what Locust logs (the master's and its local workers') is printed by this process, through its redaction
    threading.Thread(target=_relay, args=(proc.stderr,), name="latbench-locust-stderr", daemon=True).start()
    result = None
    interrupts = 0
    while True:
        try:
            line = proc.stdout.readline()
            if not line:
                break
            kind, _, data = line.partition(" ")
            if kind == "LATBENCH_PROGRESS" and on_progress:
                on_progress(json.loads(data))
            elif kind == "LATBENCH_MASTER" and on_master:
                on_master(json.loads(data))
            elif kind == "LATBENCH_RESULT":
                result = json.loads(data)
        except KeyboardInterrupt:
            interrupts += 1
            if interrupts <= 2:
                proc.send_signal(signal.SIGTERM)  # forwarded to the master: stop, then abort
            else:
                lifeline.cut()  # the whole group, at once
    rc = proc.wait()
    lifeline.cut()  # a worker the master left behind ends now
    kill_group(proc.pid)
    if result is None:
        _ensure_records(tdir)
        return LocustResult(t0=started, wall_start=started_wall, duration=time.perf_counter() - started,
                                   requests=0, interrupted=True, cpu_seconds=0.0,
                                   notes=[f"the Locust master exited with code {rc} before reporting; "
                                          "records it had written are kept"])
    return LocustResult(t0=result["t0"], wall_start=result["wall_start"], duration=result["duration"],
                               requests=result["requests"], interrupted=result["interrupted"] or interrupts > 0,
                               cpu_seconds=result["cpu_seconds"], notes=result["notes"],
                               processes=result["processes"], workers=result["workers"],
                               lost_workers=[LostWorker.from_json(w) for w in result["lost_workers"]])


def _relay(stream) -> None:
    """Copy a child's stderr to ours, line by line (ours may be the CLI's redacting stream)."""
    for line in iter(stream.readline, ""):
        sys.stderr.write(line)


def _ensure_records(tdir: Path) -> None:
    """A master that died before opening the writer leaves no file; the runner expects one."""
    path = tdir / REQUESTS
    if not records_exist(path):
        RecordWriter(path).close()


class LocustEngine:
    """The :class:`~loadgen.engine.base.Engine` on Locust's master/worker runners (``--engine locust``).

    ``on_engine`` and ``fail_fast`` are not available here: the master process owns the run; progress
    arrives through ``on_progress`` about once a second.
    """

    name = "locust"

    def __init__(self, workers: int = 1, expect_workers: int | None = None, master_bind: str = "127.0.0.1",
                 on_progress: Callable[[dict], None] | None = None, secret: str | None = None):
        self.workers, self.expect_workers = workers, expect_workers
        self.master_bind, self.on_progress = master_bind, on_progress
        self.secret = secret  # None: worker_secret(), when the run starts

    def run(self, mt: MeasuredTarget, on_engine: OnEngine | None = None,
            fail_fast: float | None = None) -> LocustResult:
        if mt.loaded.scenario.workload.cancel is not None:
            raise UsageError("workload.cancel (client-side aborts) is not available with --engine locust: "
                             "use the native engine")
        secret = self.secret or worker_secret(self.expect_workers)
        mt.loaded.redactor.add(secret)  # never written nor printed, even if some message quoted it
        return run_target_locust(mt.loaded.path, mt.index, mt.url, mt.model, mt.tdir, workers=self.workers,
                                 expect_workers=self.expect_workers, master_bind=self.master_bind,
                                 on_progress=self.on_progress, secret=secret)
