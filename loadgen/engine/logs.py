"""What latbench logs, in every process of a run: one line for each failed request (``latbench -v``), and the
set-up every process shares (:func:`configure_logging`).

The line names the request (its number, target and phase), its error class and HTTP status, and what the
server or the transport said (:attr:`~loadgen.records.schema.Outcome.error_detail`: an exception, or the
start of an error body). It goes to the ``latbench.requests`` logger at DEBUG, which only ``-v`` shows, and,
like every log line, through the run's redaction on its way out (the CLI's logging filter): a server that
echoes a request's headers back is quoted with its secrets redacted. What the server said is written with its
control characters escaped (:func:`loadgen.redact.escape_control`): a server's ESC or BEL bytes never reach the
terminal raw, in this process or in a generator process.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from loadgen.redact import escape_control

if TYPE_CHECKING:  # the CLI sets up logging before anything heavy (pyarrow) is imported
    from loadgen.records.schema import Outcome

log = logging.getLogger("latbench.requests")
LEVEL_ENV = "LATBENCH_LOG_LEVEL"  # how the processes a run starts learn latbench's log level


def configure_logging(level: str | None = None) -> None:
    """``latbench: `` lines on stderr; latbench's own loggers at ``level`` (default: what ``LATBENCH_LOG_LEVEL``
    says, as the parent process set it), every other library's at WARNING (``-v`` must not bring thousands of
    lines of font-manager or HTTP-client debug). The processes this one starts inherit the level."""
    level = level or os.environ.get(LEVEL_ENV)
    logging.basicConfig(level=logging.WARNING, format="latbench: %(message)s")
    if level:
        logging.getLogger("latbench").setLevel(level)
        os.environ[LEVEL_ENV] = level


def logging_failures() -> bool:
    """Whether failed requests are logged (checked once per run: the hot path pays one attribute read)."""
    return log.isEnabledFor(logging.DEBUG)


def log_failure(target: str, phase: str, seq: int, out: Outcome) -> None:
    """Log one failed request on one line (what the server said: whitespace runs as one space, control
    characters escaped)."""
    status = f", status {out.status}" if out.status else ""
    detail = escape_control(" ".join(out.error_detail.split()))
    log.debug("failed request %d (target %s, phase %s): %s%s%s", seq, target or "-", phase, out.error, status,
              f": {detail}" if detail else "")
