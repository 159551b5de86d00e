"""``latbench worker``: join a master started by ``latbench run ... --engine locust --expect-workers N``.

The lead registers :data:`worker` in ``loadgen/cli.py`` (``main.add_command(worker)``). The command
replaces its own process by ``python -m loadgen.locust_engine.worker`` (``os.execve``), so locust's
gevent monkey-patching starts in a fresh interpreter, before anything else is imported.
"""

from __future__ import annotations

import os
import sys

import click


@click.command(help="Join a latbench Locust master and send its share of the load "
                    "(the master: latbench run SCENARIO --engine locust --expect-workers N --master-bind HOST:PORT).")
@click.option("--master", "master", required=True, metavar="HOST[:PORT]", help="the master's address (port default 5557)")
@click.option("--label", default=None, metavar="NAME", help="this worker's name in the run's notes (default host:pid)")
def worker(master: str, label: str | None) -> None:
    from loadgen.locust_engine.launch import _env

    argv = [sys.executable, "-m", "loadgen.locust_engine.worker", "--master", master]
    if label:
        argv += ["--label", label]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, _env())
