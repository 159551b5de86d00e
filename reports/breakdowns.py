"""A target's breakdowns by what its requests sent beyond text: TTFT (and prompt tokens, the server's and
latbench's count of the images') by image size, the encoder cache's hit rate per phase, TTFT by tools offered,
and the structured answers' rates, read from the summary's typed blocks (``overall.images``, ``media_cache``,
``overall.tool_calls``, ``overall.structured``: :mod:`loadgen.analysis.features` computes them). Each table is
empty when the run had no such requests, and the report leaves it out."""

from __future__ import annotations

from loadgen.records.results import Summary
from reports import fmt
from reports.report_model import num, pct

__all__ = ["IMAGE_COLUMNS", "TOOL_COLUMNS", "image_rows", "media_cache_note", "structured_note", "tool_note",
           "tool_rows"]

IMAGE_COLUMNS = ("requests", "TTFT p50", "TTFT p90", "TTFT p99", "latency p50", "prompt tokens (server)",
                 "image tokens (latbench)")
TOOL_COLUMNS = ("requests", "TTFT p50", "TTFT p99", "first tool-call token p50", "first tool-call token p99")


def _side(pixels: int) -> str:
    side = int(round(pixels ** 0.5))
    return f"{pixels:,} px (~{side}x{side})" if side * side == pixels else f"{pixels:,} px"


def image_rows(summary: Summary, target: str) -> list[dict]:
    """One row per request image size (pixels, summed over a request's images) of the whole run."""
    block = summary.overall.images if summary.overall else None
    rows = []
    for i, r in enumerate((block.by_size if block else None) or []):
        base = f"overall/images/by_size/{i}"
        cells = [num(r.n, f"{base}/n", "count", target)]
        cells += [num(pct(r.ttft, p).value, f"{base}/ttft/percentiles/{p}/value", "ms", target)
                  for p in ("p50", "p90", "p99")]
        cells.append(num(pct(r.latency, "p50").value, f"{base}/latency/percentiles/p50/value", "ms", target))
        cells.append(num(r.prompt_tokens_mean, f"{base}/prompt_tokens_mean", "count", target))
        cells.append(num(r.image_tokens_est_mean, f"{base}/image_tokens_est_mean", "count", target))
        rows.append({"label": _side(r.image_pixels), "cells": cells})
    return rows


def tool_rows(summary: Summary, target: str) -> list[dict]:
    """One row per number of tools offered, with TTFT and the time to the first tool-call token."""
    block = summary.overall.tool_calls if summary.overall else None
    rows = []
    for i, r in enumerate((block.by_tools if block else None) or []):
        base = f"overall/tool_calls/by_tools/{i}"
        cells = [num(r.n, f"{base}/n", "count", target)]
        cells += [num(pct(getattr(r, m), p).value, f"{base}/{m}/percentiles/{p}/value", "ms", target)
                  for m in ("ttft", "ttftc") for p in ("p50", "p99")]
        rows.append({"label": f"{r.tools} tools", "cells": cells})
    return rows


def media_cache_note(summary: Summary) -> str:
    """The share of images and audio clips the server's encoder cache held, overall and per phase, as its usage
    said ('' when it said nothing)."""
    said = [(label, sc.media_cache) for label, _, sc in summary.scopes() if sc.media_cache and sc.media_cache.media]
    if not said:
        return ""
    parts = [f"{label} {fmt.pct(b.hit_rate)} ({b.hits:,} of {b.media:,})" for label, b in said]
    return ("Encoder cache hit rate (images and audio clips the server's image cache held, from its usage): "
            + "; ".join(parts) + ".")


def tool_note(summary: Summary) -> str:
    """The tool calls of the run in a sentence ('' without tools)."""
    b = summary.overall.tool_calls if summary.overall else None
    if not b or not b.requests:
        return ""
    mean = f", {b.argument_tokens_mean:.1f} argument tokens a calling request" if b.argument_tokens_mean else ""
    return (f"{b.called:,} of {b.requests:,} successful requests offered tools called one "
            f"(tool_call_rate {b.tool_call_rate:.1%}){mean}.")


def structured_note(summary: Summary) -> str:
    """The structured answers of the run in a sentence ('' without a response_format)."""
    b = summary.overall.structured if summary.overall else None
    if not b or not b.checked:
        return ""
    text = f"Structured output: {b.json_valid:,} of {b.checked:,} answers parsed as JSON ({b.json_valid_rate:.1%})"
    if b.schema_checked:
        text += f", {b.schema_valid:,} of {b.schema_checked:,} matched the schema ({b.schema_valid_rate:.1%})"
    return text + ". An invalid answer is a result, not an error: an SLO on json_valid_rate or schema_valid_rate " \
                  "makes it a failure."
