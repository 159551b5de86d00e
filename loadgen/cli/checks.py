"""The scenario as the CLI loads it: the loader's validation, plus what only the CLI can check.

The CLI is where latbench and the reference server meet (loadgen imports nothing of ``reference_server``), so
the reference server's own rules (its settings, models and backends) are checked here, through
:func:`reference_server.__main__.check_config`, before anything starts: an unknown ``model`` or ``options``
key is a scenario error (exit 2), not a server that fails to start (exit 3).
"""

from __future__ import annotations

import sys

from loadgen.cli.common import print_errors
from loadgen.errors import EXIT_USAGE, ScenarioError
from loadgen.run.targets import reference_argv
from loadgen.scenario.loader import LoadedScenario, load_scenario
from loadgen.scenario.model import Scenario
from reference_server.__main__ import check_config


def reference_problems(sc: Scenario):
    """(field path, message) for each problem of each ``reference:`` block, as the server itself judges it."""
    for loc, t in ([(("target",), sc.target)] if sc.target is not None
                   else [(("targets", i), t) for i, t in enumerate(sc.targets or [])]):
        if t.reference is None:
            continue
        argv = reference_argv(t.reference)[3:]  # without `python -m reference_server`
        for msg in check_config(argv):
            key, _, rest = msg.partition(": ")
            if key in t.reference.options:
                yield loc + ("reference", "options", key), rest
            elif key in ("model", "backend", "arch") and rest:
                yield loc + ("reference", key), rest
            else:
                yield loc + ("reference",), msg


def load_checked(path: str, env: dict | None = None) -> LoadedScenario:
    """The scenario at ``path``, checked as ``latbench validate`` and ``run`` check it. Raises ScenarioError."""
    return load_scenario(path, env, checks=[reference_problems])


def load_or_exit(path: str) -> LoadedScenario:
    """The scenario, or every mistake in it on stderr and exit 2 (nothing was sent)."""
    try:
        return load_checked(path)
    except ScenarioError as exc:
        print_errors(exc)
        sys.exit(EXIT_USAGE)
