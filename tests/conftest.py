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
# compared): it holds an exclusive lock that every other test holds shared while it runs. The lock is taken around
# a test's whole protocol (pytest_runtest_protocol below): its setup, the module and session fixtures set up for it
# included (a module fixture that does the runs, as in test_faults.py or an `alone` module, runs under it), its
# call and its teardown. A worker keeps the exclusive lock from one `alone` test to the next one it runs, so a
# module marked `alone` (pytestmark) holds it from its first fixture to its last. The gate lock keeps an `alone`
# test from waiting forever: once it holds the gate, no new test starts.
#
# The schedule (pytest_xdist_make_scheduler below): time spent alone is time the suite runs on one worker, and so is
# every wait of an `alone` test for the other worker's test to end. So the `alone` tests are one unit of work that
# one worker runs back to back, holding the lock throughout, and it comes last, after the short tests. The tests of
# a module that share a module-scoped fixture are one unit (its fixture runs once, on one worker); every other test
# is a unit of its own. The longest units (SLOW) start first, so that no long test starts when the other worker is
# about to run out of work. Each worker collects the tests, orders them and names their units
# (pytest_collection_modifyitems below) and writes the units to a file the scheduler reads: xdist's own
# `--dist loadgroup` cannot carry them (pytest 9.2's node ids cannot be renamed: pytest-xdist issue 1386).

_held: list[int] = []  # the exclusive lock's descriptors while this worker runs `alone` tests

#: The longest tests and modules, longest first (node id prefixes; wall seconds with -n 0 on a quiet machine, about):
#: they start first. A name here that no longer matches anything only loses its place.
SLOW = (
    "tests/integration/test_report_browser.py",  # ~100 s: one run of every bundled scenario, then Chromium
    "tests/integration/test_vllm_reset.py",  # ~100 s where the vLLM peer venv is set up (its start), else skipped
    "tests/integration/test_repeats.py::test_cli_repeat_flags",  # ~30 s
    "tests/integration/test_repeats.py::test_a_repeated_run_interleaves",  # ~20 s
    "tests/integration/test_faults.py",  # ~20 s: its module fixture's run
    "tests/integration/test_prefix_cache.py",  # ~15 s
    "tests/integration/test_monitor.py::test_a_real_prometheus",  # ~14 s
    "tests/integration/test_reference_server.py",  # ~20 s over its tests
    "tests/integration/test_locust.py::test_a_worker_joining",  # ~10 s
    "tests/integration/test_locust.py::test_a_worker_killed",  # ~10 s
    "tests/integration/test_scenarios.py::test_dataset_replays",  # ~10 s
    "tests/docs/test_guides.py",  # ~20 s over its tests
    "tests/integration/test_secrets.py",  # ~30 s over its tests
)
ALONE_UNIT = "alone"


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: timing-sensitive; runs while no other test of the session runs")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and nvidia-ml-py; skips where there is none")
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


def _alone(item) -> bool:
    return item.get_closest_marker("alone") is not None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: a wait for the lock is outside pytest-timeout's
def pytest_runtest_protocol(item, nextitem):
    base = _base()
    if base is None:  # not distributed
        yield
        return
    if _alone(item):
        if not _held:
            _held.extend(_exclusive(base))
        try:
            yield
        finally:
            if nextitem is None or not _alone(nextitem):
                while _held:
                    _unlock(_held.pop())
        return
    gate = _lock(base.with_suffix(".gate"), fcntl.LOCK_SH)
    fd = _lock(base.with_suffix(".main"), fcntl.LOCK_SH)
    _unlock(gate)
    try:
        yield
    finally:
        _unlock(fd)


def _shares_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope in ("module", "class", "package")
                                    for defs in info.name2fixturedefs.values() for d in defs)


def _units_file(testrunuid: str) -> Path:
    return Path(tempfile.gettempdir()) / f"latbench-tests-{testrunuid}.units.json"


def _unit(item) -> str:
    if _alone(item):
        return ALONE_UNIT
    if _shares_a_module_fixture(item):
        return item.nodeid.split("::")[0]
    return item.nodeid


def _rank(unit: str) -> tuple[int, int]:
    if unit == ALONE_UNIT:
        return (2, 0)
    first = next((i for i, prefix in enumerate(SLOW) if unit.startswith(prefix)), None)
    return (0, first) if first is not None else (1, 0)


def pytest_collection_modifyitems(config, items):
    """In each worker of a distributed session: the order and the units described above (the same in every worker:
    the scheduler checks that they collected the same tests in the same order)."""
    worker, testrunuid = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if worker is None or testrunuid is None:
        return
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_unit(item), []).append(item)
    items[:] = [item for unit in sorted(units, key=_rank) for item in units[unit]]  # stable: else as collected
    path = _units_file(testrunuid)
    tmp = path.with_name(f"{path.name}.{worker}")
    tmp.write_text(json.dumps({item.nodeid: unit for unit, its in units.items() for item in its}))
    os.replace(tmp, path)  # both workers write the same


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n 2` (dist "load"): whole units, in the order the workers collected them (above). Any other --dist is
    xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        _units: dict[str, str] | None = None

        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # the collection's order (xdist >= 3.8 reads it)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:  # first called once every worker has collected, and so written the file
                path = _units_file(self.nodes[0].workerinput["testrunuid"])
                self._units = json.loads(path.read_text()) if path.is_file() else {}
                path.unlink(missing_ok=True)
            return self._units.get(nodeid) or super()._split_scope(nodeid)

    return UnitScheduling(config, log)


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
