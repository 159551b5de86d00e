"""Shared test helpers: write a scenario file, run it in-process, read the RunDir back."""

import json
import textwrap
from html.parser import HTMLParser
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


class Page(HTMLParser):
    """Collects sections, numbered cells (data-src) and all visible text of a report."""

    def __init__(self):
        super().__init__()
        self.ids, self.cells, self.text, self.imgs, self.scripts = set(), [], [], [], 0
        self._open = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "script":
            self.scripts += 1
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if "data-src" in a:
            self._open = {"target": a["data-target"], "src": a["data-src"], "fmt": a["data-fmt"], "text": ""}
            self.cells.append(self._open)

    def handle_endtag(self, tag):
        if tag in ("td", "span", "small"):
            self._open = None

    def handle_data(self, data):
        self.text.append(data)
        if self._open is not None:
            self._open["text"] += data


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    p.close()
    return p

