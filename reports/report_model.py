"""The report model: what a report says, as plain dicts, built from a loaded RunDir.

Numbers are read from the result models (:mod:`loadgen.records.results`) as typed attributes. Every number
is a :class:`Cell` that remembers where in its file it came from (``src``, a '/'-separated path that
:func:`get` resolves) and how it was formatted, so tests can check the report against the file.
Templates only lay this model out; they compute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen import metric_registry
from loadgen.analysis.repeated import group_outcomes
from loadgen.analysis.verdict import Kind, TargetOutcome, Verdict, judge, unmeasured
from loadgen.records.results import (
    ClosedLoop,
    Gap,
    MetricStats,
    Percentile,
    RepeatTarget,
    Scope,
    ScopeTokens,
    StartGroup,
    Summary,
    TokenInfo,
    Trace,
)
from loadgen.records.rundir import SERVER_LOG
from reports import fmt
from reports.claims import interval_of, ratio_claim
from reports.rundir_loader import RunData, TargetData
from reports.strips import REPEATS_SRC, strips_for

PCTS = ("p50", "p90", "p95", "p99", "p99.9")


@dataclass
class Cell:
    text: str
    src: str = ""
    kind: str = ""
    target: str = ""
    css: str = ""
    title: str = ""
    dots: object = None  # a repeated run's per-run values as a strip (reports.repeated.Strip), or None
    note: str = ""  # said under the value (a comparison's ratio against its first entry)


@dataclass
class Headline:
    """A report's headline (:mod:`reports.headline`): what the run measures (``kind``), a title, sentences (each a
    list of str and :class:`Cell` parts) and notes; ``as_list``: the sentences laid out as a list. ``figure``: the
    figure shown with it, and ``figure_target`` the target whose section it was taken from (shown once)."""

    kind: str
    title: str
    sentences: list
    notes: list[str]
    as_list: bool = False
    figure: dict | None = None
    figure_target: str | None = None


def get(d: dict, path: str):
    """The value at a '/'-separated path of a result file's JSON (None when any step is missing): where a
    :class:`Cell`'s ``src`` points. Readers take the models' attributes; this resolves a cell for checking."""
    cur = d
    for part in path.split("/"):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def num(value, src: str, kind: str, target: str = "", css: str = "") -> Cell:
    """A number read from a result model, formatted as ``kind``, with ``src`` its path in the file."""
    return Cell(fmt.fmt(value, kind), src, kind, target, css)


def scopes(summary: Summary) -> list[tuple[str, str, bool]]:
    """(label, path prefix, recorded) of the overall scope and each phase."""
    return [(label, prefix, sc.is_recorded) for label, prefix, sc in summary.scopes()]


def _p50(m: MetricStats | None):
    return pct(m, "p50").value


def pct(m: MetricStats | None, p: str) -> Percentile:
    """Percentile ``p`` of a metric's statistics (an empty one when not measured)."""
    return ((m.percentiles or {}).get(p) if m else None) or Percentile()


def percentile_table(scope: Scope, target: str, prefix: str) -> list[dict]:
    """Rows (metric label, n, mean, p50..p99.9, max) of one scope (``prefix``: its path in summary.json);
    metrics never measured are left out."""
    rows = []
    for m in metric_registry.report_rows():
        base, kind, st = f"{prefix}/metrics/{m.name}", m.display, scope.metric(m.name)
        if not st or not st.n:
            continue
        cells = [num(st.n, f"{base}/n", "count", target), num(st.mean, f"{base}/mean", kind, target)]
        cis = [None, None]
        for p in PCTS:
            entry = pct(st, p)
            c = num(entry.value, f"{base}/percentiles/{p}/value", kind, target)
            if entry.too_few_samples:
                c.css, c.title = "few", "too few samples for a 95% confidence interval"
            cells.append(c)
            cis.append(Cell(fmt.ci(entry.ci), f"{base}/percentiles/{p}/ci", "ci", target) if entry.ci else None)
        cells.append(num(st.max, f"{base}/max", kind, target))
        cis.append(None)
        rows.append({"label": m.label, "cells": cells, "cis": cis})
    return rows


