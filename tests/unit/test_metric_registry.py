"""The metric registry is the one place a metric is declared: a metric added there (a test-only entry) is
accepted by the SLO grammar and the goodput: block, computed by summarize, listed in metrics.json, given a row
in the report, served by ``latbench watch`` and listed in the docs' metric table, with no other edit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from loadgen import metric_registry
from loadgen.analysis.metrics import summarize
from loadgen.metric_registry import Metric, doc_table, registered
from loadgen.monitoring.exposition import WatchExporter
from loadgen.records.results import Summary
from loadgen.records.rundir import METRICS, RunDir
from loadgen.records.schema import Outcome, RecordBuffer
from loadgen.scenario.model import GoodputObjectives
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import PhasePlan
from reports.report_model import percentile_table

ROOT = Path(__file__).resolve().parents[2]
#: A metric for the tests only: the records' own ``sent`` column (seconds from the run's start to each send),
#: a distribution an SLO and a goodput: bound may use, with a report row and a watch histogram.
SENT = Metric("sent", "s", "sent: when the request left (test only)", dist=True, slo="duration", goodput=True,
              goodput_doc="sent at most this", label="sent (test)", watch="When each successful request left.")


@pytest.fixture
def sent():
    with registered(SENT) as m:
        yield m
    assert "sent" not in metric_registry.distributions()  # gone again: no other test sees it


def _records() -> pa.Table:
    """Four successful requests of one phase, sent at 0.5, 1.0, 1.5 and 2.0 s, each 0.1 s long."""
    buf = RecordBuffer()
    for seq, t in enumerate((0.5, 1.0, 1.5, 2.0)):
        buf.append(seq, 0, True, t, Outcome(sent=t, done=t + 0.1), 0.0)
    return pa.Table.from_batches([buf.drain()])


def test_the_docs_metric_table_is_the_registry_s():
    text = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    m = re.search(r"<!-- the metric table: .*? -->\n(.*?)<!-- end of the metric table -->", text, re.S)
    assert m, "docs/reference/metrics.md has no metric table markers"
    assert m.group(1) == doc_table(), "docs/reference/metrics.md is stale: run latbench docs --generate docs/reference"


def test_an_slo_accepts_a_registered_metric_and_not_an_unregistered_one(sent):
    slo = parse_slo("sent.p99 < 3s")
    assert (slo.metric, slo.stat, slo.threshold) == ("sent", "p99", 3.0)
    with pytest.raises(ValueError, match="unknown metric 'sent_at'; expected one of latency, .*, sent, error_rate"):
        parse_slo("sent_at.p99 < 3s")


def test_an_slo_on_a_metric_after_it_is_unregistered_is_unknown():
    with pytest.raises(ValueError, match="unknown metric 'sent'"):
        parse_slo("sent.p99 < 3s")


def test_goodput_accepts_a_metric_flagged_for_it_and_only_then(sent):
    g = GoodputObjectives.model_validate({"sent": "2s", "ttft": "200ms"})
    assert g.bounds() == {"ttft": 0.2, "sent": 2.0}
    with pytest.raises(ValidationError, match="expected at least one per-request bound: latency, .*, sent"):
        GoodputObjectives.model_validate({"scope": "steady"})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        GoodputObjectives.model_validate({"send_lag": "1s"})  # registered, but not for goodput
    with pytest.raises(ValidationError, match="later: extra inputs are not permitted"):
        GoodputObjectives.model_validate({"later": {"send_lag": 1.0}})  # the bounds' own slot is not the user's


def test_summarize_metrics_json_and_the_report_carry_a_registered_metric(sent, tmp_path):
    s = summarize(_records(), [PhasePlan(index=0, name="steady", start=0.0, end=3.0, concurrency=1)], [], 3.0)
    got = s["overall"]["metrics"]["sent"]
    assert got["n"] == 4 and got["max"] == 2.0 and got["percentiles"]["p50"]["value"] == 1.0
    rows = {r["label"]: r for r in percentile_table(Summary.model_validate(s).overall, "target", "overall")}
    assert list(rows) == ["latency", "service time", "send lag (generator)", "sent (test)"]  # last: registered last
    cells = rows["sent (test)"]["cells"]  # n, mean, p50..p99.9, max, in milliseconds
    assert [c.text for c in cells] == ["4", "1,250", "1,000", "2,000", "2,000", "2,000", "2,000", "2,000"]
    assert cells[-1].src == "overall/metrics/sent/max"
    rd = RunDir.create(tmp_path, "registry")
    rd.write_metric_definitions()
    written = json.loads((rd.path / METRICS).read_text())["metrics"]
    assert written["sent"] == {"unit": "s", "definition": SENT.definition}
    assert written["ttfat"]["unit"] == "s" and list(written)[:3] == ["latency", "ttft", "ttfat"]


def test_watch_serves_a_registered_metric_as_a_histogram(sent):
    ex = WatchExporter("s", 60.0)
    ex.add_target("a", [], 2.0, lambda: 3.0)
    ex.observe("a", _records().to_batches()[0])
    text = ex.render().decode()
    assert "# HELP latbench_sent_seconds When each successful request left." in text
    assert re.search(r'latbench_sent_seconds_count\{[^}]*target="a"[^}]*\} 4\.0', text)
    assert re.search(r'latbench_sent_seconds_sum\{[^}]*\} 5\.0', text)


def test_the_doc_table_lists_a_registered_metric(sent):
    assert "| sent | s | sent: when the request left (test only) | `.stat` | yes |" in doc_table().splitlines()


def test_a_metric_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        metric_registry.register(Metric("ttfat", "s", "again"))
    with pytest.raises(ValueError, match="a duration SLO needs a distribution"):
        metric_registry.register(Metric("x_rate", "fraction", "x", slo="duration"))
