"""Interruptions and crashes, as a user meets them: SIGTERM (once, twice, past the grace), the target
process dying mid-run, and a full disk under the RunDir. Each leaves every record taken, and
``latbench report`` renders the RunDir, marked incomplete where it is.

tests/test_cli.py already covers SIGINT once and twice; SIGTERM goes through the same handler and is
tested here with the server's own view of what was sent.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.records.schema import read_records
from tests.bad_servers import SLOW_S, BadServer
from tests.helpers import write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def _scenario(url: str, qps=20, duration="30s", grace="5s", extra_target="", workload="") -> str:
    return f"""
    name: interrupt
    target: {{url: "{url}", model: m, stream: false{extra_target}}}
    {workload}
    load:
      arrival: constant
      grace: {grace}
      phases:
        - {{name: main, duration: {duration}, qps: {qps}}}
    """


def _start(args, **kw) -> subprocess.Popen:
    return subprocess.Popen(LATBENCH + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _wait(pred, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _rundir(out: Path) -> Path:
    (d,) = list(out.iterdir())
    return d


def _records(rd: Path, target="target"):
    return read_records(rd / target / "requests.parquet").to_pandas()


def _report_marks_incomplete(rd: Path) -> str:
    r = subprocess.run(LATBENCH + ["report", str(rd)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    html = (rd / "report.html").read_text()
    assert "INCOMPLETE RUN" in html and "INCOMPLETE RUN" in (rd / "summary.md").read_text()
    return html


def test_first_sigterm_stops_sending_and_lets_in_flight_finish(tmp_path):
    with BadServer(default_mode="slow") as srv:
        path = write_scenario(tmp_path, _scenario(f"http://127.0.0.1:{srv.port}/slow/v1"))
        # the signal is timed to the load (the pre-flight would wait on the server first)
        p = _start(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-preflight"])
        _wait(lambda: srv.hits["slow"] >= 30, 20, "30 requests at the server")
        t_signal = time.perf_counter()
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        last_arrival = max(srv.arrivals)
        sent = srv.hits["slow"]
    assert p.returncode == 3, out
    assert last_arrival < t_signal + 0.2, "requests kept being sent after SIGTERM"
    rd = _rundir(tmp_path / "runs")
    table = pq.read_table(rd / "target" / "requests.parquet").to_pandas()  # closed cleanly: a full parquet file
    assert len(table) == sent and sorted(table["seq"]) == list(range(sent))
    # in flight at the signal: ~SLOW_S x 20 qps requests, each given the grace and answered in full
    assert set(table["error"]) == {""}, table["error"].value_counts()
    assert ((table["done"] - table["sent"]) >= SLOW_S * 0.9).all()
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert summary["complete"] is False and summary["overall"]["count"] == sent
    assert json.loads((rd / "meta.json").read_text())["complete"] is False
    _report_marks_incomplete(rd)


@pytest.mark.parametrize("second", [False, True], ids=["grace_expires", "second_sigterm"])
def test_sigterm_past_the_grace_or_twice_cancels_in_flight_and_flushes(tmp_path, second):
    with BadServer(default_mode="stall") as srv:
        path = write_scenario(tmp_path, _scenario(f"http://127.0.0.1:{srv.port}/stall/v1", grace="1500ms"))
        # the signal is timed to the load (the pre-flight would wait on the server first)
        p = _start(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-preflight"])
        _wait(lambda: srv.hits["stall"] >= 10, 20, "10 requests at the server")
        t = time.perf_counter()
        p.send_signal(signal.SIGTERM)
        if second:
            time.sleep(0.3)
            p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
        took = time.perf_counter() - t
        sent = srv.hits["stall"]
    assert p.returncode == 3
    # twice: at once; once: after the 1.5 s grace (plus writing the summary), never the 60 s request timeout
    assert took < (3.0 if second else 5.0) and (second or took >= 1.5), took
    rd = _rundir(tmp_path / "runs")
    table = _records(rd)
    assert len(table) == sent and set(table["error"]) == {"cancelled"}
    _report_marks_incomplete(rd)


def _children(pid: int) -> list[tuple[int, str]]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append((int(d.name), cmd))
    return out


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return r.returncode == 0


def test_full_disk_while_writing_the_rundir(tmp_path):
    """A 1 MB tmpfs holds the RunDir (root can mount one; else the test is skipped): records fill it."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        (disk / "filler").write_bytes(b"\0" * (1024 * 1024 - 160 * 1024))  # leave ~160 kB
        with BadServer(default_mode="ok") as srv:
            path = write_scenario(tmp_path, _scenario(f"http://127.0.0.1:{srv.port}/ok/v1", qps=400, duration="6s",
                                                      workload=("workload: {prompts: {input_tokens: 4, "
                                                                "output_tokens: 1, distinct: 1}}")))
            t = time.perf_counter()
            p = _start(["run", str(path), "--out", str(disk / "runs"), "--quiet"])
            out, _ = p.communicate(timeout=60)
            took = time.perf_counter() - t
            sent = srv.hits["ok"]
        assert p.returncode != 0, out
        assert "No space left on device" in out and "records written before it are kept" in out, out
        rd = _rundir(disk / "runs")
        assert (rd / "target" / "requests.parquet.partial").exists()  # kept: the parquet file has no footer
        table = _records(rd)
        # records up to the failure are intact: whole rows, each request once, in order of sending
        # every record written before the disk filled is kept (all of them when it filled at the last flush)
        assert 0 < len(table) <= sent and table["seq"].is_unique
        assert table["done"].notna().all() and set(table["error"]) <= {""}
        (disk / "filler").unlink()  # space again: the report renders from what was kept
        _report_marks_incomplete(rd)
        # a write failure stops sending at once: one clear line, exit 3, no traceback (a generous bound, not a timing)
        assert "Traceback" not in out and p.returncode == 3, (p.returncode, out)
        assert took < 30, took
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