#: (its path in a scope, how it is read from the scope, display kind, column label) of the rates table; the first
#: column is what was asked: a rate in an open loop, a concurrency in a closed one.
RATES = (("target_qps", lambda sc: None if sc.closed_loop else sc.target_qps, "rate", "target req/s"),
         ("closed_loop/asked", lambda sc: (sc.closed_loop or ClosedLoop()).asked, "count", "concurrency asked"),
         ("closed_loop/held", lambda sc: (sc.closed_loop or ClosedLoop()).held, "rate", "concurrency held"),
         ("sent_qps", lambda sc: sc.sent_qps, "rate", "sent req/s"),
         ("achieved_qps", lambda sc: sc.achieved_qps, "rate", "achieved req/s"),
         ("goodput_qps", lambda sc: sc.goodput_qps, "rate", "good req/s"),
         ("goodput", lambda sc: sc.goodput, "pct", "goodput"))
#: the same, of the tokens table
TOKEN_RATES = (("input_tokens_per_s", lambda sc: sc.input_tokens_per_s, "rate", "input tokens/s"),
               ("output_tokens_per_s", lambda sc: sc.output_tokens_per_s, "rate", "output tokens/s"),
               ("output_tokens_per_s_per_user/percentiles/p50/value",
                lambda sc: _p50(sc.output_tokens_per_s_per_user), "rate", "output tokens/s per user (p50)"))


def _open_scope(summary: Summary, sc: Scope) -> bool:
    """Whether ``sc`` asked a rate: an open-loop phase, or the overall scope of a run with one."""
    if sc is not summary.overall:
        return not sc.closed_loop
    return any(not ph.closed_loop for ph in (summary.phases or {}).values() if ph and ph.is_recorded)


def rate_columns(summary: Summary, table: tuple = RATES) -> list[int]:
    """Which columns of ``table`` the run has: the rate asked where a phase is open-loop, the concurrency asked and
    held where one is closed, goodput where the scenario defines it."""
    scopes = [sc for _, _, sc in summary.scopes()]
    closed = any(sc.closed_loop for sc in scopes)
    keep = []
    for i, (key, read, _, _) in enumerate(table):
        if key == "target_qps" and not any(_open_scope(summary, sc) for sc in scopes):
            continue
        if key.startswith("closed_loop") and not closed:
            continue
        if key.startswith("goodput") and all(read(sc) is None for sc in scopes):
            continue
        keep.append(i)
    return keep


def rate_rows(summary: Summary, target: str, table: tuple = RATES) -> tuple[list[str], list[dict]]:
    """(column labels, one row per scope) of what each scope asked and achieved (``table``: RATES, or TOKEN_RATES
    for tokens)."""
    cols = rate_columns(summary, table)
    rows = []
    for label, prefix, sc in summary.scopes():
        cells = []
        for i in cols:
            key, read, kind, _ = table[i]
            value = read(sc) if key != "target_qps" or _open_scope(summary, sc) else None
            cells.append(num(value, f"{prefix}/{key}", kind, target) if value is not None else Cell(""))
        rows.append({"label": scope_label(summary, label, sc), "recorded": sc.is_recorded, "cells": cells})
    return [table[i][-1] for i in cols], rows


def scope_label(summary: Summary, label: str, sc: Scope) -> str:
    """A scope's row label: a phase with no request says so (and why, when the run stopped before it)."""
    if sc.count or sc is summary.overall:
        return label
    return f"{label} (not run: the run stopped before it)" if summary.complete is False else f"{label} (no requests)"


def outcome_rows(summary: Summary, target: str) -> tuple[list[str], list[dict]]:
    """(column labels, one row per scope) of how its requests ended, in the outcome vocabulary of
    :data:`loadgen.metric_registry.OUTCOMES`: requests, ok, each error class seen (``cancelled`` among them),
    aborted, and the error rate."""
    scopes = summary.scopes()
    classes = sorted({c for _, _, sc in scopes for c in (sc.errors or {})}, key=lambda c: (c == "cancelled", c))
    aborted = any(sc.aborted for _, _, sc in scopes)
    cols = ["requests", metric_registry.outcome("ok").label, *(f"error: {c}" if c != "cancelled" else c
                                                              for c in classes)]
    cols += [metric_registry.outcome("aborted").label] if aborted else []
    cols += ["error rate"] + (["aborted rate"] if aborted else [])
    rows = []
    for label, prefix, sc in scopes:
        cells = [num(sc.count, f"{prefix}/count", "count", target), num(sc.ok, f"{prefix}/ok", "count", target)]
        cells += [num((sc.errors or {}).get(c), f"{prefix}/errors/{c}", "count0", target) for c in classes]
        cells += [num(sc.aborted, f"{prefix}/aborted", "count0", target)] if aborted else []
        cells.append(num(sc.error_rate, f"{prefix}/error_rate", "pct", target))
        cells += [num(sc.aborted_rate, f"{prefix}/aborted_rate", "pct", target)] if aborted else []
        rows.append({"label": scope_label(summary, label, sc), "recorded": sc.is_recorded, "cells": cells})
    return cols, rows


