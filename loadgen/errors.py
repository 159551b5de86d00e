"""One exception tree for the mistakes of a user or of latbench, and the exit codes they map to.

A failed *request* is never an exception (it is a record with an error class); these are for a run
that cannot be started or finished as asked. The CLI maps them to exit codes in one place
(:func:`exit_code_of`); library callers catch :class:`LatbenchError` or one branch of it.
"""

from __future__ import annotations

EXIT_OK = 0  # every SLO passed
EXIT_FAILED = 1  # an SLO or a regression check failed
EXIT_USAGE = 2  # usage or scenario error: nothing was sent
EXIT_INVALID = 3  # the run is invalid: generator-limited, target unreachable, interrupted, unwritable


class LatbenchError(Exception):
    """The root: every error latbench raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_USAGE


class UsageError(LatbenchError):
    """A flag, path or argument that cannot be used as given (nothing was sent)."""


class ScenarioError(UsageError):
    """A scenario with mistakes. ``errors`` holds one located message per mistake (file:line:col: field: ...)."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class TargetError(LatbenchError):
    """The target could not be used: a managed server that does not start, a URL no transport sends to."""

    exit_code = EXIT_INVALID


class TargetStartError(TargetError):
    """A managed target did not come up; the message says what it printed."""


class TransportError(TargetError, ValueError):
    """A transport that cannot send to the target as configured (``transport: lean`` with https://)."""


class UnsupportedURL(TransportError):
    """A URL the lean transport cannot send to (https://, or no host): use the aiohttp transport."""


class RunDirError(LatbenchError):
    """A path that is not a RunDir latbench can read (usage: exit 2)."""


class RunDirWriteError(RunDirError, OSError):
    """The RunDir could not be written (disk full, no permission). Records written before it are kept.

    ``records_kept``: whether the RunDir holds records taken before the failure (set by the run that owned the
    RunDir, ``loadgen.run.runner.run_scenario``; False where nobody said), so a message offers them only then."""

    exit_code = EXIT_INVALID
    records_kept = False


def exit_code_of(exc: BaseException) -> int:
    """The documented exit code for an exception that ended a command."""
    if isinstance(exc, LatbenchError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INVALID
    return EXIT_INVALID
