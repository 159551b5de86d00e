"""``latbench trace generate`` and ``latbench trace show``: request traces in Mooncake's format, written or
described; nothing is sent.

One idea at several stages, request traces, so one file name: :mod:`loadgen.scenario.trace` (reading a trace).
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from loadgen.cli.common import exits_on_errors
from loadgen.errors import UsageError
from loadgen.scenario.model import TokenDist
from loadgen.scenario.trace import TraceError, read_trace
from loadgen.schedule.tracegen import generate_trace, write_trace


@click.group(help="Request traces (Mooncake's JSON lines, or CSV): generate one, or describe one.")
def trace() -> None:
    pass


@trace.command(help="Write a synthetic trace of N requests in Mooncake's format (JSON lines; CSV when OUT ends in "
                    ".csv): arrival times, input and output lengths, and hash ids for shared prefixes.")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("-n", "--requests", "n", type=click.IntRange(1, 10_000_000), default=1000, show_default=True)
@click.option("--qps", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="mean arrival rate, requests per second")
@click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), default="poisson", show_default=True)
@click.option("--burstiness", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="gamma shape: 1 = Poisson, < 1 burstier")
@click.option("--input-tokens", type=click.FloatRange(min=1), default=256, show_default=True,
              help="mean of each request's own input part, in tokens (after its group's prefix)")
@click.option("--input-stddev", type=click.FloatRange(min=0), default=0, show_default=True)
@click.option("--output-tokens", type=click.FloatRange(min=1), default=64, show_default=True,
              help="mean output length in tokens")
@click.option("--output-stddev", type=click.FloatRange(min=0), default=0, show_default=True)
@click.option("--groups", type=click.IntRange(0), default=8, show_default=True,
              help="shared prefixes (system prompts, documents); 0: no request shares a prefix")
@click.option("--prefix-tokens", type=click.IntRange(0), default=1024, show_default=True,
              help="tokens of each shared prefix (only its whole blocks are shared)")
@click.option("--prefix-share", type=click.FloatRange(0, 1), default=1.0, show_default=True,
              help="share of the requests that open with a group's prefix")
@click.option("--zipf", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="group g drawn with weight 1/(g+1)^zipf (0: uniformly)")
@click.option("--block-tokens", type=click.IntRange(1), default=512, show_default=True,
              help="tokens of one hash-id block (Mooncake: 512); give the scenario's load.trace.block_tokens")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@exits_on_errors
def generate(out, n, qps, arrival, burstiness, input_tokens, input_stddev, output_tokens, output_stddev, groups,
             prefix_tokens, prefix_share, zipf, block_tokens, seed) -> None:
    rows = generate_trace(n, qps, input_tokens=TokenDist(mean=input_tokens, stddev=input_stddev),
                          output_tokens=TokenDist(mean=output_tokens, stddev=output_stddev), arrival=arrival,
                          burstiness=burstiness, groups=groups, prefix_tokens=prefix_tokens,
                          prefix_share=prefix_share, zipf=zipf, block_tokens=block_tokens, seed=seed)
    try:
        path = write_trace(rows, out)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the trace: {exc.strerror or exc}") from None
    click.echo(f"{path}: {len(rows)} requests over {rows[-1]['timestamp'] / 1000:.1f} s")


@trace.command(help="Describe a trace (JSON lines or CSV, Mooncake's format read as is): requests, span, rate, "
                    "lengths, and how its prompts share hash-id blocks.")
@click.argument("file", type=click.Path(dir_okay=False))
@exits_on_errors
def show(file) -> None:
    try:
        data = read_trace(Path(file))
    except TraceError as exc:
        raise UsageError("\n".join(exc.errors)) from None
    n, t = len(data), data.times_ms / 1000.0
    span = float(t[-1] - t[0])
    ids = data.hash_values
    _, uses = np.unique(ids, return_counts=True) if len(ids) else (None, np.zeros(0))
    lines = [f"{file}: {n} requests over {span:.3f} s (from {t[0]:g} s to {t[-1]:g} s of trace time)",
             f"  mean rate        {n / span:.3f} req/s" if span > 0 else "  mean rate        -",
             _lengths("input tokens", data.input_tokens), _lengths("output tokens", data.output_tokens),
             f"  hash ids         {len(ids)} block references, {len(uses)} distinct, "
             f"{int(np.count_nonzero(uses > 1))} used by more than one request"
             + (f"; {1 - len(uses) / len(ids):.1%} of references repeat an earlier block" if len(ids) else "")]
    click.echo("\n".join(lines))


def _lengths(name: str, values: np.ndarray) -> str:
    p = np.percentile(values, [50, 99], method="inverted_cdf")
    return (f"  {name:<16} mean {values.mean():.1f}, p50 {int(p[0])}, p99 {int(p[1])}, "
            f"min {int(values.min())}, max {int(values.max())}")
