"""Reports: a RunDir in, HTML / Markdown / JUnit out. Reads files only; never sends a request.

    from reports import write_outputs
    write_outputs("runs/2026-12-02T10-31-07_burst")   # report.html, summary.md, junit.xml

Heavy imports (pandas, matplotlib, jinja2) happen inside the functions, not at import.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_outputs", "write_capacity_report", "load_rundir", "render_report", "RunDirError"]


def write_capacity_report(rundir_path) -> Path:
    """report.html of a ``latbench capacity`` RunDir: the curve, the bracket, the knee, the headroom."""
    from reports.capacity import write_capacity_report as _write

    return _write(rundir_path)


def load_rundir(path):
    """The RunDir at ``path`` loaded (see :mod:`reports.loader`)."""
    from reports.loader import load_rundir as _load

    return _load(path)


def render_report(path) -> str:
    """report.html of the RunDir at ``path``, as a string."""
    from reports.report import render_run

    return render_run(load_rundir(path))


def write_outputs(rundir_path) -> list[Path]:
    """Write report.html, summary.md and junit.xml into the RunDir, from its files alone; return their paths.

    Works for interrupted runs (meta.json ``complete: false``) and for targets left with only the
    partial record stream: their summaries are recomputed and the report is marked incomplete.
    """
    from reports.junit import write_junit
    from reports.markdown import write_markdown
    from reports.report import write_report

    run = load_rundir(rundir_path)
    p = Path(rundir_path)
    return [write_report(run, p / "report.html"), write_markdown(run, p / "summary.md"), write_junit(run, p / "junit.xml")]


def __getattr__(name):
    if name == "RunDirError":
        from reports.loader import RunDirError

        return RunDirError
    raise AttributeError(name)
