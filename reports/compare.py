"""Several runs, or the targets of one multi-target run, side by side in one HTML file.

Each argument is ``RUNDIR[:label]``. Every target of every RunDir becomes one entry (the fresh starts of
a cold-start study: one entry per architecture; the runs of a repeated run: one entry per target, the median
of its runs with a dot per run, from repeats.json); the first entry is the baseline the ratios are computed
against ("4.1x lower p99").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import RunDirError
from loadgen.records.results import RepeatTarget
from loadgen.records.rundir import write_text
from reports import fmt, report_model
from reports.figures import overview_figures, warmup_figure
from reports.headline import architectures_headline, cold_start_headline
from reports.html import render
from reports.plots import overlay_timeseries_plot
from reports.rundir_loader import RunData, TargetData, load_rundir


@dataclass
class Entry:
    label: str
    run: RunData
    target: TargetData
    starts: list[TargetData] | None = None  # the fresh starts of one architecture of a cold-start study
    group: str | None = None
    repeat: RepeatTarget | None = None  # a repeated target: its repeats.json entry (its name there: group)
    runs: list[TargetData] | None = None  # a repeated target: its runs (target is the first)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'runs/x:naive' -> ('runs/x', 'naive'); a path that itself holds ':' is kept whole when it exists."""
    if os.path.isdir(spec) or ":" not in spec:
        return spec, None
    path, _, label = spec.rpartition(":")
    return path, (label or None)


def entries_of(specs: list[str]) -> list[Entry]:
    """Load each RunDir once and list its targets, labelled; labels are made unique."""
    out: list[Entry] = []
    for spec in specs:
        path, label = parse_spec(spec)
        run = load_rundir(path)
        groups = run.groups()
        many = len(groups) > 1
        for group, tds in groups:  # fresh starts stay under their architecture: one entry
            if label:
                name = f"{label}/{group}" if many else label
            else:
                name = group
            if run.cold_start and group in run.cold_start:
                out.append(Entry(name, run, tds[0], tds, group))
            elif run.repeated and group in (run.repeated.targets or {}):
                out.append(Entry(name, run, tds[0], group=group, repeat=run.repeated.targets[group], runs=tds))
            else:
                out.extend(Entry(name if len(tds) == 1 else f"{name}/{td.name}", run, td) for td in tds)
    names = [e.label for e in out]
    if len(set(names)) < len(names):  # same target names in several runs: qualify by the RunDir
        for e in out:
            if names.count(e.label) > 1:
                e.label = f"{e.run.path.name}/{e.label}"
    return out


MOSTLY = 0.5  # an entry with more than this share of failed requests is warned about at the top


def caveats(e: Entry, state: str, warnings: list[str]) -> list[str]:
    """What a reader must know about an entry before reading its numbers, said at the top of a comparison: it is
    not valid (and why), or most of its requests failed, so its latencies describe the few that succeeded."""
    out = []
    if state == "invalid":
        why = [w for w in warnings if not w.startswith("INCOMPLETE RUN")] or warnings  # the cause, not the banner
        out.append(f"{e.label} is INVALID: " + ("; ".join(why) or "see its own report") + ". Its numbers do not "
                   "describe the service; compare them with care.")
    ov = e.target.result.overall if e.target.result else None
    if ov is not None and ov.count and ov.error_rate is not None and ov.error_rate > MOSTLY:
        out.append(f"{e.label}: {ov.count - (ov.ok or 0):,} of its {ov.count:,} requests did not succeed "
                   f"({fmt.pct(ov.error_rate)} errors): its latencies describe the {ov.ok or 0:,} that did.")
    return out


def compare_context(entries: list[Entry]) -> dict:
    rows, top = [], []
    for e in entries:
        tds = e.starts or e.runs or [e.target]
        v = report_model.verdict(RunData(e.run.path, e.run.meta, e.run.scenario, tds), use_meta=False)
        state = v["state"]
        if e.repeat is not None:  # judged over its runs; the runs alone only for what makes them invalid
            slos = [r for r in e.repeat.slo or [] if r.applies is not False]
            state = state if state == "invalid" else "passed" if all(r.passed for r in slos) else "failed"
        else:
            slos = [r for td in tds for r in (td.result.slo if td.result else None) or [] if r.applies is not False]
        more = f" ({len(tds)} fresh starts)" if e.starts else f" ({len(tds)} runs)" if e.repeat is not None else ""
        rows.append({"label": e.label + more, "scenario": e.run.name, "rundir": e.run.path.name, "state": state,
                     "slo": f"{sum(1 for r in slos if r.passed)}/{len(slos)} met", "warnings": v["warnings"]})
        top += caveats(e, state, v["warnings"])
    what = "architecture" if any(e.starts for e in entries) else report_model.compared(
        [(e.run, e.target) for e in entries])
    singular, plural = report_model.COMPARED[what]
    plain = [e for e in entries if not e.starts]
    single = [e for e in plain if e.repeat is None]
    cold = {e.label: e.run.cold_start[e.group] for e in entries if e.starts}
    figs = overview_figures([(e.label, e.starts or e.runs or e.target) for e in entries])  # runs pooled
    ts = overlay_timeseries_plot([(e.label, e.target.result) for e in single if e.target.result])
    if ts:
        figs.insert(1, {"id": "overlay", "title": "Over time", "uri": ts,
                        "caption": "Per second: latency p99 and successful responses of each entry, on each run's own "
                                   "clock (seconds since its start); phases of the first entry shaded."})
    if cold:
        h = cold_start_headline(cold)
        h.figure = warmup_figure(cold)
    else:
        h = architectures_headline([(e.label, e.target) for e in single], what)
    names = " vs ".join(e.label for e in entries)
    return {
        "title": f"latbench: {plural} compared · {names}",
        "heading": f"{plural.capitalize()} compared: {names}",
        "what": singular,
        "caveats": top,
        "entries": rows,
        "headline": h,
        "comparison": report_model.comparison([(e.label, e.target.result) for e in plain],
                                              {e.label: (e.group, e.repeat) for e in plain if e.repeat is not None},
                                              singular),
        "cold_comparison": report_model.cold_start_comparison(cold) if cold else None,
        "figures": figs,
    }


def render_compare(specs: list[str]) -> str:
    entries = entries_of(specs)
    if not entries:
        raise RunDirError("nothing to compare: the RunDirs hold no targets")
    return render("compare.html", **compare_context(entries))


def write_compare(specs: list[str], out) -> Path:
    return write_text(out, render_compare(specs))
