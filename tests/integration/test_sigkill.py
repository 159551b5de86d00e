"""``kill -KILL`` of a running ``latbench run``: no process it started survives it (issue 13, item 7).

The reference server was started with ``start_new_session=True`` and lived on after latbench was killed
(PPID 1, 190 MB, holding its port). Each case runs latbench as a real subprocess, waits until the processes
it starts are up (the reference server; a ``command:`` target that forks a child of its own, as vLLM forks
its engine; the Locust master and its worker; the multi-process engine's children), sends SIGKILL to
latbench alone, and checks that every one of its descendants is gone within a few seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadgen.records.schema import read_records
from tests.helpers import write_scenario

ROOT = Path(__file__).resolve().parents[2]
LATBENCH = [sys.executable, "-m", "loadgen.cli"]

LOAD = """
load:
  arrival: constant
  phases: [{name: main, duration: 60s, qps: 5}]
"""
#: a server that forks a child of its own and serves through it (the shape of vLLM: an API process and an engine)
FORKING = ("import subprocess, sys; "
           "child = subprocess.Popen([sys.executable, '-m', 'tests.bad_servers', '--mode', 'ok', "
           "'--port', sys.argv[1]]); sys.exit(child.wait())")

CASES = {
    "reference": ("target: {reference: {arch: naive, model: tiny, backend: numpy}, stream: false}", [],
                  "reference_server"),
    "command": ('target: {command: {run: ["%s", "-c", "%s", "{port}"], url: "http://127.0.0.1:{port}/ok/v1", '
                'ready_url: "http://127.0.0.1:{port}/health"}, model: m, stream: false}' % (sys.executable, FORKING),
                [], "tests.bad_servers"),
    "locust": ("target: {url: URL, model: m, stream: false}", ["--engine", "locust", "--workers", "1"],
               "loadgen.engine.locust.worker"),
    "processes": ("target: {url: URL, model: m, stream: false}", ["--processes", "2"], "multiprocessing"),
}


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _cmdlines(procs) -> str:
    text = []
    for p in procs:
        try:
            text.append(" ".join(p.cmdline()))
        except psutil.Error:
            pass
    return "\n".join(text)


@pytest.mark.parametrize("case", list(CASES))
def test_no_child_survives_a_sigkill_of_latbench(tmp_path, known_server, case):
    target, flags, marker = CASES[case]
    if "URL" in target:
        target = target.replace("URL", f'"{known_server(delay=0.01).url}"')
    path = write_scenario(tmp_path, "name: kill\n" + target + LOAD)
    p = subprocess.Popen(LATBENCH + ["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", *flags],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        me = psutil.Process(p.pid)
        deadline = time.monotonic() + 120
        while True:  # until the process that marks this case is up (and has run a moment)
            kids = me.children(recursive=True)
            if marker in _cmdlines(kids):
                break
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, f"{marker} never started:\n{_cmdlines(kids)}"
            time.sleep(0.2)
        time.sleep(1.0)
        kids = me.children(recursive=True)
        pids = {k.pid for k in kids}
        assert pids
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 15
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [psutil.Process(pid) for pid in _alive(pids)]
        assert not left, "still running after latbench was killed:\n" + _cmdlines(left)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_report_of_a_killed_multi_process_run_reads_its_part_files(tmp_path, known_server):
    """kill -9 of a ``--processes 2`` run once both processes have rows on disk: the part files they left (never
    merged) are the target's records, and ``latbench report`` recomputes the summary from them (issue 27, item 4)."""
    url = known_server(delay=0.01).url
    path = write_scenario(tmp_path, f'name: kill\ntarget: {{url: "{url}", model: m, stream: false}}\n'
                                    + LOAD.replace("qps: 5", "qps: 40"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(LATBENCH + ["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--processes", "2"],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        me = psutil.Process(p.pid)
        deadline = time.monotonic() + 60
        while True:  # until both processes have flushed rows to their part files
            partials = list((tmp_path / "runs").glob("*/*/requests.parquet.part[01].partial"))
            if len(partials) == 2 and all(read_records(str(f).removesuffix(".partial")).num_rows for f in partials):
                break
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "no rows on disk"
            time.sleep(0.1)
        pids = {k.pid for k in me.children(recursive=True)}
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        deadline = time.monotonic() + 15
        while _alive(pids) and time.monotonic() < deadline:  # the engine processes end, as the test above checks
            time.sleep(0.1)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    (rundir,) = (tmp_path / "runs").iterdir()
    tdir = rundir / "target"
    assert not (tdir / "requests.parquet").exists() and not (tdir / "summary.json").exists()
    rows = [read_records(f).num_rows for f in sorted(tdir.glob("requests.parquet.part[01]"))]
    assert len(rows) == 2 and all(rows), rows
    r = subprocess.run(LATBENCH + ["report", str(rundir)], cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    md = (rundir / "summary.md").read_text()
    assert "did not run" not in md and "summary recomputed" in md, md
    assert f"| target | {sum(rows)} |" in md, md
    assert "INCOMPLETE RUN" in md
    table = read_records(tdir / "requests.parquet")  # every reader of the target's records finds the parts
    assert table.num_rows == sum(rows) and table.column("seq").to_pylist() == list(range(sum(rows)))
