"""Several runs, or the targets of one multi-target run, side by side in one HTML file.

Each argument is ``RUNDIR[:label]``. Every target of every RunDir becomes one entry; the first entry
is the baseline the ratios are computed against ("4.1x lower p99"). A repeated RunDir's target is one
entry over its runs: the median of its runs, with a dot per run (from repeats.json), and one curve per
run in the figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from reports import model
from reports.figures import overview_figures
from reports.html import render
from reports.loader import RunData, TargetData, load_rundir
from reports.plots import overlay_timeseries_plot


@dataclass
class Entry:
    label: str
    run: RunData
    target: TargetData  # a repeated target: its first run
    group: dict | None = None  # a repeated target: its repeats.json entry
    runs: list[TargetData] = field(default_factory=list)  # a repeated target: all its runs

    def labelled_runs(self) -> list[tuple[str, TargetData]]:
        """(label, target data) of each run, for the figures."""
        if self.group is None:
            return [(self.label, self.target)]
        return [(f"{self.label} · rep{k}", td) for k, td in enumerate(self.runs, 1)]


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
        groups = (run.repeats or {}).get("targets", {})
        by_dir = {td.dir.name: td for td in run.targets}
        units = ([(g, [by_dir[r["dir"]] for r in grp["runs"] if r["dir"] in by_dir], grp) for g, grp in groups.items()]
                 if groups else [(td.name, [td], None) for td in run.targets])
        units = [u for u in units if u[1]]
        many = len(units) > 1
        for name, tds, grp in units:
            if label:
                name = f"{label}/{name}" if many else label
            grp = None if grp is None else grp | {"name": tds[0].meta.get("group") or name}
            out.append(Entry(name, run, tds[0], grp, tds if grp is not None else []))
    names = [e.label for e in out]
    if len(set(names)) < len(names):  # same target names in several runs: qualify by the RunDir
        for e in out:
            if names.count(e.label) > 1:
                e.label = f"{e.run.path.name}/{e.label}"
    return out


def compare_context(entries: list[Entry]) -> dict:
    rows = []
    for e in entries:
        v = model.verdict(RunData(e.run.path, e.run.meta, e.run.scenario, e.runs or [e.target]), use_meta=False)
        state, warnings = v["state"], v["warnings"]
        if e.group is not None:  # judged over its runs: the runs alone only for what makes them invalid
            slos = [r for r in e.group.get("slo") or [] if r.get("applies", True)]
            if state != "invalid":
                state = "passed" if all(r.get("passed") for r in slos) else "failed"
        else:
            slos = [r for r in (e.target.summary or {}).get("slo") or [] if r.get("applies", True)]
        rows.append({"label": e.label, "scenario": e.run.name, "rundir": e.run.path.name, "state": state,
                     "slo": f"{sum(1 for r in slos if r.get('passed'))}/{len(slos)} met"
                            + (f" over {len(e.runs)} runs" if e.group is not None else ""), "warnings": warnings})
    labelled = [lr for e in entries for lr in e.labelled_runs()]
    figs = overview_figures(labelled)
    ts = overlay_timeseries_plot([(label, td.summary) for label, td in labelled if td.summary])
    if ts:
        figs.insert(1, {"id": "overlay", "title": "Over time", "uri": ts,
                        "caption": "Per second: latency p99 and successful responses of each entry, on each run's own "
                                   "clock (seconds since its start); phases of the first entry shaded."})
    return {
        "title": "latbench comparison · " + " vs ".join(e.label for e in entries),
        "entries": rows,
        "comparison": model.comparison([(e.label, e.target.summary) for e in entries],
                                       {e.label: e.group for e in entries if e.group is not None}),
        "figures": figs,
    }


def render_compare(specs: list[str]) -> str:
    entries = entries_of(specs)
    if not entries:
        raise ValueError("nothing to compare: the RunDirs hold no targets")
    return render("compare.html", **compare_context(entries))


def write_compare(specs: list[str], out) -> Path:
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_compare(specs), encoding="utf-8")
    tmp.replace(out)
    return out
