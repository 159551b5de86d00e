"""summary.md: the verdict and headline numbers as GitHub-flavoured Markdown, for pull-request comments
and ``$GITHUB_STEP_SUMMARY``. Text from the RunDir is HTML-escaped, pipes are escaped in cells and control
characters are shown as escapes (``\\x1b``)."""

from __future__ import annotations

import html
from pathlib import Path

from loadgen.analysis.host import notable_lines
from loadgen.metric_registry import outcome_counts
from loadgen.records.results import MetricStats, Scope
from loadgen.records.rundir import write_text
from loadgen.redact import escape_control
from reports import breakdowns, fmt, repeated, report_model
from reports.headline import headline
from reports.run_report import run_comparison
from reports.rundir_loader import RunData
from reports.telemetry import checklist_lines

ICON = {"passed": "✅", "failed": "❌", "invalid": "⚠️"}


def esc(text) -> str:
    """Safe inside a Markdown table cell: no HTML, no pipes, no newlines, no control characters."""
    text = html.escape(escape_control(str(text), keep="\n"), quote=False)
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def code(text) -> str:
    """Inside a code span HTML is shown literally, so only backticks, pipes and newlines need care."""
    return "`" + escape_control(str(text), keep="\n").replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def _table(head: list[str], rows: list[list[str]], text_cols: int = 1) -> list[str]:
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i < text_cols else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def sentence(parts: list) -> str:
    """A headline sentence in Markdown: numbers in bold."""
    return "".join(esc(p) if isinstance(p, str) else esc(p.text) if p.css == "rng" else f"**{esc(p.text)}**"
                   for p in parts)


def headline_lines(run: RunData) -> list[str]:
    """The report's headline (the same parts as report.html's), as paragraphs and a quoted note."""
    h = headline(run)
    if h is None:
        return []
    if h.as_list:
        lines = [f"**{esc(h.title)}.**", "\n".join("- " + sentence(s) for s in h.sentences)]
    else:
        lines = [f"**{esc(h.title)}.** " + " ".join(sentence(s) for s in h.sentences[:1])]
        lines += [sentence(s) for s in h.sentences[1:]]
    lines += [f"<sub>{esc(n)}</sub>" for n in h.notes]
    return [x for line in lines for x in (line, "")]


def _slo_table(run: RunData) -> list[str]:
    """Objectives, one row each; a cold-start study's starts are grouped under their architecture: one row
    per architecture and objective, with each start's measurement. A repeated run's objectives are shown
    as the verdict judged them: per target, over its runs."""
    if run.repeated:
        slos = repeated.slo_rows(run.repeated)
        return _table(["target", "objective", "measured", "95% CI", "result"],
                      [[esc(r["target"]), code(r["expr"]),
                        r["value"].text + (" ms" if r["value"].kind == "ms" else "")
                        + (f" ({esc(r['reason'])}; runs {r['runs']})" if r["runs"] else ""),
                        r["ci"].text, "✅ pass" if r["passed"] else "❌ **fail**"] for r in slos], text_cols=2)
    slos = report_model.slo_rows(run.targets)
    if not slos:
        return []
    if not run.cold_start:
        return _table(["target", "objective", "measured", "95% CI", "result"],
                      [[esc(r["target"]), code(r["expr"]), _measured(r), r["ci"].text,
                        "✅ pass" if r["passed"] else "❌ **fail**"] for r in slos], text_cols=2)
    rows = []
    for group, tds in run.groups():
        by_expr: dict[str, list[dict]] = {}
        for r in report_model.slo_rows(tds):
            by_expr.setdefault(r["expr"], []).append(r)
        for expr, rs in by_expr.items():
            passed = sum(1 for r in rs if r["passed"])
            unit = " ms" if rs[0]["value"].kind == "ms" else ""
            rows.append([esc(group), code(expr), " · ".join(r["value"].text for r in rs) + unit,
                         f"{'✅' if passed == len(rs) else '❌'} {passed} of {len(rs)} starts pass"])
    return _table(["architecture", "objective", "measured, start by start", "result"], rows, text_cols=2)


def _measured(r: dict) -> str:
    """An objective's measured value with its unit, or why it has none."""
    if r["value"].text == fmt.DASH:
        return esc(r["reason"]) or fmt.DASH
    return r["value"].text + (" ms" if r["value"].kind == "ms" else "")


def _cold_table(run: RunData) -> list[str]:
    cmp = report_model.cold_start_comparison(run.cold_start)
    head = ["architecture", "starts", "cold"] + cmp["columns"]
    rows = [[esc(r["label"]), str(r["starts"]), str(r["cold"])]
            + [f"{c['median'].text} ({c['min'].text}–{c['max'].text})" for c in r["cells"]] for r in cmp["rows"]]
    return _table(head, rows) + ["<sub>Median over the fresh starts (range).</sub>", ""]


