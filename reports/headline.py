"""The headline of a report: one or two sentences that answer the question the scenario asks, chosen by
what it measures, before any table.

- fresh starts (cold_start.json): per architecture, medians and ranges over starts of time to ready,
  first-request latency and TTFT, the penalty over steady state, when latency is warm; which starts were cold
- a spike (summary ``burst``): recovery time and its rule, tail during the spike against the baseline,
  peak requests in flight and the drain time
- a load step above the expected rate (summary ``headroom``): p99 at 100% and at 120%, their ratio, the
  objectives, and the distance from the knee when a capacity search was given
- several targets: the article's sentence (mean and p99 of each, p99 ratio) and the knobs that differ
- one target holding conversations (summary ``conversations``): TTFT and latency at the first turn against
  the last, with the prompt's growth between them
- repeated runs (repeats.json): per target, the median p50 and p99 over its runs with between-run intervals
- otherwise: the overall p50 and p99 at the rate achieved

Every number is a :class:`reports.report_model.Cell` read from where it was computed (a target's summary as
its model, cold_start.json, or :func:`loadgen.headline.architectures`); this module only words and formats.
A sentence is a list of parts, each a str or a Cell; HTML and Markdown lay the same parts out.

One idea at several stages, a report's headline, so one file name: :mod:`loadgen.analysis.headline` (the numbers).
"""

from __future__ import annotations

from loadgen.analysis.headline import architectures
from loadgen.records.results import (
    ColdRules,
    InFlight,
    MetricStats,
    Percentile,
    Scope,
    StartGroup,
    Summary,
    WeightsFile,
    WeightsPrepared,
)
from reports import fmt
from reports.repeated import repeated_headline
from reports.report_model import COLD, Cell, Headline, num, pct
from reports.rundir_loader import RunData, TargetData

ARCH = "@architectures"  # Cell.target of numbers of loadgen.headline.architectures()


def _pct_parts(p: Percentile | None, src: str, target: str, kind: str = "ms", unit: str = " ms",
               few: bool = True) -> list:
    """A percentile of a summary with its interval, as :func:`_with_ci` words it (``src``: its path)."""
    p = p or Percentile()
    parts: list = [num(p.value, f"{src}/value", kind, target), unit]
    if p.ci:
        ci = Cell(fmt.ci(p.ci, kind), f"{src}/ci", "ci" if kind == "ms" else f"ci-{kind}", target, css="rng")
        parts += [" (interval " if kind == "x" else " (95% CI ", ci, ")"]
    elif few and p.value is not None:
        parts.append(" (too few samples for an interval)")
    return parts


def _pcts_compared(target: str, a: tuple[Percentile | None, str], b: tuple[Percentile | None, str],
                   r: tuple[Percentile | None, str], needs: int | None) -> tuple[list, list, list, list]:
    """Two percentiles of a summary and their ratio, each (model, its path), as :func:`_compared` words them."""
    none = not any(p is not None and p.ci for p, _ in (a, b, r))
    note = []
    if none:
        note = [f" (no intervals: too few requests; a p99's 95% interval needs at least {needs})" if needs
                else " (no intervals: too few requests)"]
    return (_pct_parts(*a, target, few=not none), _pct_parts(*b, target, few=not none),
            _pct_parts(*r, target, "x", "", few=not none), note)


def choose(run: RunData) -> str:
    """What the run measures: cold_start | repeated | burst | headroom | architectures | conversation | steady |
    none."""
    summaries = [td.result for td in run.targets if td.result]
    if run.cold_start:
        return "cold_start"
    if run.repeated:  # a run's own burst or headroom is one run's; over runs the medians speak
        return "repeated"
    if any(s.burst for s in summaries):
        return "burst"
    if any(s.headroom for s in summaries):
        return "headroom"
    if len(summaries) >= 2:
        return "architectures"
    if summaries and summaries[0].conversations and summaries[0].conversations.by_turn:
        return "conversation"
    return "steady" if summaries else "none"


def headline(run: RunData) -> Headline | None:
    """The :class:`~reports.report_model.Headline` for the top of a report (None: the run measured nothing)."""
    kind = choose(run)
    if kind == "cold_start":
        return cold_start_headline(run.cold_start)
    if kind == "repeated":
        return repeated_headline(run.repeated)
    if kind == "burst":
        return burst_headline([(td, i) for td in run.targets if td.result for i in range(len(td.result.burst or []))])
    if kind == "headroom":
        return headroom_headline([td for td in run.targets if td.result and td.result.headroom])
    if kind == "architectures":
        return architectures_headline([(td.name, td) for td in run.targets])
    if kind == "conversation":
        return conversation_headline(next(td for td in run.targets if td.result))
    if kind == "steady":
        return steady_headline(next(td for td in run.targets if td.result))
    return None


