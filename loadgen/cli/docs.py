"""``latbench docs``: write the documentation's reference pages from the code, or serve the docs site locally."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import click

from loadgen.cli.reference import ROOT, write
from loadgen.errors import EXIT_USAGE


@click.command(help="Write the reference pages generated from the code (--generate DIR, as docs/reference holds "
                    "them), or serve the docs site on 127.0.0.1:8000 (--serve; needs pip install -e '.[docs]').")
@click.option("--generate", "out", type=click.Path(file_okay=False), default=None,
              help="write scenario.md, metrics.md, cli.md, rundir.md, exit-codes.md and prometheus.md into DIR")
@click.option("--serve", is_flag=True, help="serve the site with `mkdocs serve`, rebuilt as pages change")
@click.option("--addr", default="127.0.0.1:8000", show_default=True, help="with --serve: the address to serve on")
def docs(out: str | None, serve: bool, addr: str) -> None:
    if (out is None) == (not serve):
        raise click.UsageError("give one of --generate DIR or --serve")
    if out is not None:
        for path in write(Path(out)):
            click.echo(path)
        return
    if importlib.util.find_spec("mkdocs") is None:  # an optional extra: say how to install it
        click.echo("latbench: the docs site needs MkDocs: pip install -e '.[docs]'", err=True)
        sys.exit(EXIT_USAGE)
    if not (ROOT / "mkdocs.yml").is_file():  # an install from a wheel carries no docs/: they live in the checkout
        click.echo(f"latbench: no mkdocs.yml beside {ROOT}: serve the docs from a checkout (pip install -e)", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(subprocess.call([sys.executable, "-m", "mkdocs", "serve", "-f", str(ROOT / "mkdocs.yml"), "-a", addr]))
