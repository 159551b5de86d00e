"""Shared test helpers: write a scenario file, run it in-process, read the RunDir back."""

import json
import textwrap
from pathlib import Path

from loadgen.analysis.metrics import records_frame
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario


def write_scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def run(tmp_path: Path, text: str, **kw):
    """Run a scenario given as YAML text; returns (RunResult, summary of the first target, records frame)."""
    loaded = load_scenario(write_scenario(tmp_path, text))
    result = run_scenario(loaded, out=str(tmp_path / "runs"), **kw)
    tdir = result.rundir.path / result.targets[0].dir
    summary = json.loads((tdir / "summary.json").read_text())
    frame = records_frame(read_records(tdir / "requests.parquet"))
    return result, summary, frame


def pct(summary_scope: dict, metric: str, stat: str) -> float:
    return summary_scope["metrics"][metric]["percentiles"][stat]["value"]
