"""Targets latbench starts itself: the bundled reference server, or any command with a readiness URL.

The reference server is a separate program (``python -m reference_server``); latbench starts it on a
free 127.0.0.1 port, reads the ``LATBENCH_SERVER_URL=`` and ``LATBENCH_SERVER_CONFIG=`` lines it
prints, waits for ``/health``, and stops it with SIGTERM, then SIGKILL after a grace period.

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
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from loadgen.engine.lifeline import Lifeline, kill_group
from loadgen.errors import TargetStartError
from loadgen.scenario.model import CommandTarget, ReferenceTarget, Target

STOP_GRACE_S = 5.0
MAX_LOG_LINE = 8192  # characters of one line a managed server prints, at most (the rest makes further lines)


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
    log: list[str] = field(default_factory=list)
    lifeline: Lifeline | None = None  # cut when latbench ends, however: the server's process group ends then

    def alive(self) -> bool:
        return self.proc.poll() is None

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


def _drain(stream, sink: list[str], limit: int = 200) -> None:
    for line in iter(lambda: stream.readline(MAX_LOG_LINE), ""):
        sink.append(line.rstrip())
        del sink[:-limit]


def _wait_health(url: str, deadline: float, proc: subprocess.Popen, what: str, log: list[str] | None = None) -> None:
    while True:
        if proc.poll() is not None:
            time.sleep(0.1)  # its last words, read by the log's thread
            said = "".join(f"\n  {line}" for line in (log or [])[-10:])
            raise TargetStartError(f"{what} exited with code {proc.returncode} before it was ready" + said)
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.perf_counter() > deadline:
            raise TargetStartError(f"{what} was not ready at {url} within the start-up timeout")
        time.sleep(0.05)


def start_reference(ref: ReferenceTarget, env: dict | None = None) -> ManagedServer:
    """Start the reference server and wait until /health says ready."""
    t_start = time.perf_counter()
    lifeline = Lifeline()
    proc = subprocess.Popen(reference_argv(ref) + ["--parent-fd", str(lifeline.child_fd)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, pass_fds=lifeline.pass_fds,
                            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    lifeline.started()
    log: list[str] = []
    threading.Thread(target=_drain, args=(proc.stderr, log), daemon=True).start()
    deadline = t_start + ref.startup_timeout
    root, config = None, {}
    try:
        while root is None or not config:
            line = proc.stdout.readline(MAX_LOG_LINE)
            if not line:
                raise TargetStartError("the reference server exited before it listened:\n" + "\n".join(log[-20:]))
            if line.startswith("LATBENCH_SERVER_URL="):
                root = line.split("=", 1)[1].strip()
                listen = time.perf_counter() - t_start
            elif line.startswith("LATBENCH_SERVER_CONFIG="):
                config = json.loads(line.split("=", 1)[1])
            if time.perf_counter() > deadline:
                raise TargetStartError("the reference server did not print its URL in time")
        threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True).start()
        _wait_health(root + "/health", deadline, proc, "the reference server")
    except BaseException:
        ManagedServer(proc, "", "", lifeline=lifeline).stop()
        raise
    return ManagedServer(proc, root + "/v1", root, config, listen, time.perf_counter() - t_start, log, lifeline)


def start_command(cmd: CommandTarget) -> ManagedServer:
    """Start any server command ('{port}' replaced by a free port) and wait for its readiness URL."""
    port = str(free_port())
    sub = lambda s: s.replace("{port}", port)  # noqa: E731
    t_start = time.perf_counter()
    argv = [sub(a) for a in cmd.run]
    if shutil.which(argv[0]) is None:
        raise TargetStartError(f"cannot start {cmd.run[0]!r}: no such program")
    lifeline = Lifeline()  # the command runs under a watchdog: it and its children end with latbench
    proc = subprocess.Popen(lifeline.wrap(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            pass_fds=lifeline.pass_fds, start_new_session=True)
    lifeline.started()
    log: list[str] = []
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
                         log, lifeline)


def start_managed(target: Target) -> ManagedServer | None:
    """Start the target when latbench manages it (``reference:`` or ``command:``); None for a plain URL."""
    if target.reference is not None:
        ref = target.reference
        if target.transport == "grpc" and "grpc_port" not in ref.options:  # KServe v2 over gRPC: serve it
            ref = ref.model_copy(update={"options": {**ref.options, "grpc_port": 0}})
        return start_reference(ref)
    if target.command is not None:
        return start_command(target.command)
    return None
