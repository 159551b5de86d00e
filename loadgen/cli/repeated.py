"""What a repeated run prints at its end: per target, the statistics of each run and across the runs.

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

from rich.table import Table

from loadgen.records.results import RepeatTarget
from loadgen.units import fmt_ms

#: (repeats.json statistic, column) shown in the terminal; the report has them all
SHOWN = (("latency.p50", "lat p50"), ("latency.p99", "lat p99"), ("ttft.p50", "ttft p50"), ("ttft.p99", "ttft p99"),
         ("error_rate", "errors"), ("achieved_qps", "qps"))


def _show(key: str, v) -> str:
    if v is None:
        return "-"
    if key == "error_rate":
        return f"{v * 100:.2f}%"
    if key == "achieved_qps":
        return f"{v:.1f}"
    return fmt_ms(v)


def between_table(name: str, group: RepeatTarget) -> Table:
    """One row per run, then the median and the between-run 95% interval (repeats.json's ``targets[name]``)."""
    stats = [(k, col) for k, col in SHOWN if k in (group.stats or {})]
    runs = group.runs or []
    t = Table(title=f"{name}: {len(runs)} runs", title_justify="left")
    t.add_column("run", justify="left")
    for _, col in stats:
        t.add_column(col, justify="right")
    for i, r in enumerate(runs):
        t.add_row(r.dir, *[_show(k, group.stat(k).values[i]) for k, _ in stats])
    t.add_row("median", *[_show(k, group.stat(k).median) for k, _ in stats], style="bold")
    t.add_row("95% interval", *[(f"{_show(k, group.stat(k).ci[0])}..{_show(k, group.stat(k).ci[1])}"
                                 if group.stat(k).ci else "-") for k, _ in stats])
    return t
