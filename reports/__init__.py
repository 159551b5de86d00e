"""Reports: a RunDir in, HTML / Markdown / JUnit out. Reads files only; never sends a request.

    from reports import write_outputs
    write_outputs("runs/2026-12-02T10-31-07_burst")   # report.html, summary.md, junit.xml

The public names are imported lazily (PEP 562): pandas and jinja2 load on first use.
"""

from __future__ import annotations

import importlib

from reports.html import environment  # light: jinja2 loads when an environment is made

_EXPORTS = {
    "write_outputs": "reports.outputs",
    "render_report": "reports.outputs",
    "write_capacity_report": "reports.capacity",
    "load_rundir": "reports.rundir_loader",
    "write_compare": "reports.compare",
    "RunDirError": "loadgen.errors",
}

__all__ = [
    "RunDirError",
    "load_rundir",
    "render_report",
    "write_capacity_report",
    "write_compare",
    "write_outputs",
]


# what rendering a report imports: pandas, numpy, jinja2 (its figures are latbench's own SVG: reports.svg)
RENDERING_MODULES = ("reports.outputs", "reports.run_report", "jinja2")


def preload() -> None:
    """Import now what writing a report needs (pandas, jinja2, the templates compiled). ``latbench run`` calls it
    before any load: a run stopped early (its server died, Ctrl-C) then reports within a second of the stop, and the
    import's CPU never overlaps a measurement."""
    for module in RENDERING_MODULES:
        importlib.import_module(module)
    environment().get_template("report.html")  # compiled once, here


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reports' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