def outcome_note(summary: Summary) -> str:
    """The outcomes of this table defined, from the registry: ok and errors always, cancelled and aborted where
    they occur."""
    seen = {"ok", "error"}
    seen |= {"cancelled"} if any("cancelled" in (sc.errors or {}) for _, _, sc in summary.scopes()) else set()
    seen |= {"aborted"} if any(sc.aborted for _, _, sc in summary.scopes()) else set()
    return " ".join(f"{o.label}: {o.definition}." for o in metric_registry.outcomes() if o.name in seen)


def rates_note(summary: Summary) -> str:
    """What the rates table's rates are, from the registry's definitions (said once, here)."""
    note = [f"achieved req/s: {metric_registry.metric('achieved_qps').definition}",
            f"sent req/s: {metric_registry.metric('sent_qps').definition}"]
    if any(sc.closed_loop for _, _, sc in summary.scopes()):
        note.append("a closed-loop phase asks a concurrency, not a rate: concurrency held is "
                    + metric_registry.metric("closed_loop.held").definition.split(": ", 1)[1])
    return "; ".join(note) + "."


#: (its path in a phase's closed_loop, how it is read from it, display kind, column label)
CLOSED_COLUMNS = (("asked", lambda c: c.asked, "count", "concurrency asked"),
                  ("held", lambda c: c.held, "rate", "held"),
                  ("fraction", lambda c: c.fraction, "share", "of asked"),
                  ("requests_in_flight", lambda c: c.requests_in_flight, "rate", "requests in flight"),
                  ("sessions_in_progress", lambda c: c.sessions_in_progress, "rate", "sessions in progress"),
                  ("gap/p50", lambda c: (c.gap or Gap()).p50, "ms", "done→sent gap p50 (ms)"),
                  ("gap/p99", lambda c: (c.gap or Gap()).p99, "ms", "done→sent gap p99 (ms)"))


def closed_loop_rows(summary: Summary, target: str) -> list[dict]:
    """One row per closed-loop phase: the concurrency held against the asked, and the client's own gap between
    an answer and the user's next request (``phases/<name>/closed_loop``); empty without a closed loop."""
    return [{"label": name, "recorded": ph.is_recorded, "limited": bool(ph.closed_loop.limited),
             "cells": [num(read(ph.closed_loop), f"phases/{name}/closed_loop/{key}", kind, target)
                       for key, read, kind, _ in CLOSED_COLUMNS]}
            for name, ph in (summary.phases or {}).items() if ph and ph.closed_loop]


#: (its path in a turn of conversations/by_turn, how it is read from the turn, display kind, column label)
TURN_COLUMNS = (("count", lambda t: t.count, "count", "turns"), ("error_rate", lambda t: t.error_rate, "pct", "errors"),
                ("latency/percentiles/p50/value", lambda t: pct(t.latency, "p50").value, "ms", "latency p50"),
                ("latency/percentiles/p99/value", lambda t: pct(t.latency, "p99").value, "ms", "latency p99"),
                ("ttft/percentiles/p50/value", lambda t: pct(t.ttft, "p50").value, "ms", "TTFT p50"),
                ("ttft/percentiles/p99/value", lambda t: pct(t.ttft, "p99").value, "ms", "TTFT p99"),
                ("prompt_tokens_mean", lambda t: t.prompt_tokens_mean, "rate", "prompt tokens (mean)"))


