"""``latbench report`` and ``latbench compare``: RunDirs rendered again, from their files alone (nothing is sent).

Exit codes (:func:`~loadgen.cli.common.exits_on_errors`): 0 written; 2 a path that is not a readable RunDir, or
an output folder that does not exist; 3 the output could not be written (a full disk: no partial file is left).
"""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.common import exits_on_errors
from loadgen.errors import UsageError
from reports.compare import write_compare
from reports.outputs import write_outputs
from reports.run_report import write_report
from reports.rundir_loader import load_rundir


def _output(path: str, option: str = "-o") -> Path:
    """``-o FILE`` whose folder exists (a usage error, exit 2, otherwise)."""
    out = Path(path)
    if not out.parent.is_dir():
        raise UsageError(f"{option} {path}: the folder {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    return out


@click.command(help="Render a RunDir's report again from its files alone (sends nothing): report.html, "
                    "summary.md and junit.xml in the RunDir, or only the HTML to -o FILE.")
@click.argument("rundir", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), help="write the HTML report here instead")
@exits_on_errors
def report(rundir: str, output: str | None) -> None:
    if output:
        out = _output(output)
        paths = [write_report(load_rundir(rundir), out)]
    else:
        paths = write_outputs(rundir)
    for p in paths:
        click.echo(str(p))


@click.command(help="Put runs, or the targets of one multi-target run, side by side in one HTML file. "
                    "Each argument is RUNDIR or RUNDIR:label; ratios are against the first.")
@click.argument("rundirs", nargs=-1, required=True)
@click.option("-o", "--output", "output", default="compare.html", show_default=True, type=click.Path(dir_okay=False))
@exits_on_errors
def compare(rundirs: tuple[str, ...], output: str) -> None:
    click.echo(str(write_compare(list(rundirs), _output(output))))
