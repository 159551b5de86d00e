"""#28 item 3: the JSON Schemas of the result files, generated from their models (loadgen.records.results):
``latbench schema --results`` prints them, and schemas/ holds them, current."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from loadgen.cli.scenario import schema, schema_texts
from loadgen.records.results import RESULT_MODELS, schema_file
from loadgen.records.rundir import RESULT_FILES

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_schemas_folder_holds_each_result_files_schema_as_the_models_generate_it():
    stale = [schema_file(name) for name, text in schema_texts().items()
             if not (SCHEMAS / schema_file(name)).is_file()
             or (SCHEMAS / schema_file(name)).read_text(encoding="utf-8") != text]
    assert not stale, f"schemas/ is not current: {stale}; run `latbench schema --results --out schemas`"
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(schema_file(n) for n in RESULT_FILES)


def test_schema_results_prints_every_result_files_schema_by_name():
    r = CliRunner().invoke(schema, ["--results"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out) == set(RESULT_MODELS) == RESULT_FILES
    meta = out["meta.json"]
    assert meta["additionalProperties"] is True  # older and newer files read
    target = meta["$defs"]["MetaTarget"]
    assert set(target["required"]) == {"name", "dir"} and meta["properties"]["targets"]["type"] == "array"
    assert out["summary.json"]["properties"]["schema_version"]["type"] == "integer"


def test_schema_without_results_is_still_the_scenarios_and_out_needs_results(tmp_path):
    r = CliRunner().invoke(schema, [])
    assert r.exit_code == 0 and "targets" in json.loads(r.output)["properties"]
    r = CliRunner().invoke(schema, ["--out", str(tmp_path)])
    assert r.exit_code == 2 and "give --results too" in r.output


def test_schema_out_writes_the_files_that_schemas_holds(tmp_path):
    r = CliRunner().invoke(schema, ["--results", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    for name, text in schema_texts().items():
        assert (tmp_path / "s" / schema_file(name)).read_text(encoding="utf-8") == text
