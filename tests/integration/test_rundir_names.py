"""Target folders in a RunDir: one per target, however its name maps to a file name (issue 13, item 1).

`fast/v1` and `fast v1` both make `fast_v1`, and all-CJK names make `target`: with one folder per safe
name the second target's records overwrote the first's and `latbench gate` judged the passing target by
the failing one's records.
"""

import json
import multiprocessing as mp
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from loadgen.records.rundir import RESERVED, RunDir, folder_name
from loadgen.records.schema import read_records
from tests.helpers import run

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def _scenario(targets: list[tuple[str, str]]) -> str:
    lines = "".join(f'\n      - {{name: "{name}", url: "{url}", stream: false, model: m}}' for name, url in targets)
    return f"""
    name: names
    targets:{lines}
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 1s, qps: 20}}
    slo: ["error_rate < 1%"]
    """


@pytest.mark.parametrize("good, bad", [("fast/v1", "fast v1"), ("快速", "慢速"), ("meta.json", "meta_json")])
def test_names_that_map_to_one_safe_name_get_their_own_folders(tmp_path, known_server, good, bad):
    ok, failing = known_server(delay=0.01), known_server(delay=0.01, status=500)
    res, _, _ = run(tmp_path, _scenario([(good, ok.url), (bad, failing.url)]))
    rd = res.rundir.path
    meta = json.loads((rd / "meta.json").read_text())
    dirs = {t["name"]: t["dir"] for t in meta["targets"]}
    assert set(dirs) == {good, bad} and len(set(dirs.values())) == 2, dirs
    assert not set(dirs.values()) & RESERVED
    assert (rd / "meta.json").is_file() and json.loads((rd / "meta.json").read_text())["targets"]  # not a folder
    for name, expect_errors in ((good, 0), (bad, 20)):
        table = read_records(rd / dirs[name] / "requests.parquet").to_pandas()
        assert len(table) == 20
        assert int((table["error"] != "").sum()) == expect_errors, name
        assert json.loads((rd / dirs[name] / "summary.json").read_text())["target"] == name
    # the gate judges each target by its own records: only the failing one fails
    g = subprocess.run(LATBENCH + ["gate", str(rd)], capture_output=True, text=True, timeout=120)
    assert g.returncode == 1, g.stdout + g.stderr
    failed = [ln for ln in g.stdout.splitlines() if ln.strip().startswith("- ")]
    assert failed and all(bad in ln and good not in ln.replace(bad, "") for ln in failed), g.stdout


def test_folder_names_are_unique_stable_and_safe():
    assert folder_name("fast") == "fast"  # a safe name is its own folder
    a, b = folder_name("fast/v1"), folder_name("fast v1")
    assert a != b and a.startswith("fast_v1-") and b.startswith("fast_v1-")
    assert folder_name("fast/v1") == a  # stable from run to run
    assert folder_name("快速") != folder_name("慢速")
    assert folder_name("fast", {"FAST"}) == "fast-2"  # a case-insensitive file system would merge them
    assert folder_name("report.html") != "report.html"
    for name in ("..", ".", "", "a/../../b", "x" * 300):
        f = folder_name(name)
        assert f and "/" not in f and f not in (".", "..")


def _create_many(out: str, barrier, threads: int, each: int = 4) -> list[str]:
    """``threads`` threads that each create ``each`` RunDirs under ``out`` in a row, all starting the moment every
    creator is ready."""
    def one(_):
        barrier.wait(30)
        return [str(RunDir.create(out, "same").path) for _ in range(each)]

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between any two calls, as processes on many cores would
    try:
        with ThreadPoolExecutor(threads) as pool:
            return [p for made in pool.map(one, range(threads)) for p in made]
    finally:
        sys.setswitchinterval(switch)


def _in_process(out: str, barrier, threads: int, results) -> None:
    results.put(_create_many(out, barrier, threads))


def test_runs_started_at_once_get_their_own_rundirs(tmp_path):
    """Issue 27, item 5: RunDir.create checked exists() and then made the folder with exist_ok, so runs started with
    one --out in the same second shared it (22 of 50 concurrent creates collided). 50 creators at once, 10
    processes of 5 threads, 4 RunDirs each: every one a folder no other made."""
    out, n, processes = str(tmp_path / "runs"), 50, 10
    ctx = mp.get_context("fork")  # no re-import: the creators start within milliseconds of each other
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_in_process, args=(out, barrier, n // processes, results)) for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        paths = [path for _ in procs for path in results.get(timeout=30)]
    finally:
        for p in procs:
            p.join(10)
    assert len(paths) == 4 * n and len(set(paths)) == 4 * n, f"{4 * n - len(set(paths))} shared"
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in paths)
