"""``latbench watch``: keep probing a scenario's targets after the deploy, and serve Prometheus metrics.

One idea at several stages, ``latbench watch``, so one file name: :mod:`loadgen.run.watch` (the probe).
"""

from __future__ import annotations

import math
import sys
import time

import click

from loadgen.cli.checks import load_or_exit
from loadgen.cli.common import console, exits_on_errors, redact_output
from loadgen.errors import EXIT_INVALID, EXIT_OK, RunDirWriteError
from loadgen.run.signals import install_signal_handlers
from loadgen.run.watch import EngineGroup, TargetStatus, WatchSettings, watch_scenario
from loadgen.scenario.slo import show_value
from loadgen.scenario.urls import on_loopback
from loadgen.units import parse_duration

MAX_REMOTE_QPS = 10.0  # a probe, not a load test: more than this at someone else's server needs --force-rate


def _seconds(text: str, name: str, zero: bool = False) -> float:
    try:
        v = parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None
    if v <= 0 and not zero:
        raise click.BadParameter(f"expected a duration above 0, got {text!r}", param_hint=name)
    return v


def status_line(st: TargetStatus) -> str:
    """One target's line: requests so far, errors, and each objective over the window."""
    total = sum(st.requests.values())
    errors = total - st.requests.get("", 0)
    parts = [f"{st.name}: {total} requests, {errors} errors"]
    w = st.window
    if w is not None:
        parts.append(f"window {w.count} requests")
        for s in w.slos:
            mark = "?" if math.isnan(s.holding) else ("ok" if s.holding else "BREACHED")
            value = show_value(None if math.isnan(s.value) else s.value, s.slo.stat, s.slo.metric)
            parts.append(f"{s.slo.expr} [{mark} {value}]")
    return "  ".join(parts)


@click.command(help="Probe the scenario's targets at a low steady rate until stopped (Ctrl-C, SIGTERM or "
                    "--duration) and serve Prometheus metrics: latency, TTFT and TPOT histograms whose buckets "
                    "include the SLO thresholds, requests by outcome, the probe's send lag, and one gauge per SLO "
                    "judged over a sliding window (1 = holding). Records go to a RunDir whose files rotate, so "
                    "disk use stays bounded. A Ctrl-C stops the probe (in-flight requests get the scenario's "
                    "grace) and /metrics stays up for --linger; a Ctrl-C during the linger ends it. SIGTERM stops "
                    "the probe the same way and ends without lingering. Exit 0 after a normal stop, 3 when stopped "
                    "before the probe began (a managed server still starting); a watch is a monitor, not a gate "
                    "(`latbench run` is the gate).")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--qps", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True, max=1000),
              help="probe rate (req/s), open loop; the scenario's phases are not replayed")
@click.option("--metrics-port", default=9464, show_default=True, type=click.IntRange(0, 65535),
              help="port of /metrics (0: a free one, printed)")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="address /metrics listens on (0.0.0.0 to let a Prometheus on another host scrape it)")
@click.option("--window", default="5m", show_default=True, help="the SLO gauges judge the requests of this window")
@click.option("--duration", default=None, help="stop after this long (default: until stopped)")
@click.option("--rotate-every", default="1h", show_default=True, help="start a new records file this often")
@click.option("--keep", default=24, show_default=True, type=click.IntRange(0, 100000),
              help="closed records files kept; older ones are deleted")
@click.option("--target", "target_url", metavar="URL", help="probe this base URL instead of the scenario's target(s)")
@click.option("--out", metavar="DIR", help="parent folder of the RunDir (default: runs/)")
@click.option("--linger", default="0s", show_default=True,
              help="keep serving /metrics this long after the probe stopped (a last scrape sees the final counts); "
                   "a Ctrl-C or SIGTERM ends it")
@click.option("--status-every", default="30s", show_default=True, help="print one status line per target this often")
@click.option("--force-rate", is_flag=True, help=f"allow --qps above {MAX_REMOTE_QPS:g} at a target not on this "
                                                 "machine")
@click.option("--no-preflight", is_flag=True, help="skip the check of each target before the probe (`latbench check`)")
@exits_on_errors
def watch(scenario, qps, metrics_port, metrics_host, window, duration, rotate_every, keep, target_url, out,
          linger, status_every, force_rate, no_preflight) -> None:
    out_console = console()
    loaded = load_or_exit(scenario)
    loaded.redactor.add_url(target_url)
    redact_output(loaded.redactor)
    settings = WatchSettings(qps=qps, duration=_seconds(duration, "--duration") if duration else None,
                             window_s=_seconds(window, "--window"), rotate_every_s=_seconds(rotate_every,
                                                                                            "--rotate-every"),
                             keep=keep, host=metrics_host, port=metrics_port,
                             linger_s=_seconds(linger, "--linger", zero=True))
    every = _seconds(status_every, "--status-every")
    for t in loaded.scenario.target_list():
        url = target_url or t.url
        if url and not on_loopback(url) and qps > MAX_REMOTE_QPS and not force_rate:
            raise click.UsageError(f"--qps {qps:g} at {url}: a watch is a probe; above {MAX_REMOTE_QPS:g} req/s at "
                                   "a server not on this machine, say so with --force-rate")
    current: dict[str, EngineGroup] = {}

    def announce(msg: str) -> None:
        group = current.get("engine")
        if group is not None and group.lingering:  # the probe had stopped: nothing in flight to wait for
            msg = "ending the linger: /metrics closes"
        click.echo(f"latbench watch: {msg}", err=True)

    install_signal_handlers(lambda: current.get("engine"), announce,
                            on_sigterm=lambda: current["engine"].skip_linger())

    def on_ready(url: str) -> None:
        names = ", ".join(t.name for t in loaded.scenario.target_list())
        out_console.print(f"watching {loaded.scenario.name} ({names}) at {qps:g} req/s; SLOs judged over the last "
                          f"{window}; records rotate every {rotate_every}, {keep} files kept", highlight=False)
        # one line a script can read (the port may have been chosen by the system)
        click.echo(f"LATBENCH_METRICS_URL={url}")
        sys.stdout.flush()

    def on_status(states: list[TargetStatus]) -> None:
        stamp = time.strftime("%H:%M:%S")
        for st in states:
            out_console.print(f"{stamp}  {status_line(st)}", highlight=False, markup=False)

    try:
        result = watch_scenario(loaded, settings, out=out, target_url=target_url, on_ready=on_ready,
                                on_engine=lambda g: current.update(engine=g), on_status=on_status,
                                status_every_s=every, preflight=not no_preflight)
    except RunDirWriteError as exc:
        click.echo(f"latbench: {exc}; the watch stopped, records written before it are kept", err=True)
        sys.exit(exc.exit_code)
    for wt in result.targets:
        out_console.print(f"{wt.name}: {wt.result.requests} requests in {wt.result.duration:.0f} s", highlight=False)
        for line in wt.skipped:
            out_console.print(f"  not watched: {line}", highlight=False)
    out_console.print(f"RunDir: {result.rundir.path}", highlight=False)
    if result.verdict.exit_code == EXIT_INVALID:  # an objective missed is /metrics' to alert on; an invalid watch exits
        why = "; ".join(r.text for r in result.verdict.reasons)
        out_console.print(f"the watch is invalid: {why}", style="bold yellow", highlight=False)
        sys.exit(EXIT_INVALID)
    sys.exit(EXIT_OK)
