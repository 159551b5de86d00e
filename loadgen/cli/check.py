"""``latbench check``: the pre-flight check of a scenario's targets, and nothing else: a URL, its credentials and
its model tested in seconds before a long run."""

from __future__ import annotations

import sys

import click

from loadgen.cli.checks import load_or_exit
from loadgen.cli.common import console, exits_on_errors, redact_output
from loadgen.errors import EXIT_INVALID, EXIT_OK
from loadgen.run.measurement import TargetCheck, check_targets
from loadgen.run.runner import check_target_url


def check_line(tc: TargetCheck) -> str:
    """One line per target: ``ok`` with what answered, or what is wrong."""
    if tc.error is not None:
        return f"{tc.name}: did not start: {tc.error}"
    c = tc.check
    if not c.ok:
        return f"{tc.name}: FAILED: {c.problem}"
    what = []
    if c.models:
        what.append(f"models {', '.join(c.models[:5])}" + (" …" if len(c.models) > 5 else ""))
    what.append("a minimal request answered" if c.generated else "nothing sent to the model")
    notes = "".join(f"; note: {n}" for n in c.notes)
    return f"{tc.name}: ok: {c.url} (model {tc.model or '-'}; {', '.join(what)}; {c.seconds:.2f} s){notes}"


@click.command(help="Check a scenario's targets before a run: reachable, the API at its URL, credentials accepted, "
                    "the model served, answers in the API's shape. One minimal request each (one output token; none "
                    "in a fresh-start study), nothing recorded. Exit 0 when every target is ready, 3 otherwise.")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--target", "target_url", metavar="URL", help="check this base URL instead of the scenario's target(s)")
@exits_on_errors
def check(scenario: str, target_url: str | None) -> None:
    check_target_url(target_url)
    loaded = load_or_exit(scenario)
    loaded.redactor.add_url(target_url)
    redact_output(loaded.redactor)
    out = console()
    results = check_targets(loaded, target_url)
    for tc in results:
        out.print(check_line(tc), highlight=False, style=None if tc.ok else "bold yellow")
    sys.exit(EXIT_OK if all(tc.ok for tc in results) else EXIT_INVALID)
