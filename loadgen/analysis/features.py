"""What a scope's requests sent beyond text, and what came back: images by size, tool calls, structured output.

Each block is in a scope of summary.json only when its requests had it (a run without images has no ``images``
block): ``images`` (requests that sent images, their count, pixels and bytes, and TTFT, the server's prompt tokens
and latbench's count of the images' tokens per image size), ``media_cache`` (how many of the images and audio
clips the server's encoder cache held, where its usage says),
``tool_calls`` (requests offered tools, how many called one: ``tool_call_rate``, calls and argument tokens, and
TTFT and ``ttftc`` per number of tools offered), ``structured`` (answers checked against the response format:
``json_valid_rate``, ``schema_valid_rate``). The size of a request's images is its ``image_pixels``; a
breakdown row is one distinct value of it (a scenario's ``sizes`` give a few), at most :data:`MAX_ROWS` of them
(the most frequent), so a run of random sizes gets a table of its commonest, not thousands of rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.stats import describe

__all__ = ["MAX_ROWS", "image_block", "media_cache_block", "structured_block", "tool_call_block"]

MAX_ROWS = 12  # rows of a breakdown at most
BREAKDOWN_PERCENTILES = (50, 90, 99)


def _mean(x: pd.Series) -> float | None:
    return float(x.mean()) if len(x) else None


def _rows(ok: pd.DataFrame, key: str, metrics: tuple[str, ...]) -> list[dict]:
    counts = ok[key].value_counts()
    top = sorted(counts.index[:MAX_ROWS].tolist())
    out = []
    for value in top:
        sel = ok[ok[key] == value]
        row = {key: int(value), "n": int(len(sel))}
        for m in metrics:
            if m in sel:
                row[m] = describe(sel[m].to_numpy(dtype=np.float64), BREAKDOWN_PERCENTILES)
        out.append(row)
    return out


def image_block(df: pd.DataFrame, ok: pd.DataFrame) -> dict | None:
    """A scope's images (None when none of its requests sent one): ``requests``, ``images``, mean pixels and
    bytes per request that sent images (known sizes only: a URL's are not), and ``by_size``: TTFT and latency
    per request image size (pixels)."""
    if "images" not in df or not (df["images"] > 0).any():
        return None
    sent = df[df["images"] > 0]
    known = sent[sent["image_pixels"] >= 0]
    with_ok = ok[(ok["images"] > 0) & (ok["image_pixels"] >= 0)]
    rows = _rows(with_ok, "image_pixels", ("ttft", "latency"))
    for row in rows:  # the server's prompt tokens (its usage) beside latbench's count of the images' tokens
        sel = with_ok[with_ok["image_pixels"] == row["image_pixels"]]
        if "prompt_tokens_source" in sel:
            row["prompt_tokens_mean"] = _mean(sel.loc[sel["prompt_tokens_source"] == "usage", "prompt_tokens"])
        if "image_tokens_est" in sel and (sel["image_tokens_est"] >= 0).all():
            row["image_tokens_est_mean"] = _mean(sel["image_tokens_est"])
    return {"requests": int(len(sent)), "images": int(sent["images"].sum()),
            "pixels_mean": _mean(known["image_pixels"]), "bytes_mean": _mean(known["image_bytes"]),
            "by_size": rows}


def media_cache_block(ok: pd.DataFrame) -> dict | None:
    """A scope's successful requests with images or audio whose server said how many of them its encoder cache
    held (``media_cache_hits`` >= 0; None when no server said): ``requests`` that said, their ``media`` (images
    and clips), ``hits`` of those, and ``hit_rate`` = hits / media."""
    if "media_cache_hits" not in ok:
        return None
    said = ok[(ok["media_cache_hits"] >= 0) & ((ok["images"] > 0) | (ok["audio"] > 0))]
    if not len(said):
        return None
    media, hits = int((said["images"] + said["audio"]).sum()), int(said["media_cache_hits"].sum())
    return {"requests": int(len(said)), "media": media, "hits": hits, "hit_rate": hits / media if media else None}


def tool_call_block(df: pd.DataFrame, ok: pd.DataFrame) -> dict | None:
    """A scope's tool calls (None when no request of it offered tools): ``requests`` offered tools and
    succeeded, ``called`` of them answered with a tool call, ``tool_call_rate`` = called / requests, ``calls``,
    ``argument_tokens`` (total and mean per calling request), and ``by_tools``: TTFT and ``ttftc`` per number
    of tools offered."""
    if "tools" not in df or not (df["tools"] > 0).any():
        return None
    offered = ok[ok["tools"] > 0]
    called = offered[offered["tool_calls"] > 0]
    n = len(offered)
    return {"requests": int(n), "called": int(len(called)),
            "tool_call_rate": len(called) / n if n else None,
            "calls": int(called["tool_calls"].sum()), "argument_tokens": int(called["tool_call_tokens"].sum()),
            "argument_tokens_mean": _mean(called["tool_call_tokens"]),
            "by_tools": _rows(offered, "tools", ("ttft", "ttftc"))}


def structured_block(ok: pd.DataFrame) -> dict | None:
    """A scope's structured answers (None when none was checked): ``checked`` successful requests whose answer
    was checked, ``json_valid`` of them parsed as JSON (``json_valid_rate``), ``schema_checked`` of them against a
    schema and ``schema_valid`` matched it (``schema_valid_rate``). Failed requests are not judged: an error is
    counted as one, not as an invalid answer."""
    if "json_valid" not in ok or not (ok["json_valid"] >= 0).any():
        return None
    checked = ok[ok["json_valid"] >= 0]
    schema = checked[checked["schema_valid"] >= 0]
    n, m = len(checked), len(schema)
    valid, matched = int((checked["json_valid"] == 1).sum()), int((schema["schema_valid"] == 1).sum())
    return {"checked": n, "json_valid": valid, "json_valid_rate": valid / n if n else None,
            "schema_checked": m, "schema_valid": matched, "schema_valid_rate": matched / m if m else None}