# -- cold start ------------------------------------------------------------------------------------

def _start_spread(g: StartGroup, group: str, figure: str, kind: str = "ms", unit: str = " ms") -> list:
    """'425 ms (345–463)': the median over starts and its range (cold_start.json's ``over_starts``)."""
    sp, path = g.spread(figure), f"{group}/over_starts/{figure}"
    lo, hi = num(sp.min, f"{path}/min", kind, COLD, "rng"), num(sp.max, f"{path}/max", kind, COLD, "rng")
    return [num(sp.median, f"{path}/median", kind, COLD), unit, " (", lo, "–", hi, ")"]  # the range quieter


def cold_start_headline(cs: dict[str, StartGroup]) -> Headline:
    """One line per architecture: time to ready, first request and its penalty over steady state, TTFT,
    when latency is warm, the server's model load; then which starts were cold and how latbench knows."""
    sentences = []
    for group, g in cs.items():
        s = [Cell(group), " (", num(g.starts, f"{group}/starts", "count", COLD), " fresh starts"]
        if g.cold_unknown == g.starts:
            s.append(", cold or not unknown")
        else:
            s += [", ", num(g.cold_starts, f"{group}/cold_starts", "count", COLD), " cold"]
        s += ["): ready after ", *_start_spread(g, group, "ready_s"),
              "; first request ", *_start_spread(g, group, "first_latency_s")]
        if g.spread("penalty_s").n:
            s += [", ", *_start_spread(g, group, "penalty_s"), " over its steady ",
                  num(g.spread("steady_latency_s").median, f"{group}/over_starts/steady_latency_s/median", "ms",
                      COLD), " ms"]
        else:
            s.append(" (no later request to measure a steady latency against)")
        if g.spread("first_ttft_s").n:
            s += ["; first TTFT ", *_start_spread(g, group, "first_ttft_s")]
        if g.spread("first_steady_request").n:
            s += [f"; within {(g.rules or ColdRules()).steady_within * 100:.0f}% of steady from request ",
                  num(g.spread("first_steady_request").median, f"{group}/over_starts/first_steady_request/median",
                      "num", COLD)]
        if g.spread("model_load_s").n:
            s += ["; model load ", *_start_spread(g, group, "model_load_s")]
        sentences.append(s + ["."])
    checks = [cold_note(g, group) for group, g in cs.items()]
    notes = [*dict.fromkeys(m for m, _ in checks if m), *(t for _, t in checks)]  # the method once, then each group
    notes.append("Medians over the starts, range in brackets (with five starts the range is a 94% interval of the "
                 "median). Steady: the median latency of a start's second half of requests (sent one at a time); "
                 "the penalty is the first request's latency minus it. Model load: the server's own gauge.")
    return Headline("cold_start", "Cold start: what the first request after a deploy costs", sentences, notes,
                    as_list=True)


def cold_note(g: StartGroup, group: str) -> tuple[str | None, str]:
    """(how latbench knows a start was cold, which starts of ``group`` were), from the per-start page-cache
    checks: the first is the same for every group (said once), the second names the group."""
    rows = g.per_start or []
    w = g.weights or WeightsFile()
    prepared = g.weights_prepared or WeightsPrepared()
    cold = [r.start for r in rows if r.cold is True]
    warm = [r for r in rows if r.cold is False]
    unknown = [r for r in rows if r.cold is None]
    if not g.weights:
        reason = next((r.page_cache.reason for r in rows if r.page_cache), None)
        return None, (f"{group}: whether its starts were cold is unknown: latbench knows no weights file of this "
                      f"target ({reason or 'not the bundled reference server'}), so it could not drop one from the "
                      "page cache.")
    rules = g.rules or ColdRules()
    limit = rules.cold_resident_max if "cold_resident_max" in rules.model_fields_set else 0.01
    method = ("How latbench knows a start was cold: before each start it dropped the weights file from the OS page "
              "cache (posix_fadvise DONTNEED) and checked with mincore how much of it was still cached (cold: at "
              f"most {limit:.0%}).")
    cached = [r.page_cache.resident_after for r in rows if r.page_cache and r.page_cache.resident_after is not None]
    text = (f"{group}: {len(cold)} of {len(rows)} starts were cold ({fmt.mb(w.bytes)} weights file"
            + (f"; at most {fmt.share(max(cached))} of it still cached" if cached else "") + ").")
    for r in warm:
        res = r.page_cache.resident_after if r.page_cache else None
        text += f" Start {r.start} was not cold: {fmt.share(res)} of the file was still cached."
    if unknown:
        text += f" Starts {', '.join(str(r.start) for r in unknown)}: unknown (the platform could not tell)."
    if prepared.generated_s is not None:
        text += (" The weights were generated once before the first start "
                 f"({fmt.seconds(prepared.generated_s)}, no part of any start).")
    elif prepared.path:
        text += " The weights file existed before the first start (generation is no part of any start)."
    return method, text


