"""meta.json's one owner, :class:`loadgen.records.rundir.RunMeta`: every change is on disk at once, through the
Meta model, and what callers read back is a copy (no module edits the JSON). Real RunDirs in tmp_path."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from loadgen.records.results import Meta, ServerInfo
from loadgen.records.rundir import RunDir, RunMeta
from loadgen.redact import Redactor


def _on_disk(rd: RunDir) -> dict:
    return json.loads((rd.path / "meta.json").read_text())


def test_each_change_is_written_at_once_in_the_order_it_was_made(tmp_path):
    rd = RunDir.create(tmp_path, "s")
    meta = RunMeta.start(rd, "s", "native", kind="capacity")
    first = _on_disk(rd)
    assert list(first)[:4] == ["schema_version", "latbench_version", "engine", "kind"]
    assert first["targets"] == [] and first["complete"] is False and first["scenario"] == "s"
    entry = meta.add_target("a/b", "a_b-1", url="http://127.0.0.1:1/v1")
    assert _on_disk(rd)["targets"] == [{"name": "a/b", "dir": "a_b-1", "url": "http://127.0.0.1:1/v1"}]
    entry.update(requests=7)  # a run stopped here leaves a meta.json that says so
    assert _on_disk(rd)["targets"][0]["requests"] == 7
    meta.update(complete=True, exit_code=0)
    on_disk = _on_disk(rd)
    assert on_disk["complete"] is True and on_disk["exit_code"] == 0
    assert Meta.model_validate(on_disk).targets[0].requests == 7
    assert RunDir(rd.path).target_dirs() == {"a/b": "a_b-1"}


def test_what_callers_hold_is_a_copy(tmp_path):
    rd = RunDir.create(tmp_path, "s")
    watch = {"qps": 1.0}
    meta = RunMeta.start(rd, "s", "native", watch=watch)
    watch["qps"] = 99.0  # the dict it was given
    meta.get("watch")["qps"] = 98.0  # what it handed back
    meta.to_json()["targets"].append({"name": "x", "dir": "x"})
    meta.write()
    assert _on_disk(rd)["watch"] == {"qps": 1.0} and _on_disk(rd)["targets"] == []


def test_a_server_info_model_is_written_as_its_json_and_redacted(tmp_path):
    rd = RunDir.create(tmp_path, "s")
    redactor = Redactor()
    redactor.add("s3cret-token-value")
    meta = RunMeta.start(rd, "s", "native", redactor)
    server = ServerInfo.model_validate({"arch": "optimized", "port": 8000, "listen_s": 0.5, "ready_s": None,
                                        "cmd": "serve --key s3cret-token-value"})
    meta.add_target("t", "t", server=server)
    written = _on_disk(rd)["targets"][0]["server"]
    assert written == {"arch": "optimized", "port": 8000, "listen_s": 0.5, "ready_s": None,
                       "cmd": written["cmd"]} and "s3cret" not in written["cmd"] and "serve --key" in written["cmd"]


def test_open_adds_to_an_existing_meta_json(tmp_path):
    rd = RunDir.create(tmp_path, "s")
    RunMeta.start(rd, "s", "native").add_target("a", "a")
    meta = RunMeta.open(RunDir(rd.path))
    (entry,) = meta.targets
    entry.update(group="a", repetition=1)
    meta.update(repeat={"runs": 1})
    on_disk = _on_disk(rd)
    assert on_disk["targets"] == [{"name": "a", "dir": "a", "group": "a", "repetition": 1}]
    assert on_disk["repeat"] == {"runs": 1} and on_disk["engine"] == "native"


def test_a_field_its_model_refuses_is_an_error_under_the_suite(tmp_path):
    rd = RunDir.create(tmp_path, "s")
    meta = RunMeta.start(rd, "s", "native")
    with pytest.raises(ValidationError):  # tests/conftest.py sets LATBENCH_STRICT_RESULTS
        meta.update(exit_code="three")
