"""``latbench validate`` and ``latbench schema``: scenario files, checked or described; nothing is sent."""

from __future__ import annotations

import json
import sys

import click

from loadgen.cli.checks import load_checked
from loadgen.cli.common import print_errors
from loadgen.errors import EXIT_OK, EXIT_USAGE, ScenarioError
from loadgen.scenario.loader import scenario_schema


@click.command(help="Check scenario files; sends nothing. Exit 0 when all are valid, 2 otherwise.")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate(files) -> None:
    bad = 0
    for f in files:
        try:
            load_checked(f)  # ${ENV} references are checked against the real environment
            click.echo(f"{f}: ok")
        except ScenarioError as exc:
            bad += 1
            print_errors(exc)
    sys.exit(EXIT_USAGE if bad else EXIT_OK)


@click.command(help="Print the JSON Schema of a scenario file (for editor completion).")
def schema() -> None:
    click.echo(json.dumps(scenario_schema(), indent=2))