def turn_rows(summary: Summary, target: str) -> list[dict]:
    """One row per turn index of a conversation run (``summary.conversations``); empty without one."""
    turns = (summary.conversations.by_turn if summary.conversations else None) or []
    return [{"label": f"turn {t.turn + 1}",
             "cells": [num(read(t), f"conversations/by_turn/{i}/{key}", kind, target)
                       for key, read, kind, _ in TURN_COLUMNS]}
            for i, t in enumerate(turns)]


def conversation_note(summary: Summary) -> str:
    """The sessions of a conversation run, in a sentence ('' without conversations)."""
    c = summary.conversations
    if not c or not c.sessions:
        return ""
    tps = c.turns_per_session
    return (f"{c.sessions:,} sessions, {tps.mean:.2f} recorded turns a session on average (at most "
            f"{tps.max}); {c.ended_by_failure:,} ended at a failed turn. A turn counts from its due time: "
            "the previous turn's end plus the think time.")


def target_label(td: TargetData) -> str:
    """How a target is named in a report: a fresh start of a cold-start study, or one run of a repeated
    run, under its target (architecture)."""
    m = td.meta
    if m.group and m.repetition is not None:
        return f"{m.group} · run {m.repetition}"
    return f"{m.group} · start {m.start}" if m.group else td.name


def slo_rows(targets: list[TargetData]) -> list[dict]:
    rows = []
    for td in targets:
        for i, r in enumerate((td.result.slo if td.result else None) or []):
            if r.applies is False:
                continue
            kind = fmt.slo_kind(r.stat, r.metric)
            rows.append({
                "target": target_label(td), "expr": r.expr or "", "passed": bool(r.passed),
                "value": num(r.value, f"slo/{i}/value", kind, td.name),
                "ci": Cell(fmt.ci(r.ci, kind), f"slo/{i}/ci", "ci", td.name) if r.ci else Cell(fmt.DASH),
                "reason": r.reason or (unmeasured(r, td.result) if r.value is None else ""),
                "runs": "",
            })
    return rows


def _overall_pct(s: Summary, metric: str, p: str) -> tuple:
    """(value, interval or None when too few samples) of percentile ``p`` of ``metric`` over the overall scope."""
    e = pct((s.overall or Scope()).metric(metric), p)
    return e.value, interval_of(e.ci, e.too_few_samples)


#: (column, (summary.json path, how (value, interval) is read from the summary), display kind, ratio word (none:
#: no ratio), lower is better, repeats.json statistic, why a ratio has no interval when it has none)
FEW = "no interval: too few requests for one"
COMPARE = (("mean (ms)", ("overall/metrics/latency/mean", lambda s: (((s.overall or Scope()).metric("latency")
                                                                       or MetricStats()).mean, None)),
            "ms", "mean", True, "latency.mean", "no interval: a mean has none here"),
           ("p50 (ms)", ("overall/metrics/latency/percentiles/p50/value", lambda s: _overall_pct(s, "latency", "p50")),
            "ms", "p50", True, "latency.p50", FEW),
           ("p99 (ms)", ("overall/metrics/latency/percentiles/p99/value", lambda s: _overall_pct(s, "latency", "p99")),
            "ms", "p99", True, "latency.p99", FEW),
           ("TTFT p50 (ms)", ("overall/metrics/ttft/percentiles/p50/value", lambda s: _overall_pct(s, "ttft", "p50")),
            "ms", "TTFT p50", True, "ttft.p50", FEW),
           ("TTFT p99 (ms)", ("overall/metrics/ttft/percentiles/p99/value", lambda s: _overall_pct(s, "ttft", "p99")),
            "ms", "TTFT p99", True, "ttft.p99", FEW),
           ("achieved req/s", ("overall/achieved_qps", lambda s: ((s.overall or Scope()).achieved_qps, None)),
            "rate", "", False, "achieved_qps", ""),
           ("error rate", ("overall/error_rate", lambda s: ((s.overall or Scope()).error_rate, None)),
            "pct", "", True, "error_rate", ""))


#: what the entries of a comparison are: (singular, plural)
COMPARED = {"architecture": ("architecture", "architectures"), "run": ("run", "runs"),
            "engine": ("engine", "engines"), "target": ("target", "targets")}


