"""Targets latbench starts itself: the bundled reference server, or any command with a readiness URL.

The reference server is a separate program (``python -m reference_server``); latbench starts it on a
free 127.0.0.1 port, reads the ``LATBENCH_SERVER_URL=`` and ``LATBENCH_SERVER_CONFIG=`` lines it
prints, waits for ``/health``, and stops it with SIGTERM, then SIGKILL after a grace period.

Everything a managed server prints goes to its :class:`ServerLog` (``<target>/server.log`` in the RunDir,
redacted, bounded), from its first line: a server that does not start keeps its log too. While a run goes,
:meth:`ManagedServer.watch` waits on the process: a server that exits before latbench stops it is reported at
once (:class:`ServerExit`), so the run stops sending to a dead process and says why.

Each managed server runs in a process group of its own, tied to latbench by a lifeline
(:mod:`loadgen.engine.lifeline`): when latbench ends, however (SIGKILL included), the whole group ends too
(a command's forked children, such as vLLM's engine process, included). Stopping a server ends its group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loadgen.engine.lifeline import Lifeline, kill_group
from loadgen.errors import TargetStartError
from loadgen.fetch import FetchError, fetch
from loadgen.run.reset import DEV_MODE_ENV
from loadgen.scenario.model import CommandTarget, ReferenceTarget, Target

STOP_GRACE_S = 5.0
MAX_LOG_LINE = 8192  # characters of one line a managed server prints, at most (the rest makes further lines)
MAX_LOG_BYTES = 8 << 20  # of server.log, at most: past it, lines are counted, not written
KEEP_LINES = 200  # the last lines kept in memory, for messages


class ServerLog:
    """What a managed server prints: every line through ``redact`` into ``path`` (when given; at most
    :data:`MAX_LOG_BYTES`), and the last :data:`KEEP_LINES` in :attr:`lines`. Thread-safe: stdout and stderr are
    drained by a thread each."""

    def __init__(self, path: Path | None = None, redact: Callable[[str], str] = str):
        self.path, self.redact = path, redact
        self.lines: list[str] = []
        self.written = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._file = None
        if path is not None:
            try:
                self._file = open(path, "w", encoding="utf-8", errors="replace")
            except OSError:
                self._file = None

    def add(self, line: str, stream: str = "") -> None:
        text = self.redact(line.rstrip("\r\n"))
        with self._lock:
            self.lines.append(text)
            del self.lines[:-KEEP_LINES]
            if self._file is None:
                return
            out = (f"[{stream}] " if stream else "") + text + "\n"
            if self.written + len(out) > MAX_LOG_BYTES:
                if not self.dropped:
                    self._file.write(f"[latbench] server.log reached {MAX_LOG_BYTES >> 20} MiB: further lines "
                                     "are not written\n")
                self.dropped += 1
            else:
                self._file.write(out)
                self.written += len(out)
            self._file.flush()

    def tail(self, n: int = 10) -> list[str]:
        with self._lock:
            return self.lines[-n:]

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                if self.dropped:
                    self._file.write(f"[latbench] {self.dropped} further lines were not written\n")
                self._file.close()
                self._file = None


@dataclass(frozen=True)
class ServerExit:
    """A managed server that exited before latbench stopped it: its exit code (negative: the signal that
    ended it) and when, on ``perf_counter``."""

    what: str  # "reference server", "command 'vllm'"
    code: int
    at: float

    @property
    def how(self) -> str:
        if self.code < 0:
            try:
                name = signal.Signals(-self.code).name
            except ValueError:
                name = f"signal {-self.code}"
            return f"signal {-self.code}, {name}"
        return f"exit code {self.code}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reference_argv(ref: ReferenceTarget, port: int = 0) -> list[str]:
    """The command line that starts the reference server for a scenario's ``reference:`` block."""
    argv = [sys.executable, "-m", "reference_server", "--host", "127.0.0.1", "--port", str(port),
            "--arch", ref.arch, "--model", ref.model, "--backend", ref.backend]
    for key, value in ref.options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv


#: APIs whose paths start at the server's root (/v2/...), not under /v1.
ROOT_APIS = ("kserve-v2", "triton-generate")


@dataclass
class ManagedServer:
    proc: subprocess.Popen
    url: str  # base URL of the API, e.g. http://127.0.0.1:41234/v1
    root: str  # scheme://host:port
    config: dict = field(default_factory=dict)
    listen_s: float = float("nan")  # start -> the port accepts connections
    ready_s: float = float("nan")  # start -> /health answers 200
    log: ServerLog = field(default_factory=ServerLog)
    lifeline: Lifeline | None = None  # cut when latbench ends, however: the server's process group ends then
    what: str = "server"
    exited: ServerExit | None = None  # set when it exited before stop() was called
    _stopping: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def watch(self, on_exit: Callable[[ServerExit], None]) -> None:
        """Call ``on_exit`` (in a thread of its own) as soon as the process exits, unless stop() ended it."""
        def wait() -> None:
            code = self.proc.wait()
            if not self._stopping:
                self.exited = ServerExit(self.what, code, time.perf_counter())
                on_exit(self.exited)

        threading.Thread(target=wait, name=f"latbench-watch-{self.proc.pid}", daemon=True).start()

    def url_for(self, api: str, transport: str = "auto") -> str:
        """The base URL for ``api``: the OpenAI-style APIs under ``/v1``; KServe v2 and Triton at the root, or
        for ``transport: grpc`` the gRPC address the reference server announced (``grpc://host:port``)."""
        if api not in ROOT_APIS:
            return self.url
        if transport == "grpc":
            port = self.config.get("grpc_port")
            if not port:
                raise TargetStartError("transport: grpc, but the server serves no gRPC (reference: options: "
                                       "{grpc_port: 0} starts it on a free port)")
            return "grpc://" + self.root.split("://", 1)[1].rsplit(":", 1)[0] + f":{port}"
        return self.root

    def stop(self) -> int | None:
        """SIGTERM, then, after a grace period, SIGKILL to whatever is left of the server's process group (a
        command's forked children too). Returns the exit code."""
        pgid = self.proc.pid  # started in a session of its own: its pid is its group's id
        self._stopping = self.exited is None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        if self.lifeline is not None:
            self.lifeline.cut()
        kill_group(pgid)
        self.proc.wait()
        return self.proc.returncode


