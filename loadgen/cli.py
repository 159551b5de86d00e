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
from loadgen.records import RunDirWriteError

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
            load_scenario(f)  # ${ENV} references are checked against the real environment
            click.echo(f"{f}: ok")
        except ScenarioError as exc:
            bad += 1
            for line in exc.errors:
                click.echo(line, err=True)
    sys.exit(2 if bad else 0)


def _load_or_exit(path: str):
    """The scenario, or every mistake in it on stderr and exit 2 (nothing was sent)."""
    try:
        return load_scenario(path)
    except ScenarioError as exc:
        for line in exc.errors:
            click.echo(line, err=True)
        sys.exit(2)


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
@click.option("--capacity", "capacity", metavar="RUNDIR", type=click.Path(file_okay=False),
              help="a `latbench capacity` RunDir of the same target: the headroom headline says how far from its knee")
@click.option("--engine", type=click.Choice(["native", "locust"]), default="native", show_default=True,
              help="native: one asyncio process; locust: Locust's master/worker runners (scales past one machine)")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256), help="locust: local worker processes")
@click.option("--expect-workers", default=0, show_default=True, type=click.IntRange(0, 10000),
              help="locust: also wait for this many workers from other hosts (`latbench worker --master HOST:PORT`)")
@click.option("--master-bind", default="127.0.0.1", show_default=True, metavar="HOST[:PORT]", help="locust: where the master listens")
@click.option("--processes", default=0, type=click.IntRange(0, 64), metavar="N",
              help="native: generator processes [default: 1 when the target runs on this machine, else cores - 1]")
def run(scenario: str, target_url: str | None, out: str | None, quiet: bool, fail_fast: bool,
        baseline: str | None, max_regression: str, capacity: str | None, engine: str, workers: int, expect_workers: int,
        master_bind: str, processes: int) -> None:
    from loadgen.display import StatusDisplay, summary_table
    from loadgen.runner import EngineOptions, install_signal_handlers, run_scenario

    console = _console()
    allowance = _fraction_option(max_regression, "--max-regression")
    if baseline is not None and not (Path(baseline) / "meta.json").is_file():
        raise click.BadParameter(f"{baseline} is not a RunDir (no meta.json)", param_hint="--baseline")
    if capacity is not None and not (Path(capacity) / "capacity.json").is_file():
        raise click.BadParameter(f"{capacity} is not a capacity RunDir (no capacity.json)", param_hint="--capacity")
    loaded = _load_or_exit(scenario)
    _scrub_logs(loaded.secrets)
    display = StatusDisplay(console)
    current = {}
    if engine == "locust" and fail_fast:
        raise click.UsageError("--fail-fast is only available with the native engine")

    last = [-10.0]

    def on_progress(p: dict) -> None:
        if not quiet and p.get("t", 0) - last[0] >= 5.0:
            last[0] = p.get("t", 0)
            console.print(f"{p.get('t', 0):6.1f}s  sent {p.get('sent', 0)}  records {p.get('records', 0)}  in-flight "
                          f"{p.get('in_flight', 0)}  errors {p.get('errors', 0)}  workers {p.get('workers', 0)}/{p.get('of', 0)}")

    opts = EngineOptions(engine, workers, expect_workers or None, master_bind, on_progress, processes)

    def on_engine(engine) -> None:
        current["engine"] = engine
        if not quiet:
            display.attach(engine)

    install_signal_handlers(lambda: current.get("engine"), display.say)
    try:
        result = run_scenario(loaded, out=out, target_url=target_url, on_engine=on_engine, fail_fast=fail_fast,
                              baseline=baseline, max_regression=allowance, opts=opts, capacity=capacity)
    except RunDirWriteError as exc:  # disk full, no permission: the records written so far are kept
        display.close()
        click.echo(f"latbench: {exc}; the run stopped, records written before it are kept "
                   "(latbench report RUNDIR renders them once there is space)", err=True)
        sys.exit(3)
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


def _scrub_logs(secrets: list[str]) -> None:
    """Every log line goes through the scenario's secrets scrubber (a URL or a server message may hold one)."""
    from loadgen.rundir import scrub

    class _Scrub(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg, record.args = scrub(record.getMessage(), secrets), None
            if record.exc_info:  # a traceback may quote a URL: render it now, scrubbed
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info), secrets)
                record.exc_info = None
            return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(_Scrub())


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


