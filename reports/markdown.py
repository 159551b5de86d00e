"""summary.md: the verdict and headline numbers as GitHub-flavoured Markdown, for pull-request comments
and ``$GITHUB_STEP_SUMMARY``. Text from the RunDir is HTML-escaped and pipes are escaped in cells."""

from __future__ import annotations

import html
from pathlib import Path

from loadgen.records.rundir import write_text
from reports import fmt, model
from reports.loader import RunData

ICON = {"passed": "✅", "failed": "❌", "invalid": "⚠️"}


def esc(text) -> str:
    """Safe inside a Markdown table cell: no HTML, no pipes, no newlines."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def code(text) -> str:
    """Inside a code span HTML is shown literally, so only backticks, pipes and newlines need care."""
    return "`" + str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def _table(head: list[str], rows: list[list[str]], text_cols: int = 1) -> list[str]:
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i < text_cols else "---:" for i in range(len(head))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def render_markdown(run: RunData) -> str:
    v = model.verdict(run)
    lines = [f"### {ICON[v['state']]} latbench: {esc(run.name)}: **{v['word']}** ({esc(v['headline'])})", ""]
    lines += [f"- ❌ {esc(r)}" for r in v["failed"]]
    lines += [f"- ⚠️ {esc(w)}" for w in v["warnings"]]
    if v["failed"] or v["warnings"]:
        lines.append("")
    slos = model.slo_rows(run.targets)
    if slos:
        lines += _table(["target", "objective", "measured", "95% CI", "result"],
                        [[esc(r["target"]), code(r["expr"]),
                          r["value"].text + (" ms" if r["value"].kind == "ms" else ""),
                          r["ci"].text, "✅ pass" if r["passed"] else "❌ **fail**"] for r in slos], text_cols=2)
    rows = []
    for td in run.targets:
        s = td.summary
        if not s:
            rows.append([esc(td.name)] + ["did not run"] + [fmt.DASH] * 6)
            continue

        def g(path: str, kind: str, s=s) -> str:
            return fmt.fmt(model.get(s, path), kind)

        rows.append([esc(td.name), g("overall/count", "count"), g("overall/error_rate", "pct"),
                     g("overall/metrics/latency/mean", "ms"), g("overall/metrics/latency/percentiles/p50/value", "ms"),
                     g("overall/metrics/latency/percentiles/p99/value", "ms"),
                     g("overall/metrics/ttft/percentiles/p99/value", "ms"), g("overall/achieved_qps", "rate")])
    if rows:
        lines += _table(["target", "requests", "errors", "mean (ms)", "p50 (ms)", "p99 (ms)", "TTFT p99 (ms)",
                         "achieved req/s"], rows)
    cmp = model.comparison([(td.name, td.summary) for td in run.targets])
    if cmp:
        lines += [f"**Against {esc(cmp['base'])}:** " + "; ".join(
            f"{esc(r['label'])}: {', '.join(r['ratios'])}" for r in cmp["rows"][1:]), ""]
    lines.append(f"<sub>latbench {esc(run.meta.get('latbench_version', ''))} · RunDir `{esc(run.path.name)}` · "
                 "full report in report.html</sub>")
    return "\n".join(lines) + "\n"


def write_markdown(run: RunData, out: Path) -> Path:
    return write_text(out, render_markdown(run))
