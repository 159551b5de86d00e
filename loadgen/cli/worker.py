"""``latbench worker``: join a master started by ``latbench run ... --engine locust --expect-workers N``.

The command replaces its own process by ``python -m loadgen.engine.locust.worker`` (``os.execve``), so locust's
gevent monkey-patching starts in a fresh interpreter, before anything else is imported.

The run's worker secret (:mod:`loadgen.engine.locust.auth`) comes from the environment or a file, never from
the command line (which every user of the host can read).

One idea at several stages, a Locust worker, so one file name: :mod:`loadgen.engine.locust.worker` (the worker process).
"""

from __future__ import annotations

import os
import sys

import click

from loadgen.engine.locust.auth import SECRET_ENV, SECRET_FILE_ENV
from loadgen.engine.locust.launch import child_env


@click.command(help="Join a latbench Locust master and send its share of the load "
                    "(the master: latbench run SCENARIO --engine locust --expect-workers N --master-bind HOST:PORT).")
@click.option("--master", "master", required=True, metavar="HOST[:PORT]",
              help="the master's address (port default 5557)")
@click.option("--label", default=None, metavar="NAME", help="this worker's name in the run's notes (default host:pid)")
@click.option("--secret-file", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help=f"a file holding the run's worker secret, as the run was given it [default: ${SECRET_FILE_ENV}, "
                   f"else the secret itself in ${SECRET_ENV}]")
def worker(master: str, label: str | None, secret_file: str | None) -> None:
    argv = [sys.executable, "-m", "loadgen.engine.locust.worker", "--master", master]
    if label:
        argv += ["--label", label]
    if secret_file:
        argv += ["--secret-file", secret_file]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, child_env())