def compared(items: list[tuple[RunData, TargetData]]) -> str:
    """What a comparison puts side by side, from the RunDirs' own metadata (a key of :data:`COMPARED`): engines when
    the entries come from several RunDirs run with different engines; runs when from several RunDirs (of one
    scenario and target, or not); architectures when every entry is a reference server and their architectures
    differ; otherwise targets."""
    runs = {str(run.path): run for run, _ in items}
    if len(runs) > 1:
        return "engine" if len({run.meta.engine for run in runs.values()}) > 1 else "run"
    servers = [td.meta.server for _, td in items]
    if all(sv is not None and sv.arch for sv in servers) and len({sv.arch for sv in servers}) > 1:
        return "architecture"
    return "target"


def comparison(entries: list[tuple[str, Summary | None]],
               groups: dict[str, tuple[str, RepeatTarget]] | None = None, what: str = "target") -> dict | None:
    """Each entry's mean, p50, p99, TTFT p50/p99, achieved req/s and error rate; under each latency, its ratio
    against the first entry as :func:`reports.claims.ratio_claim` says it (with its interval, or why none).
    ``what``: what an entry is (target, architecture, run, engine), the head of the label column.

    ``groups``: repeated targets by label (their name and entry in repeats.json): such an entry shows the median of
    its runs (``src`` then points into repeats.json) with one dot per run beside it, and its ratios use the
    between-run intervals; its summary may be None."""
    groups = groups or {}
    entries = [(label, s) for label, s in entries if s or label in groups]
    if len(entries) < 2:
        return None
    values = [[_compare_value(label, s, groups, col) for col in COMPARE] for label, s in entries]
    strips = [strips_for([v[j][2] for v in values], [v[j][3] if label in groups else None
                                                      for v, (label, _) in zip(values, entries)], COMPARE[j][2])
              for j in range(len(COMPARE))]
    rows = []
    for i, (label, _) in enumerate(entries):
        cells = []
        for j, (_, _, kind, word, lower, _, why) in enumerate(COMPARE):
            value, src, _, ci = values[i][j]
            c = Cell(fmt.fmt(value, kind), src, kind, label)
            if label in groups:
                c.dots = strips[j][i]
            if word and i > 0:
                base = values[0][j]
                c.note = ratio_claim((base[0], base[3]), (value, ci), "", lower, why)
            cells.append(c)
        rows.append({"label": label, "cells": cells})
    return {"columns": [c[0] for c in COMPARE], "rows": rows, "base": entries[0][0], "what": what,
            "repeated": bool(groups)}


def _compare_value(label: str, s: Summary | None, groups: dict[str, tuple[str, RepeatTarget]], col) -> tuple:
    """(value shown, its src, the per-run values, its interval) of one comparison cell: a repeated target's
    between-run interval, else the percentile's own (None for a mean or a rate, or too few samples)."""
    _, (path, read), _, _, _, key, _ = col
    if label in groups:
        name, g = groups[label]  # the target's name in repeats.json, its entry there
        st = g.stat(key)
        return st.median, f"{REPEATS_SRC}targets/{name}/stats/{key}/median", st.values or [], st.ci
    v, ci = read(s) if s is not None else (None, None)
    return v, path, [v], ci


def stored_verdict(run: RunData) -> Verdict | None:
    """The verdict the run stored in meta.json (computed once, by ``latbench run``), if it has one."""
    v = run.meta.verdict
    if isinstance(v, dict):
        try:
            return Verdict.from_json(v)
        except (KeyError, TypeError, ValueError):
            return None
    return None


def computed_verdict(run: RunData) -> Verdict:
    """The verdict of the targets given alone (one entry of a comparison, or a RunDir from before verdicts
    were stored), by the same rules as the run's own (:func:`loadgen.analysis.verdict.judge`)."""
    repeated = run.repeated is not None  # each run alone is not judged: its target is, over its runs
    outcomes = [TargetOutcome(td.name, td.result, failed_fast=td.result.failed_fast,
                              slo=[] if repeated and td.meta.repetition is not None else None,
                              group=td.meta.group if td.meta.start is not None else None, start=td.meta.start)
                for td in run.targets if td.result is not None]
    return judge(outcomes, interrupted=not run.complete, groups=group_outcomes(run.repeated) if repeated else None)


