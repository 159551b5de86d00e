"""Reports of repeated runs, from synthetic RunDirs with known numbers: every number shown from repeats.json
equals the file's, the objectives are shown as the verdict judged them (per target, over its runs), per-run
dots sit beside the side-by-side numbers, and `compare` takes a repeated target as one entry."""

import json
import xml.etree.ElementTree as ET

from benchmarks.report_speed import synthetic_repeated_rundir, synthetic_rundir
from reports import fmt, write_outputs
from reports.compare import compare_context, entries_of
from reports.html import render
from reports.report_model import get
from reports.strips import REPEATS_SRC, WIDTH, strips_for
from tests.helpers import parse

SLOS = ("latency.p99 < 300ms", "latency.p50 < 100ms @upper", "error_rate < 5%")


def check_cells(page, root):
    """Every cell that points into repeats.json shows that value, formatted by its kind."""
    rep = json.loads((root / "repeats.json").read_text())
    cells = [c for c in page.cells if c["src"].startswith(REPEATS_SRC)]
    for c in cells:
        v = get(rep, c["src"][len(REPEATS_SRC):])
        kind = c["fmt"]
        assert c["text"] == (fmt.ci(v, kind[3:] or "ms") if kind.startswith("ci") else fmt.fmt(v, kind)), c
    return cells


def test_report_of_a_repeated_run(tmp_path):
    root = synthetic_repeated_rundir(tmp_path / "r", {"naive": [0.2, 0.25, 0.22], "optimized": [0.05, 0.06, 0.048]},
                                     rows=1200, slos=SLOS)
    write_outputs(root)
    page = parse(root / "report.html")
    assert {"headline", "between", "fig-run-to-run", "slo", "comparison"} <= page.ids
    cells = check_cells(page, root)
    srcs = {c["src"] for c in cells}
    for group in ("naive", "optimized"):
        for k in range(3):
            assert f"{REPEATS_SRC}targets/{group}/stats/latency.p99/values/{k}" in srcs
        assert f"{REPEATS_SRC}targets/{group}/stats/latency.p99/median" in srcs  # the side-by-side table
        assert f"{REPEATS_SRC}targets/{group}/slo/1/value" in srcs  # the objective as judged
        assert f"{REPEATS_SRC}targets/{group}/stats/latency.p99/ci" in srcs  # the headline's interval
    raw = (root / "report.html").read_text()
    assert raw.count('class="strip"') >= 2 * 18 + 2 * 6  # a strip per statistic and per side-by-side cell
    text = " ".join(page.text)
    # the verdict counts objectives per target over its runs: 3 objectives x 2 targets
    assert "of 6 objectives missed" in text and "the median of 3 runs" in text
    assert "naive-rep1: latency" not in text  # no run is judged alone
    junit = ET.parse(root / "junit.xml").getroot()
    assert junit.get("tests") == "6" and [s.get("name").split(" / ")[1] for s in junit] == ["naive", "optimized"]
    md = (root / "summary.md").read_text()
    assert "**Result over 3 runs.**" in md and "| naive | `latency.p99 < 300ms` |" in md
    assert "the upper bound of the between-run 95% interval" in md


def test_compare_takes_a_repeated_target_as_one_entry_with_its_runs_as_dots(tmp_path):
    before = synthetic_repeated_rundir(tmp_path / "b", {"api": [0.1, 0.11, 0.09]}, rows=800, slos=SLOS)
    after = synthetic_repeated_rundir(tmp_path / "a", {"api": [0.05, 0.055, 0.045]}, rows=800, slos=SLOS, seed=5)
    single = synthetic_rundir(tmp_path / "s", 800, targets=(("api", 0.07),), slos=SLOS)
    entries = entries_of([f"{before}:before", f"{after}:after", f"{single}:single"])
    assert [e.label for e in entries] == ["before", "after", "single"]
    assert [len(e.runs or []) for e in entries] == [3, 3, 0] and entries[2].repeat is None
    assert [e.group for e in entries[:2]] == ["api", "api"]  # its name in repeats.json
    ctx = compare_context(entries)
    rows = ctx["comparison"]["rows"]
    for c in rows[1]["cells"][:3]:  # against the between-run intervals of both
        assert c.note.startswith("2.0x lower (interval [") and c.note.endswith("x])"), c.note
    assert all(c.dots is not None and len(c.dots.dots) == 3 for r in rows[:2] for c in r["cells"][:3])
    assert all(c.dots is None for c in rows[2]["cells"])
    met = sum(r["passed"] for r in json.loads((before / "repeats.json").read_text())["targets"]["api"]["slo"])
    assert ctx["entries"][0]["label"] == "before (3 runs)" and ctx["entries"][0]["slo"] == f"{met}/3 met"
    out = tmp_path / "compare.html"
    out.write_text(render("compare.html", **ctx))
    page = parse(out)
    reps = {"before": before, "after": after}
    for c in page.cells:
        if c["src"].startswith(REPEATS_SRC):
            rep = json.loads((reps[c["target"]] / "repeats.json").read_text())
            assert c["text"] == fmt.fmt(get(rep, c["src"][len(REPEATS_SRC):]), c["fmt"]), c


def test_strips_share_one_scale_per_column():
    a, b, empty = strips_for([[0.1, 0.2, 0.4], [0.4], [None]], [[0.05, 0.8], None, None])
    assert empty is None and b.mid is None and b.dots == [a.dots[2]]  # one scale: 0.4 at one place
    assert a.band[0] == 4 and a.band[0] + a.band[1] == WIDTH - 4  # the band spans the whole range here
    assert a.dots[0] < a.mid < a.dots[2] and a.dots[1] == a.mid  # log scale: 0.2 halfway between 0.1 and 0.4
    assert a.dots[1] - a.dots[0] == a.dots[2] - a.dots[1]
