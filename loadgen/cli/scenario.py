"""``latbench validate`` and ``latbench schema``: scenario files, checked or described, and the JSON Schemas of
a RunDir's result files; nothing is sent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from loadgen.cli.checks import load_checked
from loadgen.cli.common import print_errors
from loadgen.errors import EXIT_OK, EXIT_USAGE, ScenarioError
from loadgen.records.results import result_schemas, schema_file
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


@click.command(help="Print the JSON Schema of a scenario file (for editor completion), or with --results those "
                    "of a RunDir's result files (summary.json, meta.json...), by file name.")
@click.option("--results", is_flag=True, help="The result files' schemas, not the scenario's.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="With --results: write each schema to DIR/<file>.schema.json (as schemas/ holds them).")
def schema(results: bool, out: str | None) -> None:
    if out is not None and not results:
        raise click.UsageError("--out writes the result files' schemas: give --results too")
    if not results:
        click.echo(json.dumps(scenario_schema(), indent=2))
    elif out is None:
        click.echo(json.dumps(result_schemas(), indent=2))
    else:
        Path(out).mkdir(parents=True, exist_ok=True)
        for name, text in schema_texts().items():
            (Path(out) / schema_file(name)).write_text(text, encoding="utf-8")
            click.echo(Path(out) / schema_file(name))


def schema_texts() -> dict[str, str]:
    """Each result file's schema as schemas/ holds it: indented JSON, keys in the models' order, a final newline."""
    return {name: json.dumps(s, indent=2) + "\n" for name, s in result_schemas().items()}
