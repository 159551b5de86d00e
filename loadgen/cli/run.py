"""``latbench run`` and ``latbench gate``: send a scenario's load and judge it, or judge a RunDir again."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path

import click
from rich.console import Console

import reports  # lazy (PEP 562): jinja2 and the figures load when the report is written, after the run
from loadgen.cli.checks import load_or_exit
from loadgen.cli.common import (
    EXIT_CODES,
    console,
    exits_on_errors,
    fraction_option,
    print_reasons,
    redact_output,
    reset_option,
)
from loadgen.cli.display import StatusDisplay, outcomes_line, summary_table, tokens_line
from loadgen.cli.repeated import between_table
from loadgen.engine.options import EngineOptions
from loadgen.errors import RunDirWriteError
from loadgen.run.gate import gate_rundir
from loadgen.run.runner import RunResult, run_scenario
from loadgen.run.signals import install_signal_handlers
from loadgen.units import parse_duration


@click.command(help="Run a scenario: send its load, record every request, write a RunDir, check its SLOs.\n\n"
                    + EXIT_CODES)
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--target", "target_url", metavar="URL",
              help="run against this base URL instead of the scenario's target(s)")
@click.option("--out", metavar="DIR", help="parent folder of the RunDir (default: runs/)")
@click.option("--quiet", is_flag=True, help="no live status line")
@click.option("--no-report", is_flag=True,
              help="write no report.html (summary.md, junit.xml and the RunDir as always; `latbench report RUNDIR` "
                   "renders it later): saves a CI job the half second or so its charts take")
@click.option("--fail-fast", is_flag=True, help="stop as soon as an SLO can no longer be met (exit 1)")
@click.option("--baseline", metavar="RUNDIR", type=click.Path(file_okay=False),
              help="fail on a significant regression against this run")
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT",
              help="allowed worsening of a percentile before it counts")
@click.option("--capacity", "capacity", metavar="RUNDIR", type=click.Path(file_okay=False),
              help="a `latbench capacity` RunDir of the same target: the headroom headline says how far from its knee")
@click.option("--engine", type=click.Choice(["native", "locust"]), default="native", show_default=True,
              help="native: one asyncio process; locust: Locust's master/worker runners (scales past one machine)")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="locust: local worker processes")
@click.option("--expect-workers", default=0, show_default=True, type=click.IntRange(0, 10000),
              help="locust: also wait for this many workers from other hosts (`latbench worker --master HOST:PORT`)")
@click.option("--master-bind", default="127.0.0.1", show_default=True, metavar="HOST[:PORT]",
              help="locust: where the master listens")
@click.option("--processes", default=0, type=click.IntRange(0, 64), metavar="N",
              help="native: generator processes [default: 1 when the target runs on this machine, else cores - 1]")
@click.option("--repeat", "repeat_runs", type=click.IntRange(1, 100), metavar="N",
              help="run the scenario N times (each from a fresh managed server, interleaved across targets) and "
                   "judge the SLOs and --baseline on the runs together [default: the scenario's repeat.runs, 1]")
@click.option("--pause", metavar="DURATION", help="wait between repeated runs, e.g. 5s [default: repeat.pause]")
@click.option("--no-preflight", is_flag=True,
              help="skip the check of each target before its load (a model list and one minimal request; "
                   "`latbench check` runs it alone): the summary says it was skipped")
@reset_option
@exits_on_errors
def run(scenario: str, target_url: str | None, out: str | None, quiet: bool, no_report: bool, fail_fast: bool,
        baseline: str | None, max_regression: str, capacity: str | None, engine: str, workers: int,
        expect_workers: int, master_bind: str, processes: int, repeat_runs: int | None, pause: str | None,
        no_preflight: bool, reset: str | None) -> None:
    out_console = console()
    allowance = fraction_option(max_regression, "--max-regression")
    try:
        pause_s = None if pause is None else parse_duration(pause)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pause") from None
    if capacity is not None and not (Path(capacity) / "capacity.json").is_file():
        raise click.BadParameter(f"{capacity} is not a capacity RunDir (no capacity.json)", param_hint="--capacity")
    loaded = load_or_exit(scenario)
    if reset is not None:
        loaded = loaded.with_reset(reset)
    repeat = loaded.scenario.repeat.model_copy(update={k: v for k, v in (("runs", repeat_runs), ("pause", pause_s))
                                                       if v is not None})
    loaded.redactor.add_url(target_url)
    redact_output(loaded.redactor)
    display = StatusDisplay(out_console)
    current = {}
    if engine == "locust" and fail_fast:
        raise click.UsageError("--fail-fast is only available with the native engine")

    last = [-10.0]

    def on_progress(p: dict) -> None:
        if not quiet and p.get("t", 0) - last[0] >= 5.0:
            last[0] = p.get("t", 0)
            out_console.print(f"{p.get('t', 0):6.1f}s  sent {p.get('sent', 0)}  records {p.get('records', 0)}  "
                              f"in-flight {p.get('in_flight', 0)}  errors {p.get('errors', 0)}  "
                              f"workers {p.get('workers', 0)}/{p.get('of', 0)}")

    opts = EngineOptions(engine, workers, expect_workers or None, master_bind, on_progress, processes)

    def on_engine(control) -> None:
        current["engine"] = control
        if not quiet:
            display.attach(control)

    install_signal_handlers(lambda: current.get("engine"), display.say)
    if not no_report:  # before the load, not after it: a run stopped early still reports at once
        reports.preload()
    try:
        result = run_scenario(loaded, out=out, target_url=target_url, on_engine=on_engine, fail_fast=fail_fast,
                              baseline=baseline, max_regression=allowance, opts=opts, capacity=capacity,
                              repeat=repeat, preflight=not no_preflight)
    except RunDirWriteError as exc:  # disk full, no permission: the records written so far are kept
        display.close()
        kept = (", records written before it are kept (latbench report RUNDIR renders them once there is space)"
                if exc.records_kept else "")
        click.echo(f"latbench: {exc}; the run stopped{kept}", err=True)
        sys.exit(exc.exit_code)
    finally:
        display.close()
    if result.repeats is not None:  # per target, each run and across the runs, rather than a table per run
        for name, group in (result.repeats.targets or {}).items():
            out_console.print(between_table(name, group))
    for tr in result.targets:
        if tr.summary and result.repeats is None:
            out_console.print(summary_table(tr.name, tr.summary))
            out_console.print(outcomes_line(tr.summary), highlight=False)
            out_console.print(tokens_line(tr.summary), highlight=False)
            for r in tr.summary.recovery or []:
                when = (f"recovered {r.seconds:.1f} s into {r.phase}" if r.recovered
                        else f"not measured: no request was sent in {r.phase}" if r.measured is False
                        else f"did not recover during {r.phase}")
                out_console.print(f"after {r.spike}: rolling p99 (2 s windows) vs {r.threshold * 1e3:g} ms: {when}")
    print_reasons(out_console, result.verdict.outcome, result.reasons)  # before the report: it takes seconds
    # what the run left (modules, records, summaries) lives to the end: the collections that the figures' many
    # short-lived objects set off walk only those (0.1 s of a report's second, measured; see skip_final_collection)
    gc.freeze()
    write_reports(out_console, result.rundir.path, html=not no_report)
    print_rundir(out_console, result)
    sys.exit(result.exit_code)


def write_reports(out: Console, rundir: Path, html: bool = True) -> None:
    """report.html (unless not ``html``), summary.md and junit.xml; a report that fails to render never loses
    the run."""
    try:
        reports.write_outputs(rundir, html=html)
    except Exception as exc:  # the records and summaries are already on disk
        logging.getLogger("latbench").exception("the report could not be rendered")
        out.print(f"report not rendered: {type(exc).__name__}: {exc} (re-render with: latbench report {rundir})")


def print_rundir(out: Console, result: RunResult) -> None:
    html = result.rundir.path / "report.html"
    out.print(f"RunDir: {result.rundir.path}   " + (f"report: {html}" if html.is_file() else
                                                     f"report: none (latbench report {result.rundir.path})"),
              highlight=False)


@click.command(help="The verdict of an existing RunDir, optionally against a baseline RunDir. Sends nothing.\n\n"
                    + EXIT_CODES)
@click.argument("rundir", type=click.Path(exists=True, file_okay=False))
@click.option("--baseline", metavar="RUNDIR", type=click.Path(exists=True, file_okay=False))
@click.option("--max-regression", default="10%", show_default=True, metavar="PCT")
@exits_on_errors
def gate(rundir: str, baseline: str | None, max_regression: str) -> None:
    if not (Path(rundir) / "meta.json").is_file():
        raise click.BadParameter(f"{rundir} is not a RunDir (no meta.json)", param_hint="RUNDIR")
    verdict = gate_rundir(rundir, baseline, fraction_option(max_regression, "--max-regression"))
    print_reasons(console(), verdict.outcome, verdict.texts())
    sys.exit(verdict.exit_code)