def verdict(run: RunData, use_meta: bool = True) -> dict:
    """The banner: state (passed | failed | invalid), headline, objectives missed, and warnings.

    ``use_meta``: the run's own verdict from meta.json (the whole run); False judges the targets given
    alone (one entry of a comparison). Either way the reasons are the verdict's, never re-derived from text.
    """
    v = (stored_verdict(run) if use_meta else None) or computed_verdict(run)
    if run.repeated and use_meta:  # judged per target over its runs, not per run
        total = sum(1 for g in (run.repeated.targets or {}).values() for r in g.slo or [] if r.applies is not False)
    else:
        total = sum(1 for td in run.targets for r in (td.result.slo if td.result else None) or []
                    if r.applies is not False)
    failed = [r.text for r in v.reasons if r.kind is Kind.SLO]
    warnings = [f"{td.name}: no records: this target did not run" for td in run.targets if td.result is None]
    warnings += [r.text + ("; these numbers describe the load generator, not the server"
                           if r.kind is Kind.GENERATOR_LIMITED else "")
                 for r in v.reasons if r.kind is not Kind.SLO
                 and (r.kind is not Kind.INTERRUPTED or r.target is not None)]  # the run-wide one: the banner below
    warnings += [f"warning: {w.text}" for w in v.warnings]
    warnings += [f"{td.name}: summary recomputed from the records the run left behind"
                 for td in run.targets if td.recomputed]
    incomplete = not run.complete
    state = v.outcome
    if incomplete:
        state = "invalid"
        warnings.insert(0, "INCOMPLETE RUN: the run was interrupted or crashed; the report shows the requests "
                           "recorded before it stopped")
    if failed:
        headline = f"{len(failed)} of {total} objectives missed" if total > 1 else "its one objective missed"
    elif total:
        headline = f"all {total} objectives met" if total > 1 else "its one objective met"
    else:
        headline = "no objectives defined"
    if state == "invalid":
        headline += ", but the run is not valid: see the warnings below"
    logs = [(td.name, f"{td.dir.name}/{SERVER_LOG}") for td in run.targets if (td.dir / SERVER_LOG).is_file()]
    return {"state": state, "word": state.upper(), "headline": headline, "failed": failed,
            "warnings": warnings, "incomplete": incomplete, "logs": logs}


def header(run: RunData) -> list[tuple[str, str]]:
    m = run.meta
    dur = sum(float(t.meta.duration_s or (t.result.duration_s if t.result else None) or 0) for t in run.targets)
    names = [name if len(tds) == 1 and not tds[0].meta.group
             else f"{name} ({len(tds)} runs)" if tds[0].meta.repetition is not None
             else f"{name} ({len(tds)} fresh starts)" for name, tds in run.groups()]
    rows = [("scenario", run.name), ("targets", ", ".join(names)),
            ("engine", _given(m, "engine")), ("started", _given(m, "started")),
            ("duration", fmt.seconds(dur) if dur else fmt.DASH),
            ("latbench", _given(m, "latbench_version")), ("host", _given(m, "host")),
            ("RunDir", run.path.name)]
    desc = run.scenario.get("description")
    if desc:
        rows.insert(1, ("description", str(desc)))
    return rows


def _given(model, field: str) -> str:
    """A field of a result model as text, a dash when the file did not have it (a null it had reads 'None')."""
    return str(getattr(model, field)) if field in model.model_fields_set else fmt.DASH


def target_info(td: TargetData) -> list[tuple[str, str]]:
    m, s = td.meta, td.result or Summary()
    count = m.requests if m.requests is not None else (s.overall.count if s.overall else None)
    rows = [("url", _given(m, "url")), ("model", str(s.model or m.model or fmt.DASH)),
            ("requests (all phases)", fmt.count(count)), ("duration", fmt.seconds(s.duration_s))]
    server = m.server
    for k in ("arch", "backend", "model", "device") if server else ():
        if k in server.model_fields_set:
            rows.append((f"server {k}", str(getattr(server, k))))
    for k, label in (("listen_s", "server listening after"), ("ready_s", "server ready after")) if server else ():
        if isinstance(getattr(server, k), (int, float)):
            rows.append((label, fmt.seconds(getattr(server, k))))
    rows.append(("tokens", token_info(s)))
    if s.reset:
        rows.append(("state reset", s.reset.text or fmt.DASH))
    if s.trace:
        rows.append(("trace", trace_info(s.trace)))
    return rows


