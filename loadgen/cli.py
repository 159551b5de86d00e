"""The ``latbench`` command. Thin: each command parses flags, calls a library function, prints.

Exit codes: 0 pass; 1 an SLO or regression failed; 2 usage or scenario error; 3 the run is invalid
(generator-limited, target unreachable, interrupted/incomplete).
"""

from __future__ import annotations

import json
import logging
import sys

import click
from rich.console import Console

from loadgen import __version__
from loadgen.loader import ScenarioError, load_scenario, scenario_schema

EXIT_CODES = """\b
Exit codes:
  0  every SLO passed
  1  an SLO or a regression check failed
  2  usage or scenario error (nothing was sent)
  3  the run is invalid: generator-limited, target unreachable, or interrupted
"""


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:  # CI logs: wide enough for the summary table
        console = Console(highlight=False, width=160)
    return console


@click.group(help="latbench: latency benchmarking and load testing for AI inference APIs.\n\n" + EXIT_CODES)
@click.version_option(__version__, prog_name="latbench")
@click.option("-v", "--verbose", is_flag=True, help="log every failed request's exception class")
def main(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="latbench: %(message)s")


@main.command(help="Check scenario files; sends nothing. Exit 0 when all are valid, 2 otherwise.")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate(files) -> None:
    bad = 0
    for f in files:
        try:
            load_scenario(f, env=_env_for_validation())
            click.echo(f"{f}: ok")
        except ScenarioError as exc:
            bad += 1
            for line in exc.errors:
                click.echo(line, err=True)
    sys.exit(2 if bad else 0)


def _env_for_validation() -> dict:
    """Validation checks ${ENV} references against the real environment."""
    import os

    return dict(os.environ)


@main.command(help="Print the JSON Schema of a scenario file (for editor completion).")
def schema() -> None:
    click.echo(json.dumps(scenario_schema(), indent=2))


@main.command(help="Run a scenario: send its load, record every request, write a RunDir, check its SLOs.\n\n" + EXIT_CODES)
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--target", "target_url", metavar="URL", help="run against this base URL instead of the scenario's target(s)")
@click.option("--out", metavar="DIR", help="parent folder of the RunDir (default: runs/)")
@click.option("--quiet", is_flag=True, help="no live status line")
def run(scenario: str, target_url: str | None, out: str | None, quiet: bool) -> None:
    from loadgen.display import StatusDisplay, summary_table
    from loadgen.runner import install_signal_handlers, run_scenario

    console = _console()
    try:
        loaded = load_scenario(scenario)
    except ScenarioError as exc:
        for line in exc.errors:
            click.echo(line, err=True)
        sys.exit(2)
    display = StatusDisplay(console)
    current = {}

    def on_engine(engine) -> None:
        current["engine"] = engine
        if not quiet:
            display.attach(engine)

    install_signal_handlers(lambda: current.get("engine"), display.say)
    try:
        result = run_scenario(loaded, out=out, target_url=target_url, on_engine=on_engine)
    finally:
        display.close()
    for tr in result.targets:
        if tr.summary:
            console.print(summary_table(tr.name, tr.summary))
    _print_verdict(console, result)
    sys.exit(result.exit_code)


def _print_verdict(console: Console, result) -> None:
    style = {"passed": "bold green", "failed": "bold red", "invalid": "bold yellow"}[result.verdict]
    console.print(f"verdict: {result.verdict.upper()}", style=style)
    for r in result.reasons:
        console.print(f"  - {r}", highlight=False)
    console.print(f"RunDir: {result.rundir.path}", highlight=False)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
              help="Start the bundled reference inference server (all flags: latbench serve --help).")
@click.pass_context
def serve(ctx) -> None:
    from reference_server.__main__ import main as server_main

    sys.exit(server_main(list(ctx.args)))


if __name__ == "__main__":  # pragma: no cover
    main()
