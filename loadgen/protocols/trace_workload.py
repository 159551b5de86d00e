"""A trace replay's side of a sender's workload: what the target accepts, the prompts fitted to it, and what the
summary says about them (the target is known here, the scenario stage knows none).

**Limits.** ``load.trace.max_model_len`` when the scenario gives it, else the ``max_model_len`` the target reports
at ``/v1/models`` (vLLM and the reference server do; its entry for the model sent, else the first); neither: no
limit, nothing is clipped. With ``workload.tokenizer``, what the server adds to each prompt (the chat template, or
BOS for completions) is counted and left out of the context; without one it is unknown and taken as 0. Lengths
are in the workload's tokens (the tokenizer's, else the 4-characters-a-token approximation): only a tokenizer
that counts as the target does (``tokenizer: server``, or the model's own) makes the fit exact.

``too_long: refuse``: a request that does not fit stops the run before anything is sent (exit 2), naming the
trace's lines; the scenario's own limits are checked already when it is loaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadgen.errors import UsageError
from loadgen.fetch import FetchError, fetch
from loadgen.records import results
from loadgen.scenario.model import Target, Trace, Workload
from loadgen.scenario.tokenized import added_tokens
from loadgen.scenario.tokenizer import ServerTokenizer, Tokenizer, TokenizerError, load_tokenizer
from loadgen.scenario.trace import Limits, read_trace, select, too_long_rows
from loadgen.scenario.trace_prompts import TracePrompts, block_numbers, fitted_lengths, make_trace_prompts
from loadgen.scenario.urls import join_url

__all__ = ["describe_trace", "target_max_model_len", "trace_limits", "trace_prompts"]

MODELS_TIMEOUT_S = 5.0
NO_MODELS_APIS = ("http", "kserve-v2", "triton-generate")  # no OpenAI /models to ask


def target_max_model_len(target: Target, url: str | None, model: str | None) -> int | None:
    """The ``max_model_len`` the target reports at ``{url}/models`` for ``model`` (else its first model); None
    when it reports none or cannot be asked."""
    if not url or target.api in NO_MODELS_APIS or not url.startswith(("http://", "https://")):
        return None
    try:
        resp = fetch("GET", join_url(url, "/models"), headers=target.headers, deadline_s=MODELS_TIMEOUT_S)
        cards = resp.json()["data"] if resp.ok else []
        card = next((c for c in cards if c.get("id") == model), cards[0])
        value = card.get("max_model_len")
    except (FetchError, ValueError, KeyError, IndexError, TypeError, AttributeError):  # no limit known
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def _server_adds(tok: Tokenizer, chat: bool) -> int:
    """Tokens the server adds to a prompt (template or BOS), by ``tok``; -1 when unknown (no chat template)."""
    sample = "Hello"
    return added_tokens(tok, [(sample, None, tok.count(sample))], chat)[0]


def trace_limits(target: Target, spec: Trace, tok: Tokenizer | None, model: str | None, url: str | None,
                 chat: bool) -> tuple[Limits, int]:
    """(the limits the replay fits its requests to, the tokens the server adds to each prompt or -1)."""
    if spec.max_model_len is not None:
        mml, source = spec.max_model_len, "scenario"
    else:
        mml = target_max_model_len(target, url, model)
        source = "target" if mml is not None else None
    added = _server_adds(tok, chat) if tok is not None else -1
    return Limits(mml, spec.max_input_tokens, max(added, 0) if mml is not None else 0, source), added


def _refuse(spec: Trace, limits: Limits) -> None:
    if spec.too_long != "refuse":
        return
    data = read_trace(spec.file)
    where = "the target's max_model_len" if limits.source == "target" else "load.trace"
    msgs = too_long_rows(data, select(spec, data), limits, where)
    if msgs:
        raise UsageError("load.trace: requests longer than the target accepts (too_long: refuse), nothing was "
                         "sent:\n" + "\n".join(msgs))


def trace_prompts(target: Target, spec: Trace, workload: Workload, tok: Tokenizer | None, model: str | None,
                  url: str | None, seed: int, chat: bool) -> TracePrompts:
    """The replay's prompts for one sender, fitted to the target (UsageError when refused)."""
    limits, added = trace_limits(target, spec, tok, model, url, chat)
    _refuse(spec, limits)
    return make_trace_prompts(spec, workload, seed, limits, tok, added)


def describe_trace(target: Target, workload: Workload, spec: Trace, model: str | None, url: str | None,
                   base_dir: Path, chat: bool) -> results.Trace:
    """summary.json's ``trace``: the slice replayed, the limits and where they came from, how many requests were
    clipped (and the tokens cut), and how the prompts share blocks. Raises UsageError when ``too_long: refuse``
    finds a request that does not fit (before anything is sent)."""
    try:
        tok = load_tokenizer(workload.tokenizer, base_dir, url or target.url, target.headers, model)
    except TokenizerError as exc:
        raise UsageError(f"workload.tokenizer: {exc}") from None
    try:
        limits, _ = trace_limits(target, spec, tok, model, url, chat)
    except TokenizerError as exc:
        raise UsageError(f"workload.tokenizer: {exc}") from None
    finally:
        if isinstance(tok, ServerTokenizer):
            tok.close()
    _refuse(spec, limits)
    data = read_trace(spec.file)
    sl = select(spec, data)
    inp0, out0, inp, out = fitted_lengths(data, sl, limits, workload.max_tokens)
    clipped = (inp != inp0) | (out != out0)
    per_row = -(-inp // spec.block_tokens)
    blocks = block_numbers(data, sl.lo, per_row)
    uses = np.bincount(blocks) if len(blocks) else np.zeros(0, dtype=np.int64)
    return results.Trace(
        file=Path(spec.file).name, requests=sl.count, trace_requests=len(data), speed=spec.speed,
        start_s=sl.origin_ms / 1000.0, span_s=sl.end, block_tokens=spec.block_tokens,
        too_long=spec.too_long, max_model_len=limits.max_model_len, max_model_len_source=limits.source,
        max_input_tokens=limits.max_input_tokens, added_tokens=limits.added,
        clipped=int(np.count_nonzero(clipped)), clipped_input_tokens=int((inp0 - inp).sum()),
        clipped_output_tokens=int((out0 - out).sum()),
        input_tokens=int(inp.sum()), output_tokens=int(out.sum()),
        blocks=int(len(blocks)), distinct_blocks=int(len(uses)),
        shared_blocks=int(np.count_nonzero(uses > 1)),
        block_reuse=float(1 - len(uses) / len(blocks)) if len(blocks) else 0.0,
    )