COLD = "@cold_start"  # Cell.target of numbers read from cold_start.json
START_COLUMNS = (("listen_s", "ms", "listening (ms)"), ("ready_s", "ms", "ready (ms)"),
                 ("model_load_s", "ms", "model load (ms)"), ("first_latency_s", "ms", "first request (ms)"),
                 ("first_ttft_s", "ms", "first TTFT (ms)"), ("steady_latency_s", "ms", "steady (ms)"),
                 ("penalty_s", "ms", "penalty (ms)"), ("first_steady_request", "num", "warm from request"))


def start_rows(g: StartGroup, group: str) -> list[dict]:
    """One row per fresh start of ``group``: cold or not (and the page-cache share behind it), then
    START_COLUMNS, from cold_start.json."""
    rows = []
    for i, r in enumerate(g.per_start or []):
        base = f"{group}/per_start/{i}"
        cached = r.page_cache.resident_after if r.page_cache else None
        rows.append({"start": r.start, "target": r.target,
                     "cold": "cold" if r.cold else ("unknown" if r.cold is None else "WARM"),
                     "cold_css": "pass" if r.cold else ("" if r.cold is None else "fail"),
                     "cached": Cell(fmt.share(cached), f"{base}/page_cache/resident_after", "share", COLD),
                     "cells": [num(getattr(r, k), f"{base}/{k}", kind, COLD) for k, kind, _ in START_COLUMNS]})
    return rows


def cold_start_comparison(cs: dict[str, StartGroup]) -> dict:
    """Architectures side by side over their starts: median (min-max) of each START_COLUMNS figure."""
    rows = []
    for group, g in cs.items():
        cells = []
        for k, kind, _ in START_COLUMNS:
            p, sp = f"{group}/over_starts/{k}", g.spread(k)
            cells.append({"median": num(sp.median, f"{p}/median", kind, COLD),
                          "min": num(sp.min, f"{p}/min", kind, COLD), "max": num(sp.max, f"{p}/max", kind, COLD)})
        rows.append({"label": group, "starts": g.starts, "cold": g.cold_starts, "cells": cells})
    return {"columns": [c[2] for c in START_COLUMNS], "rows": rows}


_MAX_LEN_SOURCE = {"scenario": "the scenario's", "target": "reported by the target"}


def trace_info(trace: Trace) -> str:
    """A trace replay in one line: the slice, the speed, the limit and how many requests were clipped to it."""
    parts = [f"{trace.file}: {fmt.count(trace.requests)} of {fmt.count(trace.trace_requests)} requests "
             f"at speed {trace.speed:g}"]
    if trace.max_model_len:
        parts.append(f"max_model_len {trace.max_model_len} ({_MAX_LEN_SOURCE.get(trace.max_model_len_source)})")
    else:
        parts.append("no max_model_len known")
    parts.append(f"{fmt.count(trace.clipped)} clipped to fit ({trace.too_long})")
    parts.append(f"{trace.shared_blocks} of {trace.distinct_blocks} prefix blocks shared between requests")
    return "; ".join(parts)


def token_info(summary: Summary) -> str:
    """How this target's token counts were made, in one line: an approximation says it is one."""
    info = summary.tokens or TokenInfo()
    tk = (summary.overall.tokens if summary.overall else None) or ScopeTokens()
    if not info.tokenizer:
        return ("approximated: 4 characters a token (no workload.tokenizer)" if "tokens" in summary.model_fields_set
                else fmt.DASH)
    who = "the target's /tokenize" if info.tokenizer == "server" else info.tokenizer
    parts = [f"counted with {who}"]
    if info.special_tokens:
        parts.append(f"special tokens added to a plain prompt: {' '.join(info.special_tokens)}")
    if tk.added_tokens:
        parts.append(f"added by the server: {tk.added_tokens.min}–{tk.added_tokens.max} tokens a request")
    if tk.usage_vs_counted:
        parts.append(f"the server's usage agrees for {tk.usage_vs_counted.equal} of {tk.usage_vs_counted.n} requests")
    return "; ".join(parts)
