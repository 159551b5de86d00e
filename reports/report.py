"""One run's HTML report: loads the RunDir, builds the model and figures, renders report.html."""

from __future__ import annotations

from pathlib import Path

from loadgen.records.rundir import write_text
from reports import model
from reports.figures import overview_figures, target_figures
from reports.html import render
from reports.loader import RunData


def target_section(td, i: int) -> dict:
    s = td.summary
    sec = {"name": td.name, "anchor": f"target-{i}", "info": model.target_info(td), "ran": s is not None,
           "notes": list((s or {}).get("notes") or []),
           "complete": bool(s and s.get("complete", True)) and not td.recomputed}
    if s is None:
        return sec | {"scopes": [], "throughput": [], "error_scopes": [], "errors": [], "figures": []}
    sec["scopes"] = [{"label": label, "recorded": rec, "rows": model.percentile_table(s, td.name, prefix)}
                     for label, prefix, rec in model.scopes(s)]
    sec["throughput"] = model.throughput_rows(s, td.name)
    sec["error_scopes"], sec["errors"] = model.error_rows(s, td.name)
    sec["figures"] = target_figures(td)
    if td.unreadable:  # found while the figures read the records
        sec["notes"].append(td.unreadable)
    return sec


def run_context(run: RunData) -> dict:
    """Everything report.html shows, computed; the template only lays it out."""
    labelled = [(td.name, td) for td in run.targets]
    return {
        "title": f"latbench · {run.name}",
        "scenario": run.name,
        "header": model.header(run),
        "verdict": model.verdict(run),
        "slos": model.slo_rows(run.targets),
        "comparison": model.comparison([(td.name, td.summary) for td in run.targets]),
        "overview": overview_figures(labelled),
        "targets": [target_section(td, i) for i, td in enumerate(run.targets)],
        "pcts": model.PCTS,
        "throughput_cols": [c[2] for c in model.THROUGHPUT],
    }


def render_run(run: RunData) -> str:
    return render("report.html", **run_context(run))


def write_report(run: RunData, out: Path) -> Path:
    """report.html of ``run`` at ``out``: atomically, through the redaction every written byte takes."""
    return write_text(out, render_run(run))
