"""What the commands share: the console, exit codes, option parsing, and the scrubbed log."""

from __future__ import annotations

import functools
import logging
import sys

import click
from rich.console import Console

from loadgen.errors import EXIT_USAGE, LatbenchError, ScenarioError
from loadgen.redact import scrub
from loadgen.scenario.loader import LoadedScenario, load_scenario
from loadgen.units import parse_percent

EXIT_CODES = """\b
Exit codes:
  0  every SLO passed
  1  an SLO or a regression check failed
  2  usage or scenario error (nothing was sent)
  3  the run is invalid: generator-limited, target unreachable, or interrupted
"""


def console() -> Console:
    out = Console(highlight=False)
    if not out.is_terminal:  # CI logs: wide enough for the summary table
        out = Console(highlight=False, width=160)
    return out


def load_or_exit(path: str) -> LoadedScenario:
    """The scenario, or every mistake in it on stderr and exit 2 (nothing was sent)."""
    try:
        return load_scenario(path)
    except ScenarioError as exc:
        for line in exc.errors:
            click.echo(line, err=True)
        sys.exit(EXIT_USAGE)


def scrub_logs(secrets: list[str]) -> None:
    """Every log line goes through the scenario's secrets scrubber (a URL or a server message may hold one)."""

    class _Scrub(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg, record.args = scrub(record.getMessage(), secrets), None
            if record.exc_info:  # a traceback may quote a URL: render it now, scrubbed
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info), secrets)
                record.exc_info = None
            return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(_Scrub())


def fraction_option(text: str, name: str) -> float:
    """``10%`` or ``0.1`` -> 0.1; a click usage error (exit 2) naming the option otherwise."""
    try:
        v = parse_percent(text)
    except ValueError:
        raise click.BadParameter(f"expected a percentage such as 10%, got {text!r}", param_hint=name) from None
    if not 0 <= v < 100:
        raise click.BadParameter(f"expected a percentage between 0% and 10000%, got {text!r}", param_hint=name)
    return v


def print_reasons(out: Console, verdict: str, reasons: list[str]) -> None:
    style = {"passed": "bold green", "failed": "bold red", "invalid": "bold yellow"}[verdict]
    out.print(f"verdict: {verdict.upper()}", style=style)
    for r in reasons:
        out.print(f"  - {r}", highlight=False)


def exits_on_errors(fn):
    """Map latbench's exceptions to the documented exit codes, in this one place (a message, no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            for line in exc.errors:
                click.echo(line, err=True)
            sys.exit(exc.exit_code)
        except LatbenchError as exc:
            click.echo(f"latbench: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper
