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
from loadgen.metric_registry import outcome
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
from reports.claims import includes_one
from reports.repeated import repeated_headline
from reports.report_model import COLD, COMPARED, Cell, Headline, compared, num, pct
from reports.rundir_loader import RunData, TargetData
from reports.telemetry import move_sentences

ARCH = "@architectures"  # Cell.target of numbers of loadgen.headline.architectures()


def _pct_parts(p: Percentile | None, src: str, target: str, kind: str = "ms", unit: str = " ms",
               few: bool = True) -> list:
    """'412 ms (95% CI [380, 460])', or '412 ms (too few samples for an interval)' (``few``: say so), of a
    percentile of a summary (``src``: its path)."""
    p = p or Percentile()
    parts: list = [num(p.value, f"{src}/value", kind, target), unit]
    if p.ci and not p.too_few_samples:  # the ends of too few samples are no interval
        ci = Cell(fmt.ci(p.ci, kind), f"{src}/ci", "ci" if kind == "ms" else f"ci-{kind}", target, css="rng")
        parts += [" (interval " if kind == "x" else " (95% CI ", ci, ")"]
    elif few and p.value is not None:
        parts.append(" (too few samples for an interval)")
    return parts


def _ratio_parts(target: str, r: tuple[Percentile | None, str], needs: tuple[int | None, str],
                 ns: list[tuple[str, Percentile | None, str]]) -> list:
    """A ratio of two percentiles as a claim (see :mod:`reports.claims`): 'r (interval [lo, hi])', 'no clear
    difference (ratio r, interval [lo, hi])' when the interval holds 1, else 'r, with no interval: ...' saying how
    many requests each side had and how many an interval needs (``ns``: (name, percentile, its path) per side)."""
    p, src = r
    p = p or Percentile()
    value = num(p.value, f"{src}/value", "x", target)
    if p.ci and includes_one(p.ci):
        return ["no clear difference (ratio ", value, ", interval ", _ci_cell(p.ci, f"{src}/ci", "x", target), ")"]
    if p.ci:
        return [value, " (interval ", _ci_cell(p.ci, f"{src}/ci", "x", target), ")"]
    out = [value, ", with no interval: too few requests ("]
    for j, (name, q, path) in enumerate(ns):
        n = num((q or Percentile()).n, f"{path}/n", "count", target)
        out += [", " if j else "", n, f" in {name}" if name else ""]
    out.append(")")
    if needs[0]:
        out += ["; a p99's 95% interval needs at least ", num(needs[0], needs[1], "count", target)]
    return out


def _ci_cell(ci, src: str, kind: str, target: str) -> Cell:
    return Cell(fmt.ci(ci, kind), src, "ci" if kind == "ms" else f"ci-{kind}", target, css="rng")


