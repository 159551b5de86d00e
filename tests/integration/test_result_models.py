"""#28 item 1: the result files go through typed models (loadgen.records.results) at the write, and the JSON is
what the writers' dicts said before the models: same records, same JSON, byte for byte. A file its model
refuses is an error under the suite's strict mode (so every RunDir the suite writes matches the models)."""

from __future__ import annotations

import json
import logging
import os

import pytest
from pydantic import ValidationError

from loadgen.analysis.metrics import build_summary
from loadgen.records.definitions import SCHEMA_VERSION
from loadgen.records.results import RESULT_MODELS, Generator, Meta, MetaTarget, Summary
from loadgen.records.rundir import RESULT_FILES, STRICT_RESULTS_ENV, jsonable, write_json, write_result
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import plan_phases
from tests.conftest import ServerProcess
from tests.helpers import ROOT, write_scenario

OLD = ROOT / "tests" / "data" / "rundir_0.1.0"
SCENARIO = """
name: models
targets:
  - {name: one, url: "${LB_URL}", stream: true}
load:
  send_lag_threshold: 1s
  host_wait_limit: 1
  phases:
    - {name: main, duration: 0.6s, qps: 20}
slo:
  - latency.p99 < 5s
"""


def _text_before_models(obj: dict, redactor) -> str:
    """What write_json wrote for a result file before the models: the dict, stamped, redacted, as JSON."""
    return json.dumps(jsonable(redactor.data({"schema_version": SCHEMA_VERSION} | obj)), indent=1, allow_nan=False)


def test_a_real_runs_summary_is_the_summarized_dict_byte_for_byte(tmp_path):
    server = ServerProcess(ttft=0.01, gap=0.002, tokens=5)
    try:
        loaded = load_scenario(write_scenario(tmp_path, SCENARIO), env={**os.environ, "LB_URL": server.url})
        result = run_scenario(loaded, out=str(tmp_path / "runs"))
    finally:
        server.stop()
    tr = result.targets[0]
    assert tr.summary.overall.count > 0
    written = (result.rundir.path / tr.dir / "summary.json").read_text()
    assert written == _text_before_models(tr.summary.to_json(), loaded.redactor)
    Summary.model_validate_json(written)  # and it reads back into its model


def test_a_summary_built_as_a_model_is_byte_for_byte_what_the_dict_writer_wrote(tmp_path):
    """The committed records of the old RunDir, summarized: the file written from build_summary's model is the
    text that main's dict-building summarize gave for them (tests/data/rundir_0.1.0_naive_summary.json, written
    by 8d148cc with these arguments; since #30 its timeseries also has in_flight_peak, each second's peak: added)."""
    sc = load_scenario(OLD / "scenario.yaml").scenario
    slos = [parse_slo(x) for x in ("latency.p99 < 5s", "main: ttft.p90 < 1s", "error_rate < 1%")]
    model = build_summary(read_records(OLD / "naive" / "requests.parquet"), plan_phases(sc.load), slos, 2.0,
                          target="naive", scenario=sc.name, complete=True, notes=["n"], cpu_seconds=0.5,
                          expected_qps=3.0)
    assert isinstance(model, Summary) and isinstance(model.generator, Generator)
    written = write_result(tmp_path / "summary.json", model).read_text()
    assert written + "\n" == (ROOT / "tests" / "data" / "rundir_0.1.0_naive_summary.json").read_text()


def test_every_file_of_the_committed_old_rundir_goes_through_its_model_unchanged(tmp_path):
    files = sorted(OLD.rglob("*.json"))
    assert {f.name for f in files} == {"meta.json", "metrics.json", "summary.json"}
    for f in files:
        obj = json.loads(f.read_text())
        model = RESULT_MODELS[f.name].model_validate(obj)
        assert json.dumps(model.to_json()) == json.dumps(obj), f  # same keys, same order, same values
        out = write_result(tmp_path / f.name, model)
        assert json.loads(out.read_text()) == {"schema_version": SCHEMA_VERSION} | obj


def test_every_result_file_has_a_model():
    assert set(RESULT_MODELS) == RESULT_FILES


def test_a_model_built_in_code_writes_the_keys_it_was_given(tmp_path):
    meta = Meta(scenario="s", targets=[MetaTarget(name="a/b", dir="a_b-1", url="http://h/v1")])
    meta.targets[0].requests = 3  # set afterwards: written after the keys it was built with
    out = json.loads(write_result(tmp_path / "meta.json", meta).read_text())
    assert out == {"schema_version": SCHEMA_VERSION, "scenario": "s",
                   "targets": [{"name": "a/b", "dir": "a_b-1", "url": "http://h/v1", "requests": 3}]}
    assert list(out["targets"][0]) == ["name", "dir", "url", "requests"]


BAD = {"targets": [{"name": "a"}], "complete": "maybe"}  # a target without its folder; complete not a bool


def test_a_result_file_its_model_refuses_fails_the_write_in_strict_mode(tmp_path):
    assert os.environ.get(STRICT_RESULTS_ENV) == "1"  # set by tests/conftest.py for the whole suite
    with pytest.raises(ValidationError) as info:
        write_json(tmp_path / "meta.json", BAD)
    assert {e["loc"] for e in info.value.errors()} == {("targets", 0, "dir"), ("complete",)}
    assert not (tmp_path / "meta.json").exists()


def test_outside_strict_mode_a_refused_file_is_logged_and_kept(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(STRICT_RESULTS_ENV, "0")
    with caplog.at_level(logging.ERROR, logger="loadgen.records.rundir"):
        write_json(tmp_path / "meta.json", BAD)
    assert json.loads((tmp_path / "meta.json").read_text()) == {"schema_version": SCHEMA_VERSION} | BAD
    assert "meta.json does not match its model" in caplog.text
