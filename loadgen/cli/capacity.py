"""``latbench capacity``: the highest rate the scenario's target sustains under its objectives.

One idea at several stages, capacity planning, so one file name: :mod:`loadgen.run.capacity` (the search),
:mod:`loadgen.analysis.capacity` (the judgement), :mod:`reports.capacity` (the report).
"""

from __future__ import annotations

import sys

import click

import reports  # lazy (PEP 562): loads when the report is written
from loadgen.analysis.capacity import headline, step_objectives
from loadgen.analysis.repeated import spread_headline
from loadgen.cli.checks import load_or_exit
from loadgen.cli.common import console, exits_on_errors, fraction_option, redact_output, reset_option
from loadgen.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from loadgen.records.results import Capacity
from loadgen.run.capacity import run_capacity
from loadgen.run.repeated_capacity import run_capacity_repeated
from loadgen.run.signals import install_signal_handlers
from loadgen.scenario.slo import parse_slo
from loadgen.scenario.urls import on_loopback
from loadgen.units import parse_duration


@click.command(help="Find the highest QPS the scenario's target sustains under the SLOs (stepping, then bisecting).\n\n"
                    "Exit 0 when a rate passed (and, with expected_qps, the headroom is not negative), 1 otherwise, "
                    "2 on usage errors, 3 when the target does not start, cannot be reached or the search was "
                    "interrupted.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--slo", "slos", multiple=True, metavar="EXPR",
              help="objective(s) each step must meet; default: the scenario's slo")
@click.option("--min", "qps_min", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="first rate tried (req/s)")
@click.option("--max", "qps_max", default=None, type=click.FloatRange(min=0, min_open=True),
              help="highest rate tried (req/s); default 2000 for loopback targets, required for any other")
@click.option("--step-duration", default="10s", show_default=True, help="measured length of each step")
@click.option("--warmup", default="2s", show_default=True, help="unrecorded warm-up before each step")
@click.option("--tolerance", default="10%", show_default=True, help="stop bisecting when the bracket is this narrow")
@click.option("--target", "target_url", metavar="URL", help="search this base URL instead of the scenario's target")
@click.option("--out", metavar="DIR", help="parent folder of the RunDir (default: runs/)")
@click.option("--repeat", "repeat_runs", default=1, show_default=True, type=click.IntRange(1, 100), metavar="N",
              help="search N times, each from a fresh start of a managed target; report each bracket and their spread")
@click.option("--pause", default="0s", show_default=True, help="wait between repeated searches")
@click.option("--no-preflight", is_flag=True, help="skip the check of the target before any load (`latbench check`)")
@reset_option
@exits_on_errors
def capacity(scenario, slos, qps_min, qps_max, step_duration, warmup, tolerance, target_url, out, repeat_runs,
             pause, no_preflight, reset) -> None:
    out_console = console()
    loaded = load_or_exit(scenario)
    if reset is not None:
        loaded = loaded.with_reset(reset)
    loaded.redactor.add_url(target_url)
    redact_output(loaded.redactor)
    try:
        objectives = step_objectives([parse_slo(s) for s in slos] if slos else list(loaded.scenario.slo))
        durations = parse_duration(step_duration), parse_duration(warmup)
        pause_s = parse_duration(pause)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not objectives:
        raise click.UsageError("no objectives: give --slo or an slo list in the scenario")
    target = loaded.scenario.target_list()[0]
    url = target_url or target.url or (target.command.url if target.command else None)
    if qps_max is None:
        if url and not on_loopback(url):
            raise click.UsageError(f"{url} is not on this machine: state the highest rate to aim at it with --max")
        qps_max = 2000.0
    if qps_min > qps_max:
        raise click.UsageError(f"--min {qps_min:g} is above --max {qps_max:g}")
    out_console.print(f"searching {qps_min:g}..{qps_max:g} req/s, {step_duration} steps, objectives: "
                      + "; ".join(o.expr for o in objectives))
    current = {}
    install_signal_handlers(lambda: current.get("engine"), lambda msg: click.echo(msg, err=True))

    def on_step(st) -> None:
        mark = "pass" if st.passed else "unsure" if st.inconclusive else "FAIL"
        p99 = f"{st.latency_p99 * 1e3:.1f} ms" if st.latency_p99 is not None else "-"
        out_console.print(f"  {st.qps:8.4g} req/s  {mark}  achieved {st.achieved_qps:7.1f}  p99 {p99}"
                          + (f"  ({'; '.join(st.reasons)})" if st.reasons else "")
                          + (" -> again, twice as long" if st.inconclusive else ""), highlight=False)

    def report(path) -> None:
        try:
            reports.write_capacity_report(path)
        except Exception as exc:
            out_console.print(f"report not rendered: {type(exc).__name__}: {exc}")

    def on_search(k: int, path, res: Capacity) -> None:
        report(path)
        out_console.print(f"search {k} of {repeat_runs}: {headline(res)}", highlight=False)

    tol = fraction_option(tolerance, "--tolerance")
    if repeat_runs > 1:
        rd, result = run_capacity_repeated(loaded, objectives, qps_min, qps_max, durations[0], durations[1], tol,
                                           out, target_url, on_engine=lambda e: current.update(engine=e),
                                           on_step=on_step, repeat=repeat_runs, pause=pause_s, on_search=on_search,
                                           preflight=not no_preflight)
        text = spread_headline(result)
    else:
        rd, result = run_capacity(loaded, objectives, qps_min, qps_max, durations[0], durations[1], tol, out,
                                  target_url, on_engine=lambda e: current.update(engine=e), on_step=on_step,
                                  preflight=not no_preflight)
        text = headline(result)
    report(rd.path)
    out_console.print(f"capacity: {text}", style="bold")
    out_console.print(f"RunDir: {rd.path}   report: {rd.path / 'report.html'}", highlight=False)
    if result.unreachable or not result.complete:
        why = ("the target could not be reached" if result.unreachable else
               result.invalid_reason or "it was interrupted")
        out_console.print(f"the search is invalid: {why}", style="bold yellow")
        sys.exit(EXIT_INVALID)
    ok = result.max_sustainable_qps is not None and (result.headroom is None or result.headroom >= 0)
    sys.exit(EXIT_OK if ok else EXIT_FAILED)
