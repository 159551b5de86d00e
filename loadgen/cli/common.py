"""What the commands share: the console, exit codes, option parsing, and the one redacted way out."""

from __future__ import annotations

import atexit
import functools
import gc
import logging
import sys

import click
from rich.console import Console

from loadgen.errors import LatbenchError, ScenarioError, exit_code_of
from loadgen.redact import RedactingStream, Redactor, escape_control
from loadgen.scenario.reset import RESETS
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


class RedactingFilter(logging.Filter):
    """Renders each log record through the redactor (a URL or a server message may hold a secret), its control
    characters but line breaks and tabs escaped (a managed server's last words may hold a server's ESC bytes)."""

    def __init__(self, redactor: Redactor):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = escape_control(self.redactor.text(record.getMessage()), keep="\n\t"), None
        if record.exc_info:  # a traceback may quote a URL: render it now, redacted
            record.exc_text = escape_control(self.redactor.text(logging.Formatter().formatException(record.exc_info)),
                                             keep="\n\t")
            record.exc_info = None
        return True


def redact_output(redactor: Redactor) -> None:
    """From now on everything this process prints or logs goes through ``redactor``: stdout and stderr are
    wrapped (console output, ``click.echo``, tracebacks), and every log handler filters its records.

    Called once at start with a redactor that knows no secret (URL credentials are still redacted), and again
    by each command once its scenario (and ``--target``) tell what is secret."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedactingStream):
            stream.redactor = redactor
        elif stream is not None:
            setattr(sys, name, RedactingStream(stream, redactor))
    for handler in logging.getLogger().handlers:
        for f in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(f)
        handler.addFilter(RedactingFilter(redactor))


def skip_final_collection() -> None:
    """Have the interpreter skip its final garbage collection when this process exits: ``gc.freeze`` runs as the
    last exit handler (registered once, first), so the collection that finalization makes walks no object that
    lived until then. It walked every object of pandas, pyarrow and the report's figures: 0.3 s of wall and CPU at
    the end of every run (and 0.5 s after a run of 200k records), measured. Nothing is skipped that the process
    relies on: the other exit handlers run (logging flushed, child processes reaped), non-daemon threads are
    joined before them, stdout and stderr are flushed after, and every file latbench writes is closed by then
    (written whole and renamed into place); only the memory is not handed back object by object."""
    if not getattr(skip_final_collection, "registered", False):
        atexit.register(gc.freeze)
        skip_final_collection.registered = True


#: ``--reset WHAT`` of the commands that send load: what each target empties before each run (``target.reset``)
reset_option = click.option(
    "--reset", type=click.Choice(RESETS), default=None,
    help="empty this server state before each run, repetition and capacity step, on every target that names no "
         "target.reset of its own (vLLM, SGLang, the reference server; where the engine cannot, the summary says "
         "the cache carried over)")


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
    for r in reasons:  # a reason may quote a server (its last words): no control character but its line breaks
        out.print("  - " + escape_control(r, keep="\n"), highlight=False, markup=False)


def print_errors(exc: ScenarioError) -> None:
    """Each mistake of a scenario on its own line on stderr (already redacted by the loader; escaped here)."""
    for line in exc.errors:
        click.echo(escape_control(line), err=True)


def exits_on_errors(fn):
    """Map latbench's exceptions to the documented exit codes, in this one place (a message, no traceback):
    a :class:`LatbenchError` exits with its ``exit_code``; Ctrl-C before a run could take over the signal (a
    managed server still starting, say) exits 3, as an interrupted run does (click would say "Aborted!" and
    exit 1, the code of a failed SLO)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ScenarioError as exc:
            print_errors(exc)
            sys.exit(exc.exit_code)
        except LatbenchError as exc:  # a managed server's last words may be quoted: control characters escaped
            click.echo("latbench: " + escape_control(str(exc), keep="\n"), err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("latbench: interrupted", err=True)
            sys.exit(exit_code_of(KeyboardInterrupt()))

    return wrapper
