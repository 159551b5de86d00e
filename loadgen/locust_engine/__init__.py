"""The Locust engine: the same scenario on Locust's master/worker runners, for load past one machine.

Same records (``requests.parquet``), same RunDir, same reports as the native engine. Nothing in this
package's ``__init__`` imports locust or gevent; they are imported only inside the master and worker
processes (``python -m loadgen.locust_engine.master`` / ``.worker``).

Public surface:

- :func:`run_target_locust`: run one target (the drop-in for the runner's ``_run_target``);
- :class:`LocustResult`: its result, an ``EngineResult`` plus ``processes`` and ``workers``;
- ``loadgen.locust_engine.cli.worker``: the ``latbench worker`` click command.
"""

from __future__ import annotations


def run_target_locust(*args, **kwargs):
    """See :func:`loadgen.locust_engine.launch.run_target_locust`."""
    from loadgen.locust_engine.launch import run_target_locust as run

    return run(*args, **kwargs)


def __getattr__(name):
    if name == "LocustResult":
        from loadgen.locust_engine.launch import LocustResult

        return LocustResult
    raise AttributeError(name)
