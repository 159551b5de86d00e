"""The capacity report: latency-throughput curve, the sustainable bracket, the knee and the headroom.

Reads capacity.json (written by ``latbench capacity``) and renders report.html into the same RunDir.
"""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.analysis.capacity import headline
from loadgen.records.rundir import write_text
from loadgen.scenario.slo import parse_slo
from reports.html import render
from reports.plots import figure, ms_log_axis, plot_style, to_uri


def _curve(result: dict) -> str:
    steps = sorted(result["steps"], key=lambda s: s["qps"])
    with plot_style():
        fig, axes = figure(10, 3.6, 1, 2)
        lat, thr = axes[0][0], axes[0][1]
        for key, label, color in (("latency_p50", "p50", "#1f77b4"), ("latency_p99", "p99", "#d62728")):
            pts = [(s["qps"], s[key] * 1e3) for s in steps if s[key] is not None]
            if pts:
                lat.plot(*zip(*pts), marker="o", color=color, label=f"latency {label}")
        for s in steps:
            if not s["passed"] and s["latency_p99"] is not None:
                lat.plot(s["qps"], s["latency_p99"] * 1e3, "x", color="#000000", ms=9)
        for expr, value in _latency_limits(result):
            lat.axhline(value * 1e3, color="#7f7f7f", ls="--", lw=0.8)
            lat.text(lat.get_xlim()[0], value * 1e3, " " + expr, fontsize=7, va="bottom", color="#555555")
        lo, hi = result["bracket"]
        for ax in (lat, thr):
            if lo is not None:
                ax.axvline(lo, color="#2ca02c", lw=1)
            if hi is not None:
                ax.axvline(hi, color="#d62728", lw=1, ls=":")
            if result.get("knee_qps"):
                ax.axvline(result["knee_qps"], color="#ff7f0e", lw=0.8, ls="-.")
            ax.set_xlabel("offered rate (req/s)")
        lat.set_yscale("log")
        ms_log_axis(lat.yaxis)
        lat.set_ylabel("latency (ms)")
        lat.legend(fontsize=8)
        thr.plot([s["qps"] for s in steps], [s["achieved_qps"] for s in steps], marker="o", label="completed")
        top = max([s["qps"] for s in steps] or [1])
        thr.plot([0, top], [0, top], color="#7f7f7f", ls="--", lw=0.8, label="offered")
        thr.set_ylabel("completed (req/s)")
        thr.legend(fontsize=8)
        return to_uri(fig)


def _latency_limits(result: dict):
    for expr in result["slo"]:
        s = parse_slo(expr)
        if s.metric == "latency" and s.stat in ("p50", "p99"):
            yield expr, s.threshold


def write_capacity_report(rundir_path) -> Path:
    """report.html of a capacity RunDir."""
    root = Path(rundir_path)
    result = json.loads((root / "capacity.json").read_text())
    html = render("capacity.html", title=f"capacity: {result['scenario']}", r=result, headline=headline(result),
                  curve=_curve(result) if result["steps"] else None)
    return write_text(root / "report.html", html)