def _closed_table(run: RunData) -> list[str]:
    """Closed-loop phases: the concurrency held against the asked, and the client's done->sent gap."""
    keep = ("asked", "held", "fraction", "gap/p50", "gap/p99")
    idx = [i for i, c in enumerate(report_model.CLOSED_COLUMNS) if c[0] in keep]
    rows = [[esc(td.name), esc(r["label"]) + (" (**not held**)" if r["limited"] else "")]
            + [r["cells"][i].text for i in idx]
            for td in run.targets if td.result for r in report_model.closed_loop_rows(td.result, td.name)]
    if not rows:
        return []
    head = ["target", "closed-loop phase"] + [report_model.CLOSED_COLUMNS[i][-1] for i in idx]
    return _table(head, rows, text_cols=2)


def _reset_lines(run: RunData) -> list[str]:
    """What ``target.reset`` emptied before each target's run, or that the cache carried over (and why)."""
    rows = [(td.name, td.result.reset) for td in run.targets if td.result and td.result.reset]
    if not rows:
        return []
    return ["**State reset:**"] + [f"- {'' if r.done else '⚠️ '}{esc(name)}: {esc(r.text)}" for name, r in rows] + [""]


def render_markdown(run: RunData) -> str:
    v = report_model.verdict(run)
    lines = [f"### {ICON[v['state']]} latbench: {esc(run.name)}: **{v['word']}** ({esc(v['headline'])})", ""]
    lines += [f"- ❌ {esc(r)}" for r in v["failed"]]
    lines += [f"- ⚠️ {esc(w)}" for w in v["warnings"]]
    if v["failed"] or v["warnings"]:
        lines.append("")
    lines += headline_lines(run)
    lines += _slo_table(run)
    if run.cold_start:
        lines += _cold_table(run)
        lines.append(f"<sub>latbench {esc(run.meta.latbench_version or '')} · RunDir `{esc(run.path.name)}` · "
                     "full report in report.html</sub>")
        return "\n".join(lines) + "\n"
    rows = []
    for td in run.targets:
        if not td.result:
            rows.append([esc(td.name)] + ["did not run"] + [fmt.DASH] * 6)
            continue
        ov = td.result.overall or Scope()
        lat = ov.metric("latency") or MetricStats()
        rows.append([esc(td.name), fmt.fmt(ov.count, "count"), fmt.fmt(ov.error_rate, "pct"), fmt.fmt(lat.mean, "ms"),
                     fmt.fmt(report_model.pct(lat, "p50").value, "ms"),
                     fmt.fmt(report_model.pct(lat, "p99").value, "ms"),
                     fmt.fmt(report_model.pct(ov.metric("ttft"), "p99").value, "ms"),
                     fmt.fmt(ov.achieved_qps, "rate")])
    if rows:
        lines += _table(["target", "requests", "errors", "mean (ms)", "p50 (ms)", "p99 (ms)", "TTFT p99 (ms)",
                         "achieved req/s"], rows)
        lines += ["**Requests by outcome:**"] + [f"- {esc(td.name)}: " + esc(outcome_counts(
            ov.count or 0, ov.ok or 0, ov.errors, ov.aborted)) for td in run.targets if td.result
            for ov in [td.result.overall or Scope()]] + [""]
    lines += _closed_table(run)
    lines += _reset_lines(run)
    media = [f"- {esc(td.name)}: {esc(note)}" for td in run.targets if td.result
             for note in [breakdowns.media_cache_note(td.result)] if note]
    if media:
        lines += ["**Images and audio:**", *media, ""]
    if v["logs"]:
        lines += ["Server logs: " + ", ".join(f"[{esc(name)}]({href})" for name, href in v["logs"]), ""]
    host = [f"- {esc(td.name)}: {esc(line)}" for td in run.targets
            for line in notable_lines(td.result.host if td.result else None)]
    if host:
        lines += ["**Host:**", *host, ""]
    checks = [f"- {esc(td.name)}: {esc(line)}" for td in run.targets for line in checklist_lines(td.result)]
    if checks:
        lines += ["**The article's checklist (server side):**", *checks, ""]
    cmp = run_comparison(run)
    if cmp:
        words = [c[3] for c in report_model.COMPARE]
        lines += [f"**Against {esc(cmp['base'])}:** " + "; ".join(
            f"{esc(r['label'])}: " + ", ".join(f"{words[j]} {esc(c.note)}" for j, c in enumerate(r["cells"]) if c.note)
            for r in cmp["rows"][1:]), ""]
    lines.append(f"<sub>latbench {esc(run.meta.latbench_version or '')} · RunDir `{esc(run.path.name)}` · "
                 "full report in report.html</sub>")
    return "\n".join(lines) + "\n"


def write_markdown(run: RunData, out: Path) -> Path:
    return write_text(out, render_markdown(run))
