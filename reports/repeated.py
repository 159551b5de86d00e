"""A repeated run in a report: the between-run tables, the objectives judged over the runs, and the
run-to-run plot, all read from repeats.json (written by the run; nothing is recomputed here).

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

from loadgen.records.results import Repeats, RunStat
from reports import fmt
from reports.drawing import figure, to_uri
from reports.plots import PALETTE, ms_log_axis
from reports.report_model import Cell, Headline
from reports.strips import REPEATS_SRC, strips_for

#: rows of the between-run table: (repeats.json statistic, label, display kind)
ROWS = tuple((f"{m}.{s}", f"{label} {s}", "ms") for m, label in (("latency", "latency"), ("ttft", "TTFT"),
                                                                   ("itl", "ITL"), ("tpot", "TPOT"))
             for s in ("p50", "p90", "p99", "mean")) + (("error_rate", "error rate", "pct"),
                                                         ("achieved_qps", "achieved req/s", "rate"))


def ci_kind(kind: str) -> str:
    """The data-fmt of an interval cell: 'ci' for milliseconds (as elsewhere), 'ci-pct' / 'ci-rate' otherwise."""
    return "ci" if kind == "ms" else f"ci-{kind}"


def between_tables(repeats: Repeats) -> list[dict]:
    """Per target: one row per statistic measured, with each run's value, the median, the 95% interval
    and a strip of the runs (dots), the interval (band) and the median (tick)."""
    out = []
    for group, g in (repeats.targets or {}).items():
        rows = []
        for key, label, kind in ROWS:
            st = g.stat(key)
            if st.median is None:
                continue
            base = f"{REPEATS_SRC}targets/{group}/stats/{key}"
            (strip,) = strips_for([st.values], [st.ci], kind)
            rows.append({"label": label,
                         "runs": [Cell(fmt.fmt(v, kind), f"{base}/values/{i}", kind, group)
                                  for i, v in enumerate(st.values)],
                         "median": Cell(fmt.fmt(st.median, kind), f"{base}/median", kind, group),
                         "ci": Cell(fmt.ci(st.ci, kind), f"{base}/ci", ci_kind(kind), group)
                         if st.ci else Cell(fmt.DASH),
                         "strip": strip})
        out.append({"name": group, "runs": [r.dir for r in g.runs], "rows": rows})
    return out


def slo_rows(repeats: Repeats) -> list[dict]:
    """The objectives as the verdict judged them: per target, over its runs."""
    rows = []
    for group, g in (repeats.targets or {}).items():
        for i, r in enumerate(g.slo or []):
            if r.applies is False:
                continue
            kind = fmt.slo_kind(r.stat, r.metric)
            src = f"{REPEATS_SRC}targets/{group}/slo/{i}"
            rows.append({
                "target": group, "expr": r.expr or "", "passed": bool(r.passed),
                "value": Cell(fmt.fmt(r.value, kind), f"{src}/value", kind, group),
                "ci": Cell(fmt.ci(r.ci, kind), f"{src}/ci", ci_kind(kind), group) if r.ci else Cell(fmt.DASH),
                "reason": "; ".join(x for x in (r.basis, r.reason) if x),
                "runs": ", ".join(fmt.fmt(v, kind) for v in r.values or []),
            })
    return rows


def run_to_run_plot(repeats: Repeats) -> str | None:
    """Latency p50 (solid) and p99 (dashed) of each repetition, one colour per target: the noise the
    verdict accounted for, in the order the runs were made."""
    groups = [(name, g) for name, g in (repeats.targets or {}).items()
              if any(v is not None for v in g.stat("latency.p50").values or [])]
    if not groups:
        return None
    fig, axes = figure(7.5, 3.0)
    ax = axes[0][0]
    for i, (name, g) in enumerate(groups):
        reps = [r.repetition for r in g.runs]
        for key, style in (("latency.p50", "-"), ("latency.p99", "--")):
            vals = g.stat(key).values or []
            pts = [(k, v * 1e3) for k, v in zip(reps, vals) if v is not None]
            if pts:
                ax.plot(*zip(*pts), style, marker="o", color=PALETTE[i % len(PALETTE)], ms=4,
                        label=f"{name} {key.split('.')[1]}")
    ax.set_yscale("log")
    ms_log_axis(ax.yaxis)
    ax.set_xlabel("repetition (in the order run; targets interleaved)")
    ax.set_ylabel("latency (ms, log)")
    ax.set_xticks(sorted({r.repetition for _, g in groups for r in g.runs}))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return to_uri(fig)


def repeated_headline(repeats: Repeats) -> Headline:
    """The headline of a repeated run: per target, the median latency p50 and p99 over its runs, each with
    its between-run 95% interval (a sentence is a list of str and Cell parts, as in reports.headline)."""
    sentences = []
    for group, g in (repeats.targets or {}).items():
        sent: list = [f"{group}: latency"]
        for stat in ("p50", "p99"):
            st: RunStat = g.stat(f"latency.{stat}")
            if st.median is None:
                continue
            base = f"{REPEATS_SRC}targets/{group}/stats/latency.{stat}"
            sent += [("," if stat != "p50" else "") + f" {stat} ",
                     Cell(fmt.ms(st.median), f"{base}/median", "ms", group), " ms"]
            if st.ci:
                sent += [" ", Cell(fmt.ci(st.ci), f"{base}/ci", "ci", group, css="rng")]
        missed = sum(1 for r in g.slo or [] if r.applies is not False and not r.passed)
        sent.append(f", the median of {len(g.runs)} runs"
                    + (f"; {missed} objective{'s' if missed > 1 else ''} missed" if missed else "") + ".")
        sentences.append(sent)
    return Headline("repeated", f"Result over {repeats.runs} runs", sentences,
                    ["Medians of the runs; in brackets their between-run 95% interval (Student t over the runs' log "
                     "values): the noise between runs, which one run's interval cannot show."],
                    as_list=len(sentences) > 1)


def section(repeats: Repeats | None) -> dict | None:
    """Everything the 'Between runs' section of report.html shows; None for a single run."""
    if not repeats:
        return None
    plot = run_to_run_plot(repeats)
    return {"runs": repeats.runs, "judge": repeats.judge, "method": repeats.method or "",
            "order": repeats.order or [], "tables": between_tables(repeats),
            "figure": {"id": "run-to-run", "title": "Run to run", "uri": plot,
                       "caption": "Latency p50 (solid) and p99 (dashed) of each repetition of each target: the "
                                  "between-run noise the verdict accounted for."} if plot else None}
