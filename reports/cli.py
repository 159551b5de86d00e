"""``latbench report`` and ``latbench compare``: thin click commands over reports' library functions.

``latbench`` loads them by name (``loadgen.cli.main.COMMANDS``).
Exit codes: 0 written; 2 a path is not a readable RunDir.
"""

from __future__ import annotations

import sys

import click

from loadgen.errors import RunDirError
from reports.compare import write_compare
from reports.loader import load_rundir
from reports.outputs import write_outputs
from reports.report import write_report


@click.command(help="Render a RunDir's report again from its files alone (sends nothing): report.html, "
                    "summary.md and junit.xml in the RunDir, or only the HTML to -o FILE.")
@click.argument("rundir", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="write the HTML report here instead")
def report(rundir: str, output: str | None) -> None:
    try:
        if output:
            paths = [write_report(load_rundir(rundir), output)]
        else:
            paths = write_outputs(rundir)
    except RunDirError as exc:
        click.echo(f"latbench report: {exc}", err=True)
        sys.exit(2)
    for p in paths:
        click.echo(str(p))


@click.command(help="Put runs, or the targets of one multi-target run, side by side in one HTML file. "
                    "Each argument is RUNDIR or RUNDIR:label; ratios are against the first.")
@click.argument("rundirs", nargs=-1, required=True)
@click.option("-o", "--output", "output", default="compare.html", show_default=True, type=click.Path(dir_okay=False))
def compare(rundirs: tuple[str, ...], output: str) -> None:
    try:
        path = write_compare(list(rundirs), output)
    except (RunDirError, ValueError) as exc:
        click.echo(f"latbench compare: {exc}", err=True)
        sys.exit(2)
    click.echo(str(path))