def _tail_parts(target: str, lead: str, a: tuple[Percentile | None, str], where_b: list,
                b: tuple[Percentile | None, str], r: tuple[Percentile | None, str], needs: tuple[int | None, str],
                names: tuple[str, str]) -> list:
    """'<lead> was A ms (95% CI ...) against B ms (95% CI ...) <where_b>: <ratio claim>.', or what is missing and
    why when either percentile is."""
    missing = [n for (p, _), n in ((a, names[0]), (b, names[1])) if (p or Percentile()).value is None]
    if missing:
        return [f"{lead} cannot be compared: no request of {' or '.join(missing)} succeeded."]
    few = not ((a[0] and a[0].ci and not a[0].too_few_samples) or (b[0] and b[0].ci and not b[0].too_few_samples))
    ns = [(names[0], a[0], a[1]), (names[1], b[0], b[1])]
    return [f"{lead} was ", *_pct_parts(*a, target, few=not few), " against ", *_pct_parts(*b, target, few=not few),
            " ", *where_b, ": ", *_ratio_parts(target, r, needs, ns), "."]


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
        return architectures_headline([(td.name, td) for td in run.targets],
                                      compared([(run, td) for td in run.targets if td.result]))
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
            s += ["; within ", num((g.rules or ColdRules()).steady_within, f"{group}/rules/steady_within", "share",
                                   COLD), " of steady from request ",
                  num(g.spread("first_steady_request").median, f"{group}/over_starts/first_steady_request/median",
                      "num", COLD)]
        if g.spread("model_load_s").n:
            s += ["; model load ", *_start_spread(g, group, "model_load_s")]
        sentences.append(s + ["."])
    checks = [cold_note(g, group) for group, g in cs.items()]
    notes = [*dict.fromkeys(m for m, _ in checks if m), *(t for _, t in checks)]  # the method once, then each group
    starts = {g.starts for g in cs.values()}
    n = starts.pop() if len(starts) == 1 else None
    level = (f" (with {n} starts the range is a {1 - 2 * 0.5 ** n:.0%} interval of the median)"
             if isinstance(n, int) and n > 1 else "")
    notes.append(f"Medians over the starts, range in brackets{level}. Steady: the median latency of a start's "
                 "second half of requests (sent one at a time); the penalty is the first request's latency minus "
                 "it. Model load: the server's own gauge.")
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
        exited = s.server_exit
        first = [who]
        if exited:
            first += [f"The {exited.what or 'server'} exited during {exited.phase}, ",
                      num(exited.t, "server_exit/t", "s", name), " into the run (see the warnings above): what "
                      "follows is of the requests before it. "]
        first += [f"After the {e.spike} phase (", num(e.spike_qps, f"{b}/spike_qps", "rate", name), " req/s for ",
                  num(spike.duration_s, f"phases/{e.spike}/duration_s", "s", name)]
        if s.duration_s is not None and e.end is not None and s.duration_s < e.end:
            first.append(", where the run stopped")
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
            second += _tail_parts(name, f"Latency p99 during {e.spike}", (t.spike, f"{b}/tail/spike"),
                                  [f"in {e.baseline}"], (t.baseline, f"{b}/tail/baseline"),
                                  (t.ratio, f"{b}/tail/ratio"), (t.interval_needs, f"{b}/tail/interval_needs"),
                                  (e.spike, e.baseline))
            second.append(" ")
        fl = e.in_flight or InFlight()
        stopped = s.duration_s is not None and e.end is not None and s.duration_s < e.end
        second += ["Requests in flight peaked at ", num(fl.peak, f"{b}/in_flight/peak", "count", name)]
        if fl.baseline_peak is not None:
            second += [" (baseline peak ", num(fl.baseline_peak, f"{b}/in_flight/baseline_peak", "count", name), ")"]
            if stopped:
                second.append(f"; the run stopped before {e.spike} ended, so there is no drain to measure.")
            elif fl.drain_s is not None:
                second += [" and were back at the baseline's peak ",
                           num(fl.drain_s, f"{b}/in_flight/drain_s", "s", name),
                           f" after the {e.spike} phase ended."]
            else:
                second.append(f", and were not back at the baseline's peak by the end of {e.after}.")
        else:
            second.append(".")
        sentences.append(second)
        sentences += move_sentences(s, name, e.spike)
        if rec is not None and rec.measured is not False:
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

        first = [who + "At ", *at("high"), ", "]
        first += _tail_parts(name, "latency p99", (d.high.p99, f"{h}/high/p99"), ["at ", *at("base")],
                             (d.base.p99, f"{h}/base/p99"),
                             (d.ratio, f"{h}/ratio"), (d.interval_needs, f"{h}/interval_needs"),
                             (d.high.phase, d.base.phase))
        sentences.append(first)
        sentences.append(_headroom_verdict(s, name) + _headroom_capacity(d, name))
        sentences += move_sentences(s, name, d.high.phase)
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


def architectures_data(entries: list[tuple[str, TargetData]]) -> dict | None:
    """:func:`loadgen.headline.architectures` of labelled targets (their summaries and server configs)."""
    return architectures([(label, td.result, td.meta.server.to_json() if td.meta.server else {})
                          for label, td in entries])


def architectures_headline(entries: list[tuple[str, TargetData]], what: str = "architecture") -> Headline | None:
    """The article's form, one sentence per entry: "optimized: mean A ms, p99 B ms, p99 3.1x lower than naive's
    (interval [2.0x, 4.4x])", each followed by the settings that set it apart from the first; a ratio without an
    interval says why, one whose interval holds 1 says "no clear difference". ``what``: what the entries are (a key
    of :data:`reports.report_model.COMPARED`), for the title."""
    a = architectures_data(entries)
    if a is None:
        return None
    lines = []
    for i, r in enumerate(a["rows"]):
        label, lat = r["label"], "overall/metrics/latency"
        s: list = [Cell(label), ": "]
        if not r["n"]:
            s.append("no successful request, so no latency to compare")
        else:
            s += ["mean ", num(r["mean"], f"{lat}/mean", "ms", label), " ms, p99 ",
                  num(r["p99"]["value"], f"{lat}/percentiles/p99/value", "ms", label), " ms"]
            if i:
                s += [", "] + _versus_first(a, i)
        own = [k for k, v in a["knobs"].items() if v[i] != v[0]]
        if own:
            s.append(f". Differs from {a['base']} in: ")
            for j, k in enumerate(own):
                kind = "ms" if k.endswith("_s") else "setting"
                s += ["; " if j else "", f"{KNOB_LABELS.get(k, k)} ",
                      num(a["knobs"][k][i], f"knobs/{k}/{i}", kind, ARCH, css="rng"), " ms" if kind == "ms" else ""]
        lines.append(s + ["."])
    notes = ["Overall scope (recorded phases), successful requests. A p99 ratio is against the first entry's, its "
             "interval from the ends of the two 95% intervals (it holds with at least 90% confidence)."]
    plural = COMPARED.get(what, COMPARED["target"])[1]
    return Headline("architectures", f"{plural.capitalize()} side by side", lines, notes, as_list=len(lines) > 2)


def _versus_first(a: dict, i: int) -> list:
    """Entry ``i``'s p99 against the first's, as a claim: the factor and its interval, "no clear difference" when
    the interval holds 1, or why there is no interval (too few requests, with how many there were)."""
    r, base, p = a["rows"][i], a["base"], f"rows/{i}/p99_vs_first"
    vs = r["p99_vs_first"]
    if not vs or vs["value"] is None:
        return [f"no p99 ratio to {base}'s (one of them has no p99)"]
    factor, ci = num(vs["value"], f"{p}/value", "x", ARCH), vs["ci"]
    if ci and includes_one(ci):
        return [f"no clear difference in p99 from {base}'s (ratio ", factor, ", interval ",
                _ci_cell(ci, f"{p}/ci", "x", ARCH), ")"]
    out = ["p99 ", factor, f" {'lower' if vs['lower'] else 'higher'} than {base}'s"]
    if ci:
        return out + [" (interval ", _ci_cell(ci, f"{p}/ci", "x", ARCH), ")"]
    lat = "overall/metrics/latency/n"
    return out + [" (no interval: from ", num(a["rows"][0]["n"], lat, "count", base), " and ",
                  num(r["n"], lat, "count", r["label"]), " requests; a p99's 95% interval needs at least ",
                  num(a["interval_needs"], "interval_needs", "count", ARCH), " each)"]


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
                  num(c.turns_per_session.mean, "conversations/turns_per_session/mean", "num", name),
                  " recorded turns each on average. "]
    first, final = (Cell(f"turn {k}", css="turn") for k in (1, turns[last].turn + 1))  # names, not measurements
    if last == 0:
        sent.append("Only the first turn has successful requests, so there is no growth to show. ")
    for metric, label in (("ttft", "TTFT"), ("latency", "latency")) if last else ():
        at_first, at_last = (pct(getattr(turns[k], metric), "p50").value for k in (0, last))
        if at_first is None or at_last is None:
            continue
        sent += [f"{label} p50 ", num(at_first, f"{base}/0/{metric}/percentiles/p50/value", "ms", name),
                 " ms at ", first, ", ", num(at_last, f"{base}/{last}/{metric}/percentiles/p50/value", "ms", name),
                 " ms at ", final, "; "]
    if last:
        sent += ["the prompt grows from ",
                 num(turns[0].prompt_tokens_mean, f"{base}/0/prompt_tokens_mean", "rate", name), " to ",
                 num(turns[last].prompt_tokens_mean, f"{base}/{last}/prompt_tokens_mean", "rate", name),
                 " tokens on average, as each turn resends the history. "]
    ov = s.overall or Scope()
    sent += ["Turns in all: "] + outcome_parts(ov, "overall", name) + ["."]
    return Headline("conversation", "Conversations: what the history costs, turn by turn", [sent], [])


def steady_headline(td: TargetData) -> Headline:
    """The overall p50 and p99 with their intervals, at the rate achieved against the rate asked (a closed loop:
    the concurrency asked and held), and how the requests ended."""
    s, name = td.result, td.name
    ov = s.overall or Scope()
    lat, src = ov.metric("latency") or MetricStats(), "overall/metrics/latency/percentiles"
    if lat.n:
        sent = ["Latency mean ", num(lat.mean, "overall/metrics/latency/mean", "ms", name), " ms, p50 ",
                *_pct_parts(pct(lat, "p50"), f"{src}/p50", name), ", p99 ",
                *_pct_parts(pct(lat, "p99"), f"{src}/p99", name)]
    else:
        sent = ["No request succeeded, so there is no latency to report"]
    sent += _asked_parts(s, name) + ["; "] + outcome_parts(ov, "overall", name) + ["."]
    return Headline("steady", "Result", [sent] + _by_phase(s, name), [])


def _by_phase(s: Summary, name: str) -> list:
    """With several recorded phases (a sweep's steps), one more sentence: each phase's p99 at the rate it achieved
    against the rate (or concurrency) it asked."""
    recorded = [(n, ph) for n, ph in (s.phases or {}).items() if ph and ph.is_recorded]
    if len(recorded) < 2:
        return []
    out: list = ["By phase, latency p99: "]
    for j, (n, ph) in enumerate(recorded):
        src = f"phases/{n}"
        p99 = pct(ph.metric("latency"), "p99")
        out += ["; " if j else "", f"{n} "]
        out += ([num(p99.value, f"{src}/metrics/latency/percentiles/p99/value", "ms", name), " ms"]
                if p99.value is not None else ["not measured (no request succeeded)"])
        out += [" at ", num(ph.achieved_qps, f"{src}/achieved_qps", "rate", name), " req/s"]
        if ph.closed_loop:
            out += [" (concurrency ", num(ph.closed_loop.asked, f"{src}/closed_loop/asked", "count", name), ")"]
        elif ph.target_qps is not None:
            out += [" (target ", num(ph.target_qps, f"{src}/target_qps", "rate", name), ")"]
    return [out + ["."]]


def _asked_parts(s: Summary, name: str) -> list:
    """' at X req/s achieved (target Y req/s)' of an open loop; ' with N concurrent users asked, H held on average
    (X req/s achieved)' of a run whose recorded phase is one closed loop."""
    ov = s.overall or Scope()
    achieved = num(ov.achieved_qps, "overall/achieved_qps", "rate", name)
    recorded = [(n, ph) for n, ph in (s.phases or {}).items() if ph and ph.is_recorded]
    if len(recorded) == 1 and recorded[0][1].closed_loop:
        n, cl = recorded[0][0], recorded[0][1].closed_loop
        out = [" with ", num(cl.asked, f"phases/{n}/closed_loop/asked", "count", name), " concurrent users asked"]
        if cl.held is not None:
            out += [", ", num(cl.held, f"phases/{n}/closed_loop/held", "rate", name), " held on average"]
        return out + [" (", achieved, " req/s achieved)"]
    if any(ph.closed_loop for _, ph in recorded):
        return [" at ", achieved, " req/s achieved (closed-loop phases ask a concurrency, not a rate)"]
    out = [" at ", achieved, " req/s achieved"]
    if ov.target_qps is not None:
        out += [" (target ", num(ov.target_qps, "overall/target_qps", "rate", name), " req/s)"]
    return out


def outcome_parts(sc: Scope, prefix: str, name: str) -> list:
    """'N requests: K ok, errors: reset 3, cancelled 2, A aborted, error rate E' in the outcome vocabulary of
    :data:`loadgen.metric_registry.OUTCOMES`, every count marked with its source."""
    out = [num(sc.count, f"{prefix}/count", "count", name), " requests: ", num(sc.ok, f"{prefix}/ok", "count", name),
           f" {outcome('ok').label}"]
    errors = sorted((sc.errors or {}).items(), key=lambda kv: (kv[0] == "cancelled", kv[0]))
    if errors:
        out.append(", errors: ")
        for j, (cls, _) in enumerate(errors):
            out += [", " if j else "", f"{cls} ", num(sc.errors[cls], f"{prefix}/errors/{cls}", "count", name)]
    if sc.aborted:
        out += [", ", num(sc.aborted, f"{prefix}/aborted", "count", name), f" {outcome('aborted').label}"]
    return out + [", error rate ", num(sc.error_rate, f"{prefix}/error_rate", "pct", name)]


def text(sentence: list) -> str:
    """A sentence as plain text."""
    return "".join(p if isinstance(p, str) else p.text for p in sentence)
