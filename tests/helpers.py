"""Shared test helpers: write a scenario file, run it in-process, read the RunDir back."""

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from loadgen.analysis.metrics import records_frame
from loadgen.records.schema import read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from reports import fmt
from reports.report_model import get

ROOT = Path(__file__).resolve().parent.parent


def write_scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def run(tmp_path: Path, text: str, **kw):
    """Run a scenario given as YAML text; returns (RunResult, summary of the first target, records frame); the
    summary and frame are None when the target sent nothing (it did not start, or its pre-flight stopped it)."""
    loaded = load_scenario(write_scenario(tmp_path, text))
    result = run_scenario(loaded, out=str(tmp_path / "runs"), **kw)
    tdir = result.rundir.path / result.targets[0].dir
    if not (tdir / "summary.json").is_file():
        return result, None, None
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
        if tag in ("td", "span", "small", "b"):
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


class Headline(HTMLParser):
    """The #headline section of a report: its numbered parts (data-src) and its text."""

    def __init__(self):
        super().__init__()
        self.depth, self.cells, self.text, self.imgs, self._open = 0, [], [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") == "headline":
            self.depth = 1
        elif self.depth and tag == "section":
            self.depth += 1
        if not self.depth:
            return
        if tag == "img":
            self.imgs.append(a.get("alt"))
        if "data-src" in a:
            self._open = {"target": a["data-target"], "src": a["data-src"], "fmt": a["data-fmt"], "text": ""}
            self.cells.append(self._open)

    def handle_endtag(self, tag):
        if self.depth and tag == "section":
            self.depth -= 1
        if tag in ("b", "span"):
            self._open = None

    def handle_data(self, data):
        if self.depth:
            self.text.append(data)
            if self._open is not None:
                self._open["text"] += data


def read_headline(path: Path) -> Headline:
    h = Headline()
    h.feed(path.read_text(encoding="utf-8"))
    return h


def formatted(value, kind: str) -> str:
    if kind.startswith("ci"):
        return fmt.ci(value, kind[3:] or "ms")
    return fmt.fmt(value, kind)


def check_cells(cells: list[dict], sources: dict) -> int:
    """Every headline number equals its source's value, formatted; returns how many were checked."""
    for c in cells:
        assert c["target"] in sources, c
        v = get(sources[c["target"]], c["src"])
        assert v is not None or c["text"] == fmt.DASH, c
        assert c["text"] == formatted(v, c["fmt"]), (c, v)
    return len(cells)


def start_reference(port: int, *flags: str) -> subprocess.Popen:
    """The reference server (optimized, tiny, numpy) on a given 127.0.0.1 port, once /health answers 200."""
    proc = subprocess.Popen([sys.executable, "-m", "reference_server", "--host", "127.0.0.1", "--port", str(port),
                             "--arch", "optimized", "--model", "tiny", "--backend", "numpy", *flags],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the reference server exited"
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the reference server was not ready in time")


def live_vllm():
    """The skip mark of the tests that start a real vLLM (its CPU build, ``python benchmarks/peer_setup.py vllm``):
    they run where its peer venv is set up and ``LATBENCH_VLLM_TESTS=1`` asks for them. Each start takes a minute
    and both cores of a small machine, which the README's test command (under 10 minutes on two cores, the other
    worker's timing tests beside it) cannot spare; run them with
    ``LATBENCH_VLLM_TESTS=1 python -m pytest -n 0 tests/integration/test_telemetry_vllm_live.py
    tests/integration/test_vllm_reset.py``."""
    import os

    import pytest

    from benchmarks import peer_setup

    if not peer_setup.ready("vllm"):
        return pytest.mark.skip(reason="vLLM's CPU build is not installed (python benchmarks/peer_setup.py vllm)")
    return pytest.mark.skipif(os.environ.get("LATBENCH_VLLM_TESTS") != "1",
                              reason="starts a real vLLM: LATBENCH_VLLM_TESTS=1 runs it")
