"""The capacity report: latency-throughput curve, the sustainable bracket, the knee and the headroom.

Reads capacity.json (written by ``latbench capacity``) and renders report.html into the same RunDir.

One idea at several stages, capacity planning, so one file name: :mod:`loadgen.run.capacity` (the search),
:mod:`loadgen.analysis.capacity` (the judgement), :mod:`loadgen.cli.capacity` (the command).
"""

from __future__ import annotations

from pathlib import Path

from loadgen.analysis.capacity import headline
from loadgen.analysis.repeated import spread_headline
from loadgen.records.results import Capacity
from loadgen.records.rundir import CAPACITY, read_result, write_text
from loadgen.scenario.slo import parse_slo
from reports.drawing import figure, to_uri
from reports.html import render
from reports.plots import ms_log_axis


def _curve(result: Capacity) -> str:
    steps = sorted(result.steps, key=lambda s: s.qps)
    fig, axes = figure(10, 3.6, 1, 2)
    lat, thr = axes[0][0], axes[0][1]
    for key, label, color in (("latency_p50", "p50", "#1f77b4"), ("latency_p99", "p99", "#d62728")):
        pts = [(s.qps, getattr(s, key) * 1e3) for s in steps if getattr(s, key) is not None]
        if pts:
            lat.plot(*zip(*pts), marker="o", color=color, label=f"latency {label}")
    for s in steps:
        if not s.passed and s.latency_p99 is not None:
            lat.plot(s.qps, s.latency_p99 * 1e3, "x", color="#000000", ms=9)
    for expr, value in _latency_limits(result):
        lat.axhline(value * 1e3, color="#7f7f7f", ls="--", lw=0.8)
        lat.text(0, value * 1e3, " " + expr, transform=lat.get_yaxis_transform(), fontsize=7, va="bottom",
                 color="#555555")
    lo, hi = result.bracket
    for ax in (lat, thr):
        if lo is not None:
            ax.axvline(lo, color="#2ca02c", lw=1)
        if hi is not None:
            ax.axvline(hi, color="#d62728", lw=1, ls=":")
        if result.knee_qps:
            ax.axvline(result.knee_qps, color="#ff7f0e", lw=0.8, ls="-.")
        ax.set_xlabel("offered rate (req/s)")
    lat.set_yscale("log")
    ms_log_axis(lat.yaxis)
    lat.set_ylabel("latency (ms)")
    lat.legend(fontsize=8)
    thr.plot([s.qps for s in steps], [s.achieved_qps for s in steps], marker="o", color="#1f77b4", label="completed")
    top = max([s.qps for s in steps] or [1])
    thr.plot([0, top], [0, top], color="#7f7f7f", ls="--", lw=0.8, label="offered")
    thr.set_ylabel("completed (req/s)")
    thr.legend(fontsize=8)
    return to_uri(fig)


def _latency_limits(result: Capacity):
    for expr in result.slo or []:
        s = parse_slo(expr)
        if s.metric == "latency" and s.stat in ("p50", "p99"):
            yield expr, s.threshold


def _brackets(top: Capacity) -> str:
    """Each search's bracket as a bar from the rate it held to the first it failed (log axis), with the
    median held rate and its between-search 95% interval."""
    held = top.spread.held
    fig, axes = figure(8, 0.5 + 0.45 * len(top.searches))
    ax = axes[0][0]
    if held.ci:
        ax.axvspan(held.ci[0], held.ci[1], color="#2ca02c", alpha=0.12,
                   label="held: between-search 95% interval")
    if held.median is not None:
        ax.axvline(held.median, color="#2ca02c", lw=1.2, label="held: median")
    for s in top.searches:
        lo, hi = s.bracket
        y = s.search
        if lo is not None:
            ax.plot([lo, hi if hi is not None else lo], [y, y], color="#7f7f7f", lw=3)
            ax.plot(lo, y, "o", color="#2ca02c")
        if hi is not None:
            ax.plot(hi, y, "x", color="#d62728", ms=8)
    ax.set_xscale("log")
    ax.set_yticks([s.search for s in top.searches], [f"search {s.search}" for s in top.searches])
    ax.invert_yaxis()
    ax.set_xlabel("rate (req/s, log): o held, x first failing")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_uri(fig)


def write_capacity_report(rundir_path) -> Path:
    """report.html of a capacity RunDir (one search, or ``--repeat N`` searches and their spread)."""
    root = Path(rundir_path)
    result = Capacity.model_validate(read_result(root / CAPACITY))
    if "searches" in result.model_fields_set:
        html = render("capacity_repeat.html", title=f"capacity: {result.scenario}", r=result,
                      headline=spread_headline(result), plot=_brackets(result) if result.searches else None)
        out = root / "report.html"
        out.write_text(html, encoding="utf-8")
        return out
    html = render("capacity.html", title=f"capacity: {result.scenario}", r=result, headline=headline(result),
                  curve=_curve(result) if result.steps else None)
    return write_text(root / "report.html", html)