# -- burst -----------------------------------------------------------------------------------------

def burst_headline(spikes: list[tuple[TargetData, int]]) -> Headline:
    sentences, notes = [], []
    for td, i in spikes:
        s, name, b = td.result, td.name, f"burst/{i}"
        e = s.burst[i]
        who = f"{name}: " if len(spikes) > 1 else ""
        spike = (s.phases or {}).get(e.spike) or Scope()
        first = [who + f"After the {e.spike} phase (", num(e.spike_qps, f"{b}/spike_qps", "rate", name), " req/s for ",
                 num(spike.duration_s, f"phases/{e.spike}/duration_s", "s", name)]
        if e.baseline:
            first += [", against ", num(e.baseline_qps, f"{b}/baseline_qps", "rate", name), f" req/s in {e.baseline}"]
        first.append("), ")
        rec = e.recovery
        if rec is None:
            first.append("no recovery time: there is no latency.p99 objective for the phase after it to recover to.")
        elif rec.measured is False:
            first.append(f"no recovery time: no request was sent in {rec.phase} (the run stopped before it).")
        elif rec.recovered:
            first += ["latency p99 was back under ", num(rec.threshold, f"{b}/recovery/threshold", "ms", name), " ms ",
                      num(rec.seconds, f"{b}/recovery/seconds", "s", name), f" into {rec.phase}."]
        else:
            first += ["latency p99 did not get back under ", num(rec.threshold, f"{b}/recovery/threshold", "ms", name),
                      f" ms during {rec.phase}."]
        sentences.append(first)
        second = []
        if e.baseline:
            t = e.tail
            sp, ba, r, note = _pcts_compared(name, (t.spike, f"{b}/tail/spike"), (t.baseline, f"{b}/tail/baseline"),
                                             (t.ratio, f"{b}/tail/ratio"), t.interval_needs)
            second += [f"Latency p99 during {e.spike} was ", *sp, ", ", *r, " the ", *ba, f" of {e.baseline}",
                       *note, ". "]
        fl = e.in_flight or InFlight()
        second += ["Requests in flight peaked at ", num(fl.peak, f"{b}/in_flight/peak", "count", name)]
        if fl.baseline_peak is not None:
            second += [" (baseline peak ", num(fl.baseline_peak, f"{b}/in_flight/baseline_peak", "count", name), ")"]
            if fl.drain_s is not None:
                second += [" and were back at the baseline's peak ",
                           num(fl.drain_s, f"{b}/in_flight/drain_s", "s", name),
                           f" after the {e.spike} phase ended."]
            else:
                second.append(f", and were not back at the baseline's peak by the end of {e.after}.")
        else:
            second.append(".")
        sentences.append(second)
        if rec is not None:
            notes.append(f"Recovery rule: the p99 latency of every {rec.window_s:g} s window of requests scheduled "
                         f"in {rec.phase} (failed ones as infinitely slow), sliding by {rec.step_s:g} s, stays "
                         f"under the phase's latency.p99 objective from then on; the time is the start of the first "
                         f"such window, known to {rec.step_s:g} s. A window held about {rec.window_requests:.0f} "
                         "requests" + (", so its p99 is its slowest request." if rec.window_requests < 100 else ".")
                         + " It has no confidence interval.")
    notes.append("Ratio intervals come from the ends of the two 95% intervals (they hold with at least 90% "
                 "confidence). Drain: from the spike's end until requests in flight were back at the baseline "
                 "phase's peak, from exact send and completion times.")
    return Headline("burst", "Burst and recovery", sentences, notes)


# -- headroom (120%) -------------------------------------------------------------------------------

