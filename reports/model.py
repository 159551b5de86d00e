"""The report model: what a report says, as plain dicts, built from a loaded RunDir.

Every number is a :class:`Cell` that remembers where in summary.json it came from (``src``, a
'/'-separated path) and how it was formatted, so tests can check the report against the summary.
Templates only lay this model out; they compute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.analysis.verdict import Kind, TargetOutcome, Verdict, judge
from reports import fmt
from reports.loader import RunData, TargetData

DIST_ROWS = (("latency", "latency"), ("ttft", "TTFT"), ("itl", "inter-token (ITL)"), ("tpot", "time per output token"),
             ("service_time", "service time"), ("send_lag", "send lag (generator)"))
PCTS = ("p50", "p90", "p95", "p99", "p99.9")


@dataclass
class Cell:
    text: str
    src: str = ""
    kind: str = ""
    target: str = ""
    css: str = ""
    title: str = ""


def get(d: dict, path: str):
    """The value at a '/'-separated path of a summary (None when any step is missing)."""
    cur = d
    for part in path.split("/"):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def cell(summary: dict, target: str, path: str, kind: str, css: str = "") -> Cell:
    return Cell(fmt.fmt(get(summary, path), kind), path, kind, target, css)


def scopes(summary: dict) -> list[tuple[str, str, bool]]:
    """(label, path prefix, recorded) of the overall scope and each phase."""
    out = [("overall", "overall", True)]
    for name, ph in summary.get("phases", {}).items():
        out.append((name, f"phases/{name}", bool(ph.get("recorded", True))))
    return out


def percentile_table(summary: dict, target: str, prefix: str) -> list[dict]:
    """Rows (metric label, n, mean, p50..p99.9, max) of one scope; metrics never measured are left out."""
    rows = []
    for key, label in DIST_ROWS:
        base = f"{prefix}/metrics/{key}"
        desc = get(summary, base)
        if not desc or not desc.get("n"):
            continue
        cells = [cell(summary, target, f"{base}/n", "count"), cell(summary, target, f"{base}/mean", "ms")]
        cis = [None, None]
        for p in PCTS:
            c = cell(summary, target, f"{base}/percentiles/{p}/value", "ms")
            entry = get(summary, f"{base}/percentiles/{p}") or {}
            if entry.get("too_few_samples"):
                c.css, c.title = "few", "too few samples for a 95% confidence interval"
            cells.append(c)
            ci = entry.get("ci")
            cis.append(Cell(fmt.ci(ci), f"{base}/percentiles/{p}/ci", "ci", target) if ci else None)
        cells.append(cell(summary, target, f"{base}/max", "ms"))
        cis.append(None)
        rows.append({"label": label, "cells": cells, "cis": cis})
    return rows


THROUGHPUT = (("count", "count", "requests"), ("ok", "count", "ok"), ("error_rate", "pct", "error rate"),
              ("target_qps", "rate", "target req/s"), ("sent_qps", "rate", "sent req/s"),
              ("achieved_qps", "rate", "achieved req/s"), ("input_tokens_per_s", "rate", "input tokens/s"),
              ("output_tokens_per_s", "rate", "output tokens/s"),
              ("output_tokens_per_s_per_user/percentiles/p50/value", "rate", "output tokens/s per user (p50)"),
              ("goodput", "pct", "goodput"))


def throughput_rows(summary: dict, target: str) -> list[dict]:
    rows = []
    for label, prefix, recorded in scopes(summary):
        cells = [cell(summary, target, f"{prefix}/{key}", kind) for key, kind, _ in THROUGHPUT]
        rows.append({"label": label, "recorded": recorded, "cells": cells})
    return rows


def error_rows(summary: dict, target: str) -> tuple[list[str], list[dict]]:
    """(scope labels, one row per error class seen) of error counts."""
    sc = scopes(summary)
    classes = sorted({c for _, p, _ in sc for c in (get(summary, f"{p}/errors") or {})})
    rows = []
    for c in classes:
        cells = [cell(summary, target, f"{p}/errors/{c}", "count0") for _, p, _ in sc]
        rows.append({"label": c, "cells": cells})
    return [s[0] for s in sc], rows


def slo_rows(targets: list[TargetData]) -> list[dict]:
    rows = []
    for td in targets:
        s = td.summary or {}
        for i, r in enumerate(s.get("slo") or []):
            if not r.get("applies", True):
                continue
            kind = fmt.slo_kind(r)
            rows.append({
                "target": td.name, "expr": r.get("expr", ""), "passed": bool(r.get("passed")),
                "value": Cell(fmt.fmt(r.get("value"), kind), f"slo/{i}/value", kind, td.name),
                "ci": Cell(fmt.ci(r.get("ci"), kind), f"slo/{i}/ci", "ci", td.name) if r.get("ci") else Cell(fmt.DASH),
                "reason": r.get("reason", ""),
            })
    return rows


COMPARE = (("mean", "overall/metrics/latency/mean", "ms", "mean", True),
           ("p99", "overall/metrics/latency/percentiles/p99/value", "ms", "p99", True),
           ("TTFT p99", "overall/metrics/ttft/percentiles/p99/value", "ms", "TTFT p99", True),
           ("QPS held", "overall/achieved_qps", "rate", "QPS", False),
           ("error rate", "overall/error_rate", "pct", "", True))


def comparison(entries: list[tuple[str, dict]]) -> dict | None:
    """'architecture | mean | p99 | TTFT p99 | QPS held' with ratios against the first entry."""
    entries = [(label, s) for label, s in entries if s]
    if len(entries) < 2:
        return None
    base = entries[0][1]
    rows = []
    for i, (label, s) in enumerate(entries):
        cells, ratios = [], []
        for _, path, kind, what, lower in COMPARE:
            cells.append(Cell(fmt.fmt(get(s, path), kind), path, kind, label))
            if what and i > 0:
                ratios.append(fmt.ratio_text(get(base, path), get(s, path), what, lower))
        rows.append({"label": label, "cells": cells, "ratios": ratios if i else ["baseline"]})
    return {"columns": [c[0] for c in COMPARE], "rows": rows, "base": entries[0][0]}


def stored_verdict(run: RunData) -> Verdict | None:
    """The verdict the run stored in meta.json (computed once, by ``latbench run``), if it has one."""
    v = run.meta.get("verdict")
    if isinstance(v, dict):
        try:
            return Verdict.from_json(v)
        except (KeyError, TypeError, ValueError):
            return None
    return None


def computed_verdict(run: RunData) -> Verdict:
    """The verdict of the targets given alone (one entry of a comparison, or a RunDir from before verdicts
    were stored), by the same rules as the run's own (:func:`loadgen.analysis.verdict.judge`)."""
    outcomes = [TargetOutcome(td.name, td.summary, failed_fast=(td.summary or {}).get("failed_fast"))
                for td in run.targets if td.summary is not None]
    return judge(outcomes, interrupted=not run.complete)


