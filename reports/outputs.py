"""All of a run's outputs from its RunDir alone: report.html, summary.md, junit.xml."""

from __future__ import annotations

from pathlib import Path

from reports.junit import write_junit
from reports.markdown import write_markdown
from reports.run_report import render_run, write_report
from reports.rundir_loader import load_rundir


def write_outputs(rundir_path, html: bool = True) -> list[Path]:
    """Write report.html (unless not ``html``), summary.md and junit.xml into the RunDir, from its files alone;
    return their paths.

    Works for interrupted runs (meta.json ``complete: false``) and for targets left with only the
    partial record stream: their summaries are recomputed and the report is marked incomplete.
    """
    run = load_rundir(rundir_path)
    p = Path(rundir_path)
    written = [write_report(run, p / "report.html")] if html else []
    return written + [write_markdown(run, p / "summary.md"), write_junit(run, p / "junit.xml")]


def render_report(path) -> str:
    """report.html of the RunDir at ``path``, as a string."""
    return render_run(load_rundir(path))