@main.command(help="Find the highest QPS the scenario's target sustains under the SLOs (stepping, then bisecting).\n\n"
                   "Exit 0 when a rate passed (and, with expected_qps, the headroom is not negative), 1 otherwise, 2 on usage errors.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--slo", "slos", multiple=True, metavar="EXPR", help="objective(s) each step must meet; default: the scenario's slo")
@click.option("--min", "qps_min", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True), help="first rate tried (req/s)")
@click.option("--max", "qps_max", default=None, type=click.FloatRange(min=0, min_open=True),
              help="highest rate tried (req/s); default 2000 for loopback targets, required for any other")
@click.option("--step-duration", default="10s", show_default=True, help="measured length of each step")
@click.option("--warmup", default="2s", show_default=True, help="unrecorded warm-up before each step")
@click.option("--tolerance", default="10%", show_default=True, help="stop bisecting when the bracket is this narrow")
@click.option("--target", "target_url", metavar="URL", help="search this base URL instead of the scenario's target")
@click.option("--out", metavar="DIR", help="parent folder of the RunDir (default: runs/)")
def capacity(scenario, slos, qps_min, qps_max, step_duration, warmup, tolerance, target_url, out) -> None:
    from loadgen.capacity import headline, step_objectives
    from loadgen.runner import _on_loopback, run_capacity
    from loadgen.slo import parse_slo
    from loadgen.units import parse_duration

    console = _console()
    loaded = _load_or_exit(scenario)
    _scrub_logs(loaded.secrets)
    try:
        objectives = step_objectives([parse_slo(s) for s in slos] if slos else list(loaded.scenario.slo))
        durations = parse_duration(step_duration), parse_duration(warmup)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not objectives:
        raise click.UsageError("no objectives: give --slo or an slo list in the scenario")
    target = loaded.scenario.target_list()[0]
    url = target_url or target.url or (target.command.url if target.command else None)
    if qps_max is None:
        if url and not _on_loopback(url):
            raise click.UsageError(f"{url} is not on this machine: state the highest rate to aim at it with --max")
        qps_max = 2000.0
    if qps_min > qps_max:
        raise click.UsageError(f"--min {qps_min:g} is above --max {qps_max:g}")
    console.print(f"searching {qps_min:g}..{qps_max:g} req/s, {step_duration} steps, objectives: "
                  + "; ".join(o.expr for o in objectives))
    display_engine = {}
    install_signal_handlers_for_capacity(display_engine)

    def on_step(st) -> None:
        mark = "pass" if st.passed else "unsure" if st.inconclusive else "FAIL"
        p99 = f"{st.latency_p99 * 1e3:.1f} ms" if st.latency_p99 is not None else "-"
        console.print(f"  {st.qps:8.4g} req/s  {mark}  achieved {st.achieved_qps:7.1f}  p99 {p99}"
                      + (f"  ({'; '.join(st.reasons)})" if st.reasons else "")
                      + (" -> again, twice as long" if st.inconclusive else ""), highlight=False)

    rd, result = run_capacity(loaded, objectives, qps_min, qps_max, durations[0], durations[1],
                              _fraction_option(tolerance, "--tolerance"), out, target_url,
                              on_engine=lambda e: display_engine.update(engine=e), on_step=on_step)
    from reports import write_capacity_report

    try:
        write_capacity_report(rd.path)
    except Exception as exc:
        console.print(f"report not rendered: {type(exc).__name__}: {exc}")
    console.print(f"capacity: {headline(result)}", style="bold")
    console.print(f"RunDir: {rd.path}   report: {rd.path / 'report.html'}", highlight=False)
    ok = result["max_sustainable_qps"] is not None and (result["headroom"] is None or result["headroom"] >= 0)
    sys.exit(0 if ok and result["complete"] else 1)


def install_signal_handlers_for_capacity(holder: dict) -> None:
    from loadgen.runner import install_signal_handlers

    install_signal_handlers(lambda: holder.get("engine"), lambda msg: click.echo(msg, err=True))


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
              help="Start the bundled reference inference server (all flags: latbench serve --help).")
@click.pass_context
def serve(ctx) -> None:
    from reference_server.__main__ import main as server_main

    sys.exit(server_main(list(ctx.args)))


def _register() -> None:
    from loadgen.locust_engine.cli import worker
    from reports.cli import compare, report

    main.add_command(report)
    main.add_command(compare)
    main.add_command(worker)


_register()

if __name__ == "__main__":  # pragma: no cover
    main()