def verdict(run: RunData, use_meta: bool = True) -> dict:
    """The banner: state (passed | failed | invalid), headline, objectives missed, and warnings.

    ``use_meta``: the run's own verdict from meta.json (the whole run); False judges the targets given
    alone (one entry of a comparison). Either way the reasons are the verdict's, never re-derived from text.
    """
    v = (stored_verdict(run) if use_meta else None) or computed_verdict(run)
    total = sum(1 for td in run.targets for r in (td.summary or {}).get("slo") or [] if r.get("applies", True))
    failed = [r.text for r in v.reasons if r.kind is Kind.SLO]
    warnings = [f"{td.name}: no records: this target did not run" for td in run.targets if td.summary is None]
    warnings += [r.text + ("; these numbers describe the load generator, not the server"
                           if r.kind is Kind.GENERATOR_LIMITED else "")
                 for r in v.reasons if r.kind is not Kind.SLO and r.kind is not Kind.INTERRUPTED]
    warnings += [f"{td.name}: summary recomputed from the records the run left behind"
                 for td in run.targets if td.recomputed]
    incomplete = not run.complete
    state = v.outcome
    if incomplete:
        state = "invalid"
        warnings.insert(0, "INCOMPLETE RUN: the run was interrupted or crashed; the report shows the requests "
                           "recorded before it stopped")
    if failed:
        headline = f"{len(failed)} of {total} objectives missed"
    elif total:
        headline = f"all {total} objectives met"
    else:
        headline = "no objectives defined"
    if state == "invalid":
        headline += ", but the run is not valid: see the warnings below"
    return {"state": state, "word": state.upper(), "headline": headline, "failed": failed,
            "warnings": warnings, "incomplete": incomplete}


def header(run: RunData) -> list[tuple[str, str]]:
    m = run.meta
    dur = sum(float(t.meta.get("duration_s") or (t.summary or {}).get("duration_s") or 0) for t in run.targets)
    rows = [("scenario", run.name), ("targets", ", ".join(t.name for t in run.targets)),
            ("engine", str(m.get("engine", fmt.DASH))), ("started", str(m.get("started", fmt.DASH))),
            ("duration", fmt.seconds(dur) if dur else fmt.DASH),
            ("latbench", str(m.get("latbench_version", fmt.DASH))), ("host", str(m.get("host", fmt.DASH))),
            ("RunDir", run.path.name)]
    desc = run.scenario.get("description")
    if desc:
        rows.insert(1, ("description", str(desc)))
    return rows


def target_info(td: TargetData) -> list[tuple[str, str]]:
    m, s = td.meta, td.summary or {}
    rows = [("url", str(m.get("url", fmt.DASH))), ("model", str(s.get("model") or m.get("model") or fmt.DASH)),
            ("requests", fmt.count(m.get("requests") if m.get("requests") is not None else get(s, "overall/count"))),
            ("duration", fmt.seconds(s.get("duration_s")))]
    server = m.get("server") or {}
    for k in ("arch", "backend", "model", "device"):
        if k in server:
            rows.append((f"server {k}", str(server[k])))
    for k, label in (("listen_s", "server listening after"), ("ready_s", "server ready after")):
        if isinstance(server.get(k), (int, float)):
            rows.append((label, fmt.seconds(server[k])))
    rows.append(("tokens", token_info(s)))
    return rows


def token_info(summary: dict) -> str:
    """How this target's token counts were made, in one line: an approximation says it is one."""
    info, tk = summary.get("tokens") or {}, get(summary, "overall/tokens") or {}
    if not info.get("tokenizer"):
        return "approximated: 4 characters a token (no workload.tokenizer)" if "tokens" in summary else fmt.DASH
    who = "the target's /tokenize" if info["tokenizer"] == "server" else info["tokenizer"]
    parts = [f"counted with {who}"]
    if info.get("special_tokens"):
        parts.append(f"special tokens added to a plain prompt: {' '.join(info['special_tokens'])}")
    added = tk.get("added_tokens")
    if added:
        parts.append(f"added by the server: {added['min']}–{added['max']} tokens a request")
    usage = tk.get("usage_vs_counted")
    if usage:
        parts.append(f"the server's usage agrees for {usage['equal']} of {usage['n']} requests")
    return "; ".join(parts)
