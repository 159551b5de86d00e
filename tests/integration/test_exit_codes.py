"""The documented exit codes, case by case, as a user meets them (issue 13, item 12).

Exit 1 means "an SLO failed"; these cases exited 1, most with a traceback: Ctrl-C while the reference server
starts ("Aborted!"), --out naming a file, report/compare -o into a missing folder, capacity against a target
that cannot be used, report/gate/compare on a meta.json that is a JSON list, report on a truncated parquet
(it can render from summary.json), and report on a full disk (which also left report.html.tmp). Each now
gets one clear line and its code: 2 for usage and input errors, 3 for an invalid or interrupted run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import run, write_scenario
from tests.servers import KnownServer

ROOT = Path(__file__).resolve().parents[2]
LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def latbench(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(LATBENCH + [str(a) for a in args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def _scenario(url: str, duration: str = "500ms") -> str:
    return f"""
    name: codes
    target: {{url: "{url}", stream: false}}
    load:
      arrival: constant
      phases: [{{name: main, duration: {duration}, qps: 10}}]
    slo: ["latency.p99 < 5s"]
    """


@pytest.fixture(scope="module")
def rundir(tmp_path_factory):
    """A finished RunDir to break in various ways (each test works on a copy)."""
    tmp = tmp_path_factory.mktemp("codes")
    srv = KnownServer(delay=0.005).start()
    try:
        res, _, _ = run(tmp, _scenario(srv.url))
    finally:
        srv.stop()
    return res.rundir.path


def _copy(rundir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / rundir.name
    shutil.copytree(rundir, dest)
    return dest


def _clean(r: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "Aborted!" not in out, out
    for w in words:
        assert w in out, (w, out)


def _cmdline(proc: psutil.Process) -> list[str]:
    """A child's command line; none for one that ended meanwhile (a zombie not yet reaped, or gone)."""
    try:
        return proc.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def test_ctrl_c_while_the_reference_server_starts_is_an_interrupted_run(tmp_path):
    path = write_scenario(tmp_path, """
    name: starting
    target: {reference: {arch: naive, model: tiny, backend: numpy}, stream: false}
    load: {phases: [{name: main, duration: 5s, qps: 2}]}
    """)
    p = subprocess.Popen(LATBENCH + ["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me, deadline = psutil.Process(p.pid), time.monotonic() + 60
    while not any("reference_server" in " ".join(_cmdline(c)) for c in me.children(recursive=True)):
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 3, out
    assert "Traceback" not in out and "Aborted!" not in out and "interrupted" in out, out


def test_out_naming_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    path = write_scenario(tmp_path, _scenario("http://127.0.0.1:9/v1"))
    _clean(latbench("run", path, "--out", tmp_path / "afile"), 2, "--out", "is a file")
    _clean(latbench("run", path, "--out", tmp_path / "afile" / "below"), 2, "--out", "is a file")


def test_an_out_that_cannot_be_written_is_a_usage_error_before_anything_is_sent(tmp_path):
    """Issue 27, item 16: a read-only --out exited 3 saying records written before it were kept, though nothing
    was sent. As root (whom a 0o555 folder does not stop) --out is a read-only tmpfs mounted for the test, which
    refuses root too (EROFS); as anyone else a 0o555 folder (EACCES)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs",
                                                            str(ro)], capture_output=True).returncode:
            pytest.skip("root, and no read-only tmpfs can be mounted here")
        reason = "Read-only file system"
    else:
        ro.chmod(0o555)
        reason = "Permission denied"
    srv = KnownServer(delay=0.005).start()
    try:
        path = write_scenario(tmp_path, _scenario(srv.url))
        r = latbench("run", path, "--out", ro / "runs", "--quiet")
        _clean(r, 2, "--out", str(ro / "runs"), reason)
        assert "kept" not in r.stdout + r.stderr
        assert srv.requests == 0 and not srv.queries  # not one request sent
        assert not any(ro.iterdir())
    finally:
        srv.stop()
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_report_and_compare_into_a_missing_folder_are_usage_errors(rundir, tmp_path):
    missing = tmp_path / "no" / "such" / "x.html"
    _clean(latbench("report", rundir, "-o", missing), 2, "does not exist")
    _clean(latbench("compare", rundir, "-o", missing), 2, "does not exist")
    assert not missing.parent.exists()


def test_capacity_against_a_target_that_cannot_be_used_is_invalid(tmp_path):
    slow_ref = write_scenario(tmp_path, """
    name: cap
    target: {reference: {arch: naive, model: tiny, backend: numpy, startup_timeout: 1ms}}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    slo: ["latency.p99 < 1s"]
    """, "ref.yaml")  # valid (a bad setting is a validation error, exit 2), but it will not be up in time
    _clean(latbench("capacity", slow_ref, "--out", tmp_path / "runs", "--max", 4), 3, "reference server")
    down = write_scenario(tmp_path, _scenario("http://127.0.0.1:9/v1"), "down.yaml")
    _clean(latbench("capacity", down, "--out", tmp_path / "runs2", "--max", 4, "--step-duration", "1s",
                    "--warmup", "0s"), 3, "unreachable")


def test_a_meta_json_that_is_a_list_is_an_input_error_everywhere(rundir, tmp_path):
    rd = _copy(rundir, tmp_path)
    (rd / "meta.json").write_text("[1, 2, 3]")
    for args in (["report", rd], ["gate", rd], ["compare", rd, "-o", tmp_path / "c.html"]):
        _clean(latbench(*args), 2, "meta.json", "JSON object")


def test_report_on_a_truncated_parquet_renders_from_the_summary(rundir, tmp_path):
    rd = _copy(rundir, tmp_path)
    records = rd / "target" / "requests.parquet"
    records.write_bytes(records.read_bytes()[:300])
    _clean(latbench("report", rd), 0, "report.html")
    html = (rd / "report.html").read_text()
    assert "requests.parquet cannot be read" in html and "latency.p99 &lt; 5s" in html


def test_report_on_a_full_disk_is_exit_3_and_leaves_no_partial_file(rundir, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (disk / "filler").write_bytes(b"\0" * 60 * 1024)
        _clean(latbench("report", rundir, "-o", disk / "report.html"), 3, "No space left on device")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no report.html, no report.html.tmp
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
