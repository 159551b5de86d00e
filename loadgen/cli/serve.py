"""``latbench serve``: the bundled reference server on its own (the CLI is where the two programs meet)."""

from __future__ import annotations

import sys

import click

from reference_server.__main__ import main as server_main


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
               help="Start the bundled reference inference server (all flags: latbench serve --help).")
@click.pass_context
def serve(ctx) -> None:
    sys.exit(server_main(list(ctx.args)))
