"""Reports of synthetic RunDirs with known numbers (built as a run builds them: RecordWriter + summarize):
an interrupted run, a target left with only its partial record stream, a target that never ran, and
comparisons with exact ratios."""

import json
import xml.etree.ElementTree as ET

import click
from click.testing import CliRunner

from benchmarks.report_speed import synthetic_rundir
from loadgen.analysis.metrics import summarize
from loadgen.cli.report import compare
from loadgen.records.schema import read_records
from loadgen.scenario.model import Load
from loadgen.scenario.slo import parse_slo
from loadgen.schedule.arrivals import plan_phases
from reports import fmt, load_rundir, write_outputs
from reports.compare import entries_of, parse_spec
from reports.headline import architectures_data
from reports.report_model import comparison, get
from tests.helpers import formatted, parse


def test_interrupted_run_with_a_partial_target_renders_marked_incomplete(tmp_path):
    path = synthetic_rundir(tmp_path / "run", 3000, targets=(("a", 0.05), ("b", 0.1)), complete=False, partial=("b",))
    assert (path / "b" / "requests.parquet.partial").exists() and not (path / "b" / "summary.json").exists()
    assert "${SYNTH_URL}" in (path / "scenario.yaml").read_text()  # placeholders stay unexpanded
    write_outputs(path)
    page = parse(path / "report.html")
    text = " ".join(page.text)
    assert "INCOMPLETE RUN" in text and "INVALID" in text and "b: summary recomputed" in text
    assert {"verdict", "slo", "target-0", "target-1", "fig-cdf", "fig-timeseries"} <= page.ids
    # the recomputed numbers are those of summarize() over the partial stream and the scenario's phases
    sc = json.loads(json.dumps(__import__("yaml").safe_load((path / "scenario.yaml").read_text())))
    plans = plan_phases(Load.model_validate(sc["load"], context={"expected_qps": None}))
    expected = summarize(read_records(path / "b" / "requests.parquet"), plans, [parse_slo(s) for s in sc["slo"]], 10.0)
    b_cells = [c for c in page.cells if c["target"] == "b" and not c["src"].startswith("slo/")]
    assert len(b_cells) > 50
    for c in b_cells:
        v = get(expected, c["src"])
        assert c["text"] == (fmt.ci(v) if c["fmt"] == "ci" else fmt.fmt(v, c["fmt"])), c
    assert 2200 < get(expected, "overall/count") < 2600  # 8 of 10 s recorded
    root = ET.parse(path / "junit.xml").getroot()
    assert root.get("tests") == "4"  # two objectives for each target, b's from the recomputed summary
    assert "INCOMPLETE" in (path / "summary.md").read_text()


def test_a_target_that_never_ran(tmp_path):
    path = synthetic_rundir(tmp_path / "run", 500, targets=(("a", 0.05),), complete=False)
    meta = json.loads((path / "meta.json").read_text())
    meta["targets"].append({"name": "<b>never</b>", "dir": "never"})
    (path / "meta.json").write_text(json.dumps(meta))
    write_outputs(path)
    raw = (path / "report.html").read_text()
    assert "&lt;b&gt;never&lt;/b&gt;: no records: this target did not run" in raw and "<b>never" not in raw
    assert "did not run" in (path / "summary.md").read_text()


def test_compare_two_rundirs_computes_the_ratios(tmp_path):
    naive = synthetic_rundir(tmp_path / "naive", 4000, name="arch", targets=(("ref", 0.2),), error_rate=0.0)
    opt = synthetic_rundir(tmp_path / "opt", 4000, name="arch", targets=(("ref", 0.05),), error_rate=0.0)
    entries = entries_of([f"{naive}:naive", f"{opt}:optimized"])
    assert [e.label for e in entries] == ["naive", "optimized"]
    cmp = comparison([(e.label, e.target.result) for e in entries])
    assert [c.note for c in cmp["rows"][0]["cells"]] == [""] * 7  # the baseline of the ratios
    notes = [c.note for c in cmp["rows"][1]["cells"]]  # same random draws, latencies scaled by 4 exactly
    # a mean has no interval: said so; each percentile's ratio has one (4,000 requests); TTFT counts the send lag
    # too, which is not scaled: at p50 it shows (3.94x)
    assert notes[0] == "4.0x lower (no interval: a mean has none here)"
    for note, factor in zip(notes[1:5], ("4.0x", "4.0x", "3.9x", "4.0x")):
        assert note.startswith(f"{factor} lower (interval [") and note.endswith("x])"), note
    assert notes[5:] == ["", ""]  # a rate and an error rate: shown, no ratio claimed
    g = click.Group()
    g.add_command(compare)
    out = tmp_path / "compare.html"
    r = CliRunner().invoke(g, ["compare", f"{naive}:naive", f"{opt}:optimized", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = parse(out)
    text = " ".join(page.text)
    assert notes[2] in text and {"comparison", "fig-cdf", "fig-overlay"} <= page.ids
    assert "Runs compared: naive vs optimized" in text  # two RunDirs: runs, from their metadata
    sums = {"naive": entries[0].target.summary, "optimized": entries[1].target.summary,
            "@architectures": architectures_data([(e.label, e.target) for e in entries])}
    for c in page.cells:
        assert c["text"] == formatted(get(sums[c["target"]], c["src"]), c["fmt"]), c
    words = "".join(page.text)
    assert "naive: mean" in words and "p99 4.0x lower than naive's (interval [" in words  # the article's sentence
    # unlabelled RunDirs whose targets share a name are told apart by their folders
    assert [e.label for e in entries_of([str(naive), str(opt)])] == ["naive/ref", "opt/ref"]
    assert parse_spec("runs/x:lbl") == ("runs/x", "lbl") and parse_spec(str(naive)) == (str(naive), None)


def test_loader_reads_meta_and_targets(tmp_path):
    path = synthetic_rundir(tmp_path / "r", 300, targets=(("x", 0.01), ("y", 0.02)))
    run = load_rundir(path)
    assert [t.name for t in run.targets] == ["x", "y"] and run.complete and not run.targets[0].recomputed
    assert len(run.targets[0].frame()) == 300 and "latency" in run.targets[0].frame()


def test_control_characters_in_names_leave_junit_parsing_and_summary_escaped(tmp_path):
    """Issue 27, item 13: a scenario name holding ESC and BEL (a RunDir written before names were checked) went
    raw into junit.xml, which no longer parsed, and into summary.md."""
    path = synthetic_rundir(tmp_path / "run", 300, name="evil\x1b]0;title\x07", targets=(("t\x1b[2Kx", 0.05),))
    meta = json.loads((path / "meta.json").read_text())
    meta["scenario"] = "evil\x1b]0;title\x07\x00"
    (path / "meta.json").write_text(json.dumps(meta))
    write_outputs(path, html=False)
    root = ET.parse(path / "junit.xml").getroot()  # parses
    assert root.get("name") == "latbench: evil\\x1b]0;title\\x07\\x00"
    assert {s.get("name") for s in root} == {"evil\\x1b]0;title\\x07\\x00 / t\\x1b[2Kx"}
    md = (path / "summary.md").read_text()
    assert not any(c in md for c in "\x1b\x07\x00")
    assert "evil\\x1b]0;title\\x07\\x00" in md and "t\\x1b[2Kx" in md