def _drain(stream, sink: ServerLog, name: str = "") -> None:
    try:
        for line in iter(lambda: stream.readline(MAX_LOG_LINE), ""):
            sink.add(line, name)
    except (OSError, ValueError):  # the pipe closed under us at the end
        pass


def _wait_health(url: str, deadline: float, proc: subprocess.Popen, what: str, log: ServerLog | None = None) -> None:
    while True:
        if proc.poll() is not None:
            time.sleep(0.1)  # its last words, read by the log's thread
            said = "".join(f"\n  {line}" for line in (log.tail() if log else []))
            raise TargetStartError(f"{what} exited with code {proc.returncode} before it was ready" + said)
        try:
            if fetch("GET", url, deadline_s=2.0, max_redirects=0).status == 200:
                return
        except FetchError:
            pass
        if time.perf_counter() > deadline:
            raise TargetStartError(f"{what} was not ready at {url} within the start-up timeout")
        time.sleep(0.05)


def start_reference(ref: ReferenceTarget, env: dict | None = None, log: ServerLog | None = None) -> ManagedServer:
    """Start the reference server and wait until /health says ready; what it prints goes to ``log``."""
    t_start = time.perf_counter()
    log = log if log is not None else ServerLog()
    lifeline = Lifeline()
    proc = subprocess.Popen(reference_argv(ref) + ["--parent-fd", str(lifeline.child_fd)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, pass_fds=lifeline.pass_fds,
                            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    lifeline.started()
    threading.Thread(target=_drain, args=(proc.stderr, log, "stderr"), daemon=True).start()
    deadline = t_start + ref.startup_timeout
    root, config = None, {}
    try:
        while root is None or not config:
            line = proc.stdout.readline(MAX_LOG_LINE)
            if not line:
                time.sleep(0.1)  # its last words, read by the log's thread
                raise TargetStartError("the reference server exited before it listened:\n" + "\n".join(log.tail(20)))
            log.add(line, "stdout")
            if line.startswith("LATBENCH_SERVER_URL="):
                root = line.split("=", 1)[1].strip()
                listen = time.perf_counter() - t_start
            elif line.startswith("LATBENCH_SERVER_CONFIG="):
                config = json.loads(line.split("=", 1)[1])
            if time.perf_counter() > deadline:
                raise TargetStartError("the reference server did not print its URL in time")
        threading.Thread(target=_drain, args=(proc.stdout, log, "stdout"), daemon=True).start()
        _wait_health(root + "/health", deadline, proc, "the reference server", log)
    except BaseException:
        ManagedServer(proc, "", "", lifeline=lifeline).stop()
        raise
    return ManagedServer(proc, root + "/v1", root, config, listen, time.perf_counter() - t_start, log, lifeline,
                         "reference server")


def start_command(cmd: CommandTarget, log: ServerLog | None = None, env: dict[str, str] | None = None) -> ManagedServer:
    """Start any server command ('{port}' replaced by a free port) and wait for its readiness URL; what it prints
    goes to ``log``; ``env``: set in its environment besides latbench's own."""
    log = log if log is not None else ServerLog()
    port = str(free_port())
    sub = lambda s: s.replace("{port}", port)  # noqa: E731
    t_start = time.perf_counter()
    argv = [sub(a) for a in cmd.run]
    if shutil.which(argv[0]) is None:
        raise TargetStartError(f"cannot start {cmd.run[0]!r}: no such program")
    lifeline = Lifeline()  # the command runs under a watchdog: it and its children end with latbench
    proc = subprocess.Popen(lifeline.wrap(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            pass_fds=lifeline.pass_fds, start_new_session=True,
                            env={**os.environ, **env} if env else None)
    lifeline.started()
    threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True).start()
    url = sub(cmd.url)
    try:
        _wait_health(sub(cmd.ready_url), t_start + cmd.startup_timeout, proc, f"command {cmd.run[0]!r}", log)
    except BaseException:
        ManagedServer(proc, "", "", lifeline=lifeline).stop()
        raise
    ready = time.perf_counter() - t_start
    # the port goes into the config so that the target's metrics_url may name '{port}' too
    return ManagedServer(proc, url.rstrip("/"), url, {"command": cmd.run, "port": int(port)}, float("nan"), ready,
                         log, lifeline, f"command {cmd.run[0]!r}")


def start_managed(target: Target, log: ServerLog | None = None) -> ManagedServer | None:
    """Start the target when latbench manages it (``reference:`` or ``command:``); None for a plain URL. What it
    prints goes to ``log``."""
    if target.reference is not None:
        ref = target.reference
        if target.transport == "grpc" and "grpc_port" not in ref.options:  # KServe v2 over gRPC: serve it
            ref = ref.model_copy(update={"options": {**ref.options, "grpc_port": 0}})
        return start_reference(ref, log=log)
    if target.command is not None:  # a reset asked: vLLM serves /reset_prefix_cache only in its dev mode
        return start_command(target.command, log, DEV_MODE_ENV if target.reset is not None else None)
    return None
