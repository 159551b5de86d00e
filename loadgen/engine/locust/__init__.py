"""The Locust engine: the same scenario on Locust's master/worker runners, for load past one machine.

Same records (``requests.parquet``), same RunDir, same reports as the native engine. Nothing imported
by this package's ``__init__`` imports locust or gevent; they are imported only by the master and worker
processes (``python -m loadgen.engine.locust.master`` / ``.worker``), whose modules are never imported
by the process that runs the native engine or the CLI.

Public surface: :class:`LocustEngine` (the engine), :class:`LocustResult` (its result) and
``loadgen.engine.locust.cli.worker`` (the ``latbench worker`` click command).
"""

from loadgen.engine.locust.launch import LocustEngine, LocustResult, run_target_locust

__all__ = ["LocustEngine", "LocustResult", "run_target_locust"]
