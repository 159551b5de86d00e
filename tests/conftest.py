import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from loadgen.records.rundir import STRICT_RESULTS_ENV
from loadgen.scenario.sample_data import train_sample_tokenizer

ROOT = Path(__file__).resolve().parent.parent
# Every result file that the suite writes, in this process, an xdist worker or a `latbench` subprocess (they
# inherit the environment), is validated into its model at the write, and one that its model refuses fails the
# test that wrote it: every RunDir the suite writes matches the schemas generated from the models.
os.environ[STRICT_RESULTS_ENV] = "1"


class ServerProcess:
    """A tests.servers.KnownServer in a subprocess, on 127.0.0.1 and a free port."""

    def __init__(self, module: str = "tests.servers", **kw):
        argv = [sys.executable, "-m", module]
        for k, v in kw.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT="), line
        self.port = int(line.split("=")[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def known_server():
    started = []

    def start(**kw):
        s = ServerProcess(**kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def api_server():
    """tests.api_servers.ApiServer (Anthropic, Responses, rerank, KServe v2, Triton) in a subprocess."""
    started = []

    def start(**kw):
        s = ServerProcess("tests.api_servers", **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(autouse=True)
def _weights_cache(tmp_path_factory, monkeypatch):
    """Reference-server weights go to one temp folder per test session, never to the home folder."""
    cache = tmp_path_factory.getbasetemp() / "weights-cache"
    monkeypatch.setenv("LATBENCH_CACHE_DIR", str(cache))


@pytest.fixture(scope="session")
def weights_dir(tmp_path_factory):
    """The reference server's weights folder of this test session (the one _weights_cache points it to)."""
    return str(tmp_path_factory.getbasetemp() / "weights-cache")


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory):
    """A model folder with a small byte-level BPE tokenizer trained offline (BOS on plain prompts, a chat
    template with header tokens), shared by the session: see loadgen.scenario.sample_data.train_sample_tokenizer."""
    return train_sample_tokenizer(tmp_path_factory.mktemp("bpe"))


# --- two tests at a time (pytest-xdist, `-n 2` in pyproject.toml), timing-sensitive ones alone ------------------
#
# Most tests wait on servers and runs far more than they compute, so two workers nearly halve the suite. A test
# marked `alone` asserts timing the other worker's CPU could disturb (send lag, a known server's latency, two runs
# compared): it holds an exclusive lock that every other test holds shared while it runs. A module marked
# `alone` (pytestmark) holds it from its first fixture to its last, since its module-scoped fixtures do the runs.
# The gate lock keeps an `alone` test from waiting forever: once it holds the gate, no new test starts.

_held: list[int] = []  # the exclusive lock's descriptors while a module of this process holds it


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: timing-sensitive; runs while no other test of the session runs")
    config.addinivalue_line("markers", "contends: contends its host on purpose; its failures are never excused as "
                                       "the host's")


def _lock(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, mode)
    return fd


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _base() -> Path | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # set in each worker of a distributed session
    return None if run is None else Path(tempfile.gettempdir()) / f"latbench-tests-{run}"


def _exclusive(base: Path) -> list[int]:
    gate = _lock(base.with_suffix(".gate"), fcntl.LOCK_EX)
    return [gate, _lock(base.with_suffix(".main"), fcntl.LOCK_EX)]


@pytest.fixture(scope="module", autouse=True)
def _module_turn(request):
    base = _base()
    if base is None or request.node.get_closest_marker("alone") is None:
        yield
        return
    _held.extend(_exclusive(base))
    try:
        yield
    finally:
        while _held:
            _unlock(_held.pop())


@pytest.fixture(autouse=True)
def _cpu_turn(request):
    base = _base()
    if base is None or _held:  # not distributed, or this test's module already runs alone
        yield
        return
    if request.node.get_closest_marker("alone") is not None:
        fds = _exclusive(base)
    else:
        gate = _lock(base.with_suffix(".gate"), fcntl.LOCK_SH)
        fds = [_lock(base.with_suffix(".main"), fcntl.LOCK_SH)]
        _unlock(gate)
    try:
        yield
    finally:
        for fd in reversed(fds):
            _unlock(fd)


# --- a run that says it measured the host, not the service --------------------------------------------------
#
# A test that asserts what a run measured needs a host that lets the run measure it. When the run itself says it
# could not (its verdict is invalid because the host was contended or the generator could not keep up), a failed
# assertion of that test says nothing about latbench: the test is reported as skipped with the run's own reason.
# Nothing else is turned into a skip, and no assertion is loosened; on a quiet host no test skips this way.

HOST_KINDS = ("host_contended", "generator_limited")
_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_STARTED] = time.time()


def _host_reasons(item) -> list[str]:
    """The host/generator reasons of the RunDirs written while ``item`` ran (under this session's temp folder)."""
    started = item.stash.get(_STARTED, None)
    factory = getattr(item.config, "_tmp_path_factory", None)
    if started is None or factory is None:
        return []
    out = []
    for meta in factory.getbasetemp().rglob("meta.json"):
        try:
            if meta.stat().st_mtime < started:
                continue
            verdict = json.loads(meta.read_text()).get("verdict") or {}
        except (OSError, ValueError):
            continue
        out += [r["text"] for r in verdict.get("reasons", []) if r.get("kind") in HOST_KINDS]
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or item.get_closest_marker("contends"):
        return
    reasons = _host_reasons(item)
    if reasons:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: the run measured its host, not the service: {reasons[0]}")
