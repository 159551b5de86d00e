"""The ``latbench`` command. Thin: each command parses flags, calls a library function, prints.

Exit codes: 0 pass; 1 an SLO or regression failed; 2 usage or scenario error; 3 the run is invalid
(generator-limited, target unreachable, interrupted/incomplete).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

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
@click.option("--fail-fast", is_flag=True, help="stop as soon as an SLO can no longer be met (exit 1)")
@click.option("--baseline", metavar="RUNDIR", type=click.Path(file_okay=False), help="fail on a significant regression against this run")
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT", help="allowed worsening of a percentile before it counts")
def run(scenario: str, target_url: str | None, out: str | None, quiet: bool, fail_fast: bool,
        baseline: str | None, max_regression: str) -> None:
    from loadgen.display import StatusDisplay, summary_table
    from loadgen.runner import install_signal_handlers, run_scenario

    console = _console()
    allowance = _fraction_option(max_regression, "--max-regression")
    if baseline is not None and not (Path(baseline) / "meta.json").is_file():
        raise click.BadParameter(f"{baseline} is not a RunDir (no meta.json)", param_hint="--baseline")
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
        result = run_scenario(loaded, out=out, target_url=target_url, on_engine=on_engine, fail_fast=fail_fast,
                              baseline=baseline, max_regression=allowance)
    finally:
        display.close()
    _write_reports(console, result.rundir.path)
    for tr in result.targets:
        if tr.summary:
            console.print(summary_table(tr.name, tr.summary))
            for r in tr.summary.get("recovery", []):
                when = f"recovered {r['seconds']:.1f} s into {r['phase']}" if r["recovered"] else f"did not recover during {r['phase']}"
                console.print(f"after {r['spike']}: rolling p99 (2 s windows) vs {r['threshold'] * 1e3:g} ms: {when}")
    _print_verdict(console, result)
    sys.exit(result.exit_code)


def _write_reports(console: Console, rundir: Path) -> None:
    """report.html, summary.md and junit.xml; a report that fails to render never loses the run."""
    from reports import write_outputs

    try:
        write_outputs(rundir)
    except Exception as exc:  # the records and summaries are already on disk
        logging.getLogger("latbench").exception("the report could not be rendered")
        console.print(f"report not rendered: {type(exc).__name__}: {exc} (re-render with: latbench report {rundir})")


def _print_verdict(console: Console, result) -> None:
    _print_reasons(console, result.verdict, result.reasons)
    console.print(f"RunDir: {result.rundir.path}   report: {result.rundir.path / 'report.html'}", highlight=False)


def _print_reasons(console: Console, verdict: str, reasons: list[str]) -> None:
    style = {"passed": "bold green", "failed": "bold red", "invalid": "bold yellow"}[verdict]
    console.print(f"verdict: {verdict.upper()}", style=style)
    for r in reasons:
        console.print(f"  - {r}", highlight=False)


def _fraction_option(text: str, name: str) -> float:
    try:
        t = text.strip()
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise click.BadParameter(f"expected a percentage such as 10%, got {text!r}", param_hint=name) from None
    if not 0 <= v < 100:
        raise click.BadParameter(f"expected a percentage between 0% and 10000%, got {text!r}", param_hint=name)
    return v


@main.command(help="The verdict of an existing RunDir, optionally against a baseline RunDir. Sends nothing.\n\n" + EXIT_CODES)
@click.argument("rundir", type=click.Path(exists=True, file_okay=False))
@click.option("--baseline", metavar="RUNDIR", type=click.Path(exists=True, file_okay=False))
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT")
def gate(rundir: str, baseline: str | None, max_regression: str) -> None:
    from loadgen.runner import gate_rundir

    if not (Path(rundir) / "meta.json").is_file():
        raise click.BadParameter(f"{rundir} is not a RunDir (no meta.json)", param_hint="RUNDIR")
    try:
        code, verdict, reasons = gate_rundir(rundir, baseline, _fraction_option(max_regression, "--max-regression"))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _print_reasons(_console(), verdict, reasons)
    sys.exit(code)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
              help="Start the bundled reference inference server (all flags: latbench serve --help).")
@click.pass_context
def serve(ctx) -> None:
    from reference_server.__main__ import main as server_main

    sys.exit(server_main(list(ctx.args)))


def _register() -> None:
    from reports.cli import compare, report

    main.add_command(report)
    main.add_command(compare)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
