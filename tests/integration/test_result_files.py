"""#28 item 2: every result file carries ``schema_version``; a RunDir written before they did (committed as
tests/data/rundir_0.1.0, two reference-server targets written by latbench 0.1.0 on 2026-12-04) still renders,
compares and gates; one written by a newer latbench is refused by name, not misread."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.records.definitions import SCHEMA_VERSION
from loadgen.records.rundir import RESULT_FILES, write_json
from tests.helpers import ROOT

OLD = ROOT / "tests" / "data" / "rundir_0.1.0"
LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def _latbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*LATBENCH, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture
def old(tmp_path) -> Path:
    """A copy of the committed RunDir (rendering writes into it)."""
    return Path(shutil.copytree(OLD, tmp_path / "old"))


def test_a_result_file_is_stamped_first_and_any_other_file_is_not(tmp_path):
    for name in sorted(RESULT_FILES):
        obj = json.loads(write_json(tmp_path / name, {"a": 1}).read_text())
        assert list(obj) == ["schema_version", "a"] and obj["schema_version"] == SCHEMA_VERSION, name
    assert json.loads(write_json(tmp_path / "other.json", {"a": 1}).read_text()) == {"a": 1}


def test_the_committed_old_rundir_has_no_schema_version_where_today_writes_one():
    """The test data is what it says: written before meta.json carried a version."""
    assert "schema_version" not in json.loads((OLD / "meta.json").read_text())
    assert json.loads((OLD / "naive" / "summary.json").read_text())["schema_version"] == 1


def test_an_old_rundir_renders_compares_and_gates(old, tmp_path):
    r = _latbench("report", str(old))
    assert r.returncode == 0, r.stdout + r.stderr
    html = (old / "report.html").read_text()
    assert "naive" in html and "optimized" in html and (old / "summary.md").is_file()
    summary = json.loads((old / "naive" / "summary.json").read_text())
    p99 = summary["overall"]["metrics"]["latency"]["percentiles"]["p99"]["value"]
    assert f"{p99 * 1e3:.1f}" in html  # the report's figures are the old summary's
    second = Path(shutil.copytree(OLD, tmp_path / "again"))
    c = _latbench("compare", f"{old}:before", f"{second}:after", "-o", str(tmp_path / "compare.html"))
    assert c.returncode == 0, c.stdout + c.stderr
    assert "before" in (tmp_path / "compare.html").read_text()
    g = _latbench("gate", str(second), "--baseline", str(old))
    assert g.returncode == 0, g.stdout + g.stderr
    regression = json.loads((second / "regression.json").read_text())
    assert regression["schema_version"] == SCHEMA_VERSION  # what today writes into it is stamped


@pytest.mark.parametrize("file", ["meta.json", "naive/summary.json"])
def test_a_rundir_from_a_newer_latbench_is_refused_by_name(old, file):
    path = old / file
    obj = json.loads(path.read_text())
    path.write_text(json.dumps({**obj, "schema_version": SCHEMA_VERSION + 1}))
    r = _latbench("report", str(old))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{path}: schema_version {SCHEMA_VERSION + 1} was written by a newer latbench" in r.stdout + r.stderr
    assert not (old / "report.html").exists()