def headroom_headline(targets: list[TargetData]) -> Headline:
    sentences, notes = [], []
    for td in targets:
        s, name, h = td.result, td.name, "headroom"
        d = s.headroom
        who = f"{name}: " if len(targets) > 1 else ""

        def at(key: str) -> list:
            level = getattr(d, key)
            part = [num(level.qps, f"{h}/{key}/qps", "rate", name), " req/s"]
            if level.share is not None:
                part = [num(level.share, f"{h}/{key}/share", "share", name), " of the expected rate (", *part, ")"]
            return part

        hi, lo, r, note = _pcts_compared(name, (d.high.p99, f"{h}/high/p99"), (d.base.p99, f"{h}/base/p99"),
                                         (d.ratio, f"{h}/ratio"), d.interval_needs)
        first = [who + "At ", *at("high"), " latency p99 was ", *hi, ", ", *r, " the ", *lo, " at ", *at("base"),
                 *note, "."]
        sentences.append(first)
        sentences.append(_headroom_verdict(s, name) + _headroom_capacity(d, name))
    notes.append("Ratio interval from the ends of the two 95% intervals (holds with at least 90% confidence).")
    if not any(td.result.headroom.capacity for td in targets):
        notes.append("Pass `--capacity RUNDIR` (a `latbench capacity` search of the same target) to place the load "
                     "on the capacity curve.")
    share = targets[0].result.headroom.high.share
    title = f"Headroom at {fmt.share(share)} of the expected rate" if share else "Headroom"
    return Headline("headroom", title, sentences, notes)


def _headroom_verdict(s: Summary, name: str) -> list:
    """Whether the headroom holds, from the objectives scoped to its phases (the deciding phase's first)."""
    d = s.headroom
    if not d.objectives:
        return ["No objective is scoped to these phases, so there is no verdict on the headroom."]
    base, high = d.base.phase, d.high.phase
    if d.holds and d.holds_at_base is not False:
        second = ["The headroom holds: "]
    elif d.holds_at_base is False:
        second = [f"No headroom: the objective fails already at the expected rate ({base}): "]
    else:
        second = [f"The headroom does not hold: the objective passes at {base} but fails at {high}: "]
    first = base if d.holds_at_base is False else high  # the phase that decides first
    for j, o in enumerate(sorted(d.objectives, key=lambda o: o.phase != first)):
        r = s.slo[o.slo]
        kind = fmt.slo_kind(r.stat, r.metric)
        second += ["; " if j else "", f"{o.expr} measured ", num(r.value, f"slo/{o.slo}/value", kind, name),
                   " ms" if kind == "ms" else "", " (pass)" if o.passed else " (FAIL)"]
    return second + ["."]


def _headroom_capacity(d, name: str) -> list:
    """Where the high phase sits on the curve of the capacity search given with ``--capacity`` (none: [])."""
    cap, h = d.capacity, "headroom"
    if not cap:
        return []
    return [f" The capacity search {cap.rundir} found the knee near ",
            num(cap.knee_qps, f"{h}/capacity/knee_qps", "rate", name), " req/s and held ",
            num(cap.max_sustainable_qps, f"{h}/capacity/max_sustainable_qps", "rate", name),
            " req/s under its objectives: ", f"{d.high.phase} runs at ",
            num(cap.share_of_knee, f"{h}/capacity/share_of_knee", "share", name), " of the knee and ",
            num(cap.share_of_sustainable, f"{h}/capacity/share_of_sustainable", "share", name), " of the rate it held."]


# -- architectures ---------------------------------------------------------------------------------

KNOB_LABELS = {"preload": "preload", "warmup": "warm-up", "max_batch_size": "max batch size",
               "max_queue_delay_s": "max queue delay", "cache_size": "result cache entries", "precision": "precision",
               "prefix_cache": "prefix cache", "prefix_cache_blocks": "prefix cache blocks",
               "step_threads": "compute threads", "threads": "torch threads", "max_step_tokens": "tokens per step",
               "model": "model", "backend": "backend"}


