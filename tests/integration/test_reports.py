"""Reports of a real run: two targets (KnownServers with different delays) -> report.html, summary.md,
junit.xml. Checked structurally: the HTML parses, holds every section, every number equals summary.json's,
text from the RunDir is escaped. How the reports look in a browser: tests/integration/test_report_browser.py."""

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadgen.cli.report import compare, report
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from reports import load_rundir, write_outputs
from reports.claims import interval_of, ratio_claim
from reports.headline import architectures_data
from reports.report_model import FEW, get
from tests.conftest import ServerProcess
from tests.helpers import formatted, parse, write_scenario

NAME = "two <script>alert('name')</script> & co"
SCENARIO = f"""
name: "{NAME}"
targets:
  - {{name: fast, url: "${{LB_FAST_URL}}", stream: true}}
  - {{name: slow, url: "${{LB_SLOW_URL}}", stream: true}}
load:
  send_lag_threshold: 1s
  host_wait_limit: 1  # judged on numbers, not on the CPUs of a shared test machine
  grace: 2s
  phases:
    - {{name: warm, duration: 0.5s, qps: 20, record: false}}
    - {{name: main, duration: 1.5s, qps: 40}}
slo:
  - latency.p99 < 150ms
  - ttft.p99 < 300ms
  - error_rate < 1%
  - "fast: latency.p50 < 100ms"
"""


@pytest.fixture(scope="module")
def rundir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    fast = ServerProcess(ttft=0.02, gap=0.002, tokens=10)
    slow = ServerProcess(ttft=0.1, gap=0.01, tokens=10)
    try:
        env = {**os.environ, "LB_FAST_URL": fast.url, "LB_SLOW_URL": slow.url}
        loaded = load_scenario(write_scenario(tmp, SCENARIO), env=env)
        result = run_scenario(loaded, out=str(tmp / "runs"))
    finally:
        fast.stop(), slow.stop()
    path = result.rundir.path
    # What a server may say ends up in the RunDir as text (a start-up log in the reasons, engine notes):
    meta = json.loads((path / "meta.json").read_text())
    meta["verdict"]["reasons"].append({"kind": "target_error", "target": "slow", "text": "slow: the reference server "
                                       "exited before it listened:\n<script>alert('server')</script>"})
    (path / "meta.json").write_text(json.dumps(meta))
    s = json.loads((path / "slow" / "summary.json").read_text())
    s["notes"] = ['server said: <img src=x onerror="alert(1)">']
    (path / "slow" / "summary.json").write_text(json.dumps(s))
    outputs = write_outputs(path)
    assert [p.name for p in outputs] == ["report.html", "summary.md", "junit.xml"]
    return path


def summaries(path: Path) -> dict:
    return {d: json.loads((path / d / "summary.json").read_text()) for d in ("fast", "slow")}


def test_report_has_every_section_and_every_number_equals_the_summary(rundir):
    page = parse(rundir / "report.html")
    for section in ("header", "verdict", "run", "slo", "comparison", "overview", "fig-cdf", "fig-dist",
                    "fig-breakdown", "target-0", "target-1", "fig-timeseries", "fig-host"):
        assert section in page.ids, section
    assert all(src.startswith("data:image/svg+xml;base64,") for src in page.imgs) and len(page.imgs) >= 5
    sums = summaries(rundir)
    run_ = load_rundir(rundir)  # the headline's sentence: the numbers of loadgen.analysis.headline.architectures
    sums["@architectures"] = architectures_data([(td.name, td) for td in run_.targets])
    assert len(page.cells) > 150
    kinds = set()
    for c in page.cells:
        value = get(sums[c["target"]], c["src"])
        assert c["text"] == formatted(value, c["fmt"]), c
        kinds.add(c["fmt"])
    assert kinds >= {"ms", "ci", "pct", "rate", "count"}
    srcs = {(c["target"], c["src"]) for c in page.cells}
    for t in ("fast", "slow"):  # the headline numbers are all there
        for p in ("overall", "phases/main", "phases/warm"):
            for m in ("latency", "ttft", "itl", "tpot", "service_time"):
                for stat in ("mean", "percentiles/p50/value", "percentiles/p99.9/value", "max"):
                    assert (t, f"{p}/metrics/{m}/{stat}") in srcs
            for k in ("count", "ok", "achieved_qps", "sent_qps", "target_qps", "output_tokens_per_s", "error_rate"):
                assert (t, f"{p}/{k}") in srcs
            assert (t, f"{p}/goodput") not in srcs  # no goodput: block, no column of dashes for it


def test_text_from_the_rundir_is_escaped(rundir):
    raw = (rundir / "report.html").read_text()
    page = parse(rundir / "report.html")
    assert page.scripts == 0 and "<script>" not in raw and "<img src=x" not in raw
    assert "two &lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt; &amp; co" in raw
    assert "&lt;script&gt;alert(&#39;server&#39;)&lt;/script&gt;" in raw
    text = "".join(page.text)
    assert NAME in text and "<script>alert('server')</script>" in text and "onerror" in text
    assert "http://" not in raw.replace(str(rundir), "").split("<body>")[0]  # nothing fetched in <head>


def test_verdict_comparison_markdown_and_junit(rundir):
    page = parse(rundir / "report.html")
    text = " ".join(page.text)
    assert "FAILED" in text and "1 of 7 objectives missed" in text
    sums = summaries(rundir)
    p99 = [sums[t]["overall"]["metrics"]["latency"]["percentiles"]["p99"] for t in ("fast", "slow")]
    claim = ratio_claim(*[(p["value"], interval_of(p["ci"], p["too_few_samples"])) for p in p99], "", True, FEW)
    assert claim in text and re.match(r"\d+\.\dx higher \((interval \[|no interval: too few requests)", claim), claim
    md = (rundir / "summary.md").read_text()
    assert "**FAILED**" in md and "<script>" not in md.replace("`", "") and "latency.p99 < 150ms" in md
    root = ET.parse(rundir / "junit.xml").getroot()
    assert (root.get("tests"), root.get("failures")) == ("7", "1")
    suites = {s.get("name").rsplit(" / ", 1)[1]: s for s in root.iter("testsuite")}
    assert (suites["fast"].get("tests"), suites["fast"].get("failures")) == ("4", "0")
    assert (suites["slow"].get("tests"), suites["slow"].get("failures")) == ("3", "1")
    (failed,) = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed.get("name") == "latency.p99 < 150ms" and failed.get("classname") == "latbench.slow"


def test_cli_report_and_compare_of_one_multi_target_run(rundir, tmp_path):
    g = click.Group()
    g.add_command(report), g.add_command(compare)
    r = CliRunner().invoke(g, ["report", str(rundir), "-o", str(tmp_path / "again.html")])
    assert r.exit_code == 0, r.output
    assert parse(tmp_path / "again.html").ids >= {"verdict", "slo", "target-1"}
    r = CliRunner().invoke(g, ["compare", f"{rundir}:arch", "-o", str(tmp_path / "cmp.html")])
    assert r.exit_code == 0, r.output
    text = " ".join(parse(tmp_path / "cmp.html").text)
    assert "arch/fast" in text and "arch/slow" in text and "x higher (" in text
    assert "Targets compared: arch/fast vs arch/slow" in text  # one run's targets: what the title says they are
    r = CliRunner().invoke(g, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "not a latbench RunDir" in r.output
