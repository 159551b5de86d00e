"""What the failed requests of a run were: their classes and HTTP statuses, commonest first, and one example.

The verdict reads it when no request succeeded (:func:`loadgen.analysis.verdict.target_reasons`): failures that
say the measurement was set up wrong (nothing listening, a wrong path, missing credentials, a body that is not the
API's) make the run invalid; failures that are the service's own (5xx, 429, timeouts, resets) make it fail.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from loadgen.records.results import FailureGroup, Failures
from loadgen.records.schema import ABORTED
from loadgen.redact import escape_control

#: error classes that say the measurement is set up wrong, not that the service is slow or broken
SETUP_CLASSES = frozenset({"connect", "dns", "tls", "http_3xx", "http_4xx", "bad_response", "bad_stream", "other",
                           "dropped"})
#: the service's own failures: what a run exists to measure
SERVICE_CLASSES = frozenset({"http_5xx", "http_429", "timeout", "reset"})
TOP = 5


def failure_summary(table: pa.Table, example: dict | None = None) -> Failures:
    """``count`` (failed requests, aborted ones not counted), ``by_status`` (up to five ``{error, status, count}``,
    commonest first), ``example`` (the first failure's class, status and first bytes, as the engine kept them)."""
    err = table.column("error")
    failed = pc.and_(pc.not_equal(err, ""), pc.not_equal(err, ABORTED))
    sub = table.filter(failed).select(["error", "status"])
    groups = sub.group_by(["error", "status"]).aggregate([("error", "count")]).to_pylist() if sub.num_rows else []
    groups.sort(key=lambda g: (-g["error_count"], g["error"], g["status"]))
    return Failures(count=sub.num_rows,
                    by_status=[FailureGroup(error=g["error"], status=int(g["status"]), count=int(g["error_count"]))
                               for g in groups[:TOP]],
                    example=example)


def describe(f: Failures) -> str:
    """``http_4xx (HTTP 404) on 120 of 120; e.g. HTTP 404: 'Not Found'`` from :func:`failure_summary`."""
    top = f.by_status[0]
    status = f" (HTTP {top.status})" if top.status else ""
    text = f"{top.error}{status} on {top.count} of {f.count}"
    ex = f.example
    if ex:  # what the server said comes last and whole (as the engine kept it): redaction sees where it was cut
        said = escape_control(" ".join(str(ex.get("detail") or "").split()))
        head = f"HTTP {ex['status']}" if ex.get("status") else ex.get("error", "")
        text += f"; e.g. {head}" + (f", which said: {said}" if said else "")
    return text
