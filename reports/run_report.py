"""One run's HTML report: loads the RunDir, builds the model and figures, renders report.html."""

from __future__ import annotations

from pathlib import Path

from loadgen.analysis.closedloop import HELD_MIN
from loadgen.records.rundir import write_text
from reports import breakdowns, repeated, report_model, telemetry
from reports.figures import overview_figures, target_figures, warmup_figure
from reports.headline import headline
from reports.html import render
from reports.report_model import Headline
from reports.rundir_loader import RunData


def target_section(td, i: int) -> dict:
    s = td.result
    sec = {"name": report_model.target_label(td), "target_name": td.name, "anchor": f"target-{i}", "moved": "",
           "info": report_model.target_info(td), "ran": s is not None, "notes": list((s.notes if s else None) or []),
           "complete": bool(s and s.complete is not False) and not td.recomputed,
           "media_cache_note": breakdowns.media_cache_note(s) if s is not None else ""}
    if s is None:
        return sec | {"scopes": [], "outcomes": None, "rates": None, "tokens": None, "figures": [], "turns": [],
                      "turns_note": "", "closed": [], "image_sizes": [], "tools": [], "tools_note": "",
                      "structured_note": "", "server": {"rows": []}, "checklist": []}
    sec["scopes"] = [{"label": label, "recorded": sc.is_recorded,
                      "rows": report_model.percentile_table(sc, td.name, prefix)}
                     for label, prefix, sc in s.scopes()]
    cols, rows = report_model.outcome_rows(s, td.name)
    sec["outcomes"] = {"cols": cols, "rows": rows, "note": report_model.outcome_note(s)}
    cols, rows = report_model.rate_rows(s, td.name)
    sec["rates"] = {"cols": cols, "rows": rows, "note": report_model.rates_note(s)}
    cols, rows = report_model.rate_rows(s, td.name, report_model.TOKEN_RATES)
    sec["tokens"] = {"cols": cols, "rows": rows}
    sec["closed"] = report_model.closed_loop_rows(s, td.name)
    sec["turns"], sec["turns_note"] = report_model.turn_rows(s, td.name), report_model.conversation_note(s)
    sec["image_sizes"], sec["tools"] = breakdowns.image_rows(s, td.name), breakdowns.tool_rows(s, td.name)
    sec["tools_note"], sec["structured_note"] = breakdowns.tool_note(s), breakdowns.structured_note(s)
    cols, rows, note = telemetry.phase_rows(s, td.name)
    sec["server"], sec["checklist"] = {"cols": cols, "rows": rows, "note": note}, telemetry.checklist_rows(s, td.name)
    if s.reset is not None and not s.reset.done:  # the run started from what earlier runs left: said where it shows
        sec["notes"].append(s.reset.text)
    sec["figures"] = target_figures(td)
    if td.unreadable:  # found while the figures read the records
        sec["notes"].append(td.unreadable)
    return sec


def headline_block(run: RunData, sections: list[dict]) -> Headline | None:
    """The headline (see :mod:`reports.headline`) with its figure: the warm-up curve of a cold-start
    study, the marked time series of a burst (taken from its target's section, drawn once)."""
    h = headline(run)
    if h is None:
        return None
    if h.kind == "cold_start":
        h.figure = warmup_figure(run.cold_start)
    elif h.kind == "burst":
        td = next(td for td in run.targets if td.result and td.result.burst)
        sec = next(sec for sec in sections if sec["target_name"] == td.name)
        h.figure = next((f for f in sec["figures"] if f["id"] == "timeseries"), None)
        h.figure_target = td.name
    return h


def groups_context(run: RunData, sections: list[dict]) -> list[dict]:
    """Target sections under their architecture: a cold-start study's fresh starts form one group, with a
    table of its starts; any other target is a group of one."""
    by_name = {s["target_name"]: s for s in sections}
    out = []
    for gi, (name, tds) in enumerate(run.groups()):
        starts = bool(run.cold_start and name in run.cold_start)
        out.append({"name": name, "anchor": f"group-{gi}" if starts else by_name[tds[0].name]["anchor"],
                    "starts": starts, "sections": [by_name[td.name] for td in tds],
                    "start_rows": report_model.start_rows(run.cold_start[name], name) if starts else []})
    return out


def run_context(run: RunData) -> dict:
    """Everything report.html shows, computed; the template only lays it out."""
    cold = bool(run.cold_start)
    labelled = [(name, tds) for name, tds in run.groups()] if cold else [(td.name, td) for td in run.targets]
    sections = [target_section(td, i) for i, td in enumerate(run.targets)]
    h = headline_block(run, sections)
    for sec in sections:
        if h and h.figure_target == sec["target_name"]:  # shown once, in the headline
            sec["figures"] = [f for f in sec["figures"] if f["id"] != "timeseries"]
            sec["moved"] = "The time series is in the headline above."
    return {
        "title": f"latbench · {run.name}",
        "scenario": run.name,
        "header": report_model.header(run),
        "verdict": report_model.verdict(run),
        "headline": h,
        "slos": repeated.slo_rows(run.repeated) if run.repeated else report_model.slo_rows(run.targets),
        "comparison": None if cold else run_comparison(run),
        "between": repeated.section(run.repeated),
        "cold_comparison": report_model.cold_start_comparison(run.cold_start) if cold else None,
        "start_columns": [c[2] for c in report_model.START_COLUMNS],
        "overview": overview_figures(labelled),
        "groups": groups_context(run, sections),
        "pcts": report_model.PCTS,
        "turn_cols": [c[-1] for c in report_model.TURN_COLUMNS],
        "image_cols": breakdowns.IMAGE_COLUMNS, "tool_cols": breakdowns.TOOL_COLUMNS,
        "closed_cols": [c[-1] for c in report_model.CLOSED_COLUMNS],
        "held_min": f"{HELD_MIN:.0%}",
    }


def run_comparison(run: RunData) -> dict | None:
    """The targets side by side; a repeated run's targets by the median of their runs, with per-run dots."""
    if run.repeated:
        groups = {name: (name, g) for name, g in (run.repeated.targets or {}).items()}
        return report_model.comparison([(name, None) for name in groups], groups)
    what = report_model.compared([(run, td) for td in run.targets if td.result])
    return report_model.comparison([(td.name, td.result) for td in run.targets], what=what)


def render_run(run: RunData) -> str:
    return render("report.html", **run_context(run))


def write_report(run: RunData, out: Path) -> Path:
    """report.html of ``run`` at ``out``: atomically, through the redaction every written byte takes."""
    return write_text(out, render_run(run))
