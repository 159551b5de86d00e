"""The ``latbench`` command group. Each command lives in its own module, imported only when it runs, so
``latbench --version`` and ``latbench validate`` do not load pandas or pyarrow."""

from __future__ import annotations

import importlib

import click

from loadgen.cli.common import EXIT_CODES, redact_output, skip_final_collection
from loadgen.engine.logs import configure_logging
from loadgen.errors import exit_code_of
from loadgen.redact import Redactor
from loadgen.version import __version__

#: command name -> "module:attribute" (click's documented pattern for lazily loaded subcommands)
COMMANDS = {
    "validate": "loadgen.cli.scenario:validate",
    "schema": "loadgen.cli.scenario:schema",
    "run": "loadgen.cli.run:run",
    "check": "loadgen.cli.check:check",
    "gate": "loadgen.cli.run:gate",
    "capacity": "loadgen.cli.capacity:capacity",
    "report": "loadgen.cli.report:report",
    "compare": "loadgen.cli.report:compare",
    "serve": "loadgen.cli.serve:serve",
    "worker": "loadgen.cli.worker:worker",
    "watch": "loadgen.cli.watch:watch",
    "alerts": "loadgen.cli.monitor:alerts",
    "dashboards": "loadgen.cli.monitor:dashboards",
    "trace": "loadgen.cli.trace:trace",
    "docs": "loadgen.cli.docs:docs",
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when first used."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def invoke(self, ctx: click.Context):
        """Ctrl-C before a command took over the signal (while it is still being imported): exit 3, as an
        interrupted run does, not click's "Aborted!" and 1 (the code of a failed SLO)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("latbench: interrupted", err=True)
            ctx.exit(exit_code_of(KeyboardInterrupt()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=COMMANDS,
             help="latbench: latency benchmarking and load testing for AI inference APIs.\n\n" + EXIT_CODES)
@click.version_option(__version__, prog_name="latbench")
@click.option("-v", "--verbose", is_flag=True,
              help="log each failed request on one line (its error class, status and what the server said, redacted)")
def main(verbose: bool) -> None:
    configure_logging("DEBUG" if verbose else None)  # latbench's own loggers only: no library's debug
    redact_output(Redactor())  # URL credentials never printed; a command that loads a scenario knows more
    skip_final_collection()


if __name__ == "__main__":  # pragma: no cover
    main()