def knob_value(key: str, v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if v is None:
        return fmt.DASH
    if key.endswith("_s"):
        return f"{v * 1e3:g} ms"
    return str(v)


def architectures_data(entries: list[tuple[str, TargetData]]) -> dict | None:
    """:func:`loadgen.headline.architectures` of labelled targets (their summaries and server configs)."""
    return architectures([(label, td.result, td.meta.server.to_json() if td.meta.server else {})
                          for label, td in entries])


def architectures_headline(entries: list[tuple[str, TargetData]]) -> Headline | None:
    """The article's form: "naive: mean X ms, p99 Y ms; optimized: mean A ms, p99 B ms (p99 Z times lower)",
    one line per architecture when there are more than two, each followed by the knobs that set it apart
    from the first."""
    a = architectures_data(entries)
    if a is None:
        return None
    lines = []
    for i, r in enumerate(a["rows"]):
        own = [f"{KNOB_LABELS.get(k, k)} {knob_value(k, v[i])}" for k, v in a["knobs"].items() if v[i] != v[0]]
        s = [Cell(r["label"])]
        s += [": mean ", num(r["mean"], f"rows/{i}/mean", "ms", ARCH), " ms, p99 ",
              num(r["p99"]["value"], f"rows/{i}/p99/value", "ms", ARCH), " ms"]
        vs = r["p99_vs_first"]
        if vs and vs["value"] is not None:
            s += [" (p99 ", num(vs["value"], f"rows/{i}/p99_vs_first/value", "x", ARCH),
                  f" {'lower' if vs['lower'] else 'higher'} than {a['base']}"]
            ci = vs["ci"] and Cell(fmt.ci(vs["ci"], "x"), f"rows/{i}/p99_vs_first/ci", "ci-x", ARCH, css="rng")
            s += [", interval ", ci, ")"] if ci else [")"]
        if own:
            s += [" — ", Cell("; ".join(own), css="rng")]
        lines.append(s)
    many = len(lines) > 2
    sentences = lines if many else [[p for j, line in enumerate(lines) for p in (["; "] if j else []) + line] + ["."]]
    notes = ["Overall scope (recorded phases), successful requests. After each: the server settings that differ "
             f"from {a['base']}'s." if a["knobs"] else "Overall scope (recorded phases), successful requests."]
    return Headline("architectures", "Architectures side by side", sentences, notes, as_list=many)


# -- steady ----------------------------------------------------------------------------------------

def conversation_headline(td: TargetData) -> Headline:
    """What the history costs: TTFT (streams) and latency p50 at the first turn and at the last turn index that
    has successful requests, and the mean prompt between them."""
    s, name = td.result, td.name
    c = s.conversations
    turns = c.by_turn
    last = max((i for i, t in enumerate(turns) if t.ok), default=0)
    base = "conversations/by_turn"
    sent: list = [num(c.sessions, "conversations/sessions", "count", name), " sessions, ",
                  f"{c.turns_per_session.mean:.1f} turns each on average. "]
    for metric, label in (("ttft", "TTFT"), ("latency", "latency")):
        at_first, at_last = (pct(getattr(turns[k], metric), "p50").value for k in (0, last))
        if at_first is None:
            continue
        sent += [f"{label} p50 ", num(at_first, f"{base}/0/{metric}/percentiles/p50/value", "ms", name),
                 " ms at turn 1, ", num(at_last, f"{base}/{last}/{metric}/percentiles/p50/value", "ms", name),
                 f" ms at turn {turns[last].turn + 1}; "]
    sent += ["the prompt grows from ", num(turns[0].prompt_tokens_mean, f"{base}/0/prompt_tokens_mean", "rate", name),
             " to ", num(turns[last].prompt_tokens_mean, f"{base}/{last}/prompt_tokens_mean", "rate", name),
             " tokens on average, as each turn resends the history. Error rate ",
             num((s.overall or Scope()).error_rate, "overall/error_rate", "pct", name), "."]
    return Headline("conversation", "Conversations: what the history costs, turn by turn", [sent], [])


def steady_headline(td: TargetData) -> Headline:
    s, name = td.result, td.name
    ov = s.overall or Scope()
    lat, src = ov.metric("latency") or MetricStats(), "overall/metrics/latency/percentiles"
    sent = ["Latency mean ", num(lat.mean, "overall/metrics/latency/mean", "ms", name), " ms, p50 ",
            *_pct_parts(pct(lat, "p50"), f"{src}/p50", name), ", p99 ",
            *_pct_parts(pct(lat, "p99"), f"{src}/p99", name),
            " at ", num(ov.achieved_qps, "overall/achieved_qps", "rate", name), " req/s achieved (target ",
            num(ov.target_qps, "overall/target_qps", "rate", name), " req/s); ",
            num(ov.count, "overall/count", "count", name), " requests, error rate ",
            num(ov.error_rate, "overall/error_rate", "pct", name), "."]
    return Headline("steady", "Result", [sent], [])


def text(sentence: list) -> str:
    """A sentence as plain text."""
    return "".join(p if isinstance(p, str) else p.text for p in sentence)
