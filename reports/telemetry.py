"""The target's own telemetry in a report: the server-side quantities per phase, the article's checklist, and the
headline's sentence on the quantity that moved most in a spike or a step. Every number is a
:class:`~reports.report_model.Cell` read from summary.json's ``telemetry`` block; each figure names its source
metric beside it.

One idea at several stages, a target's own telemetry, so one file name: :mod:`loadgen.engine.telemetry` (sampling
it), :mod:`loadgen.telemetry` (the engines' names), :mod:`loadgen.analysis.telemetry` (the figures), this module
(showing them).
"""

from __future__ import annotations

from loadgen.records.results import Summary, TelemetryStat, TelemetrySummary
from reports import fmt
from reports.report_model import Cell, num

#: How a quantity is called in a sentence or a row.
LABELS = {"server.requests_running": "requests running", "server.queue_waiting": "requests waiting",
          "server.kv_cache_usage": "KV-cache usage", "server.prefix_cache_hit_rate": "prefix-cache hit rate",
          "server.result_cache_hit_rate": "result-cache hit rate", "server.preemptions": "preemptions per second",
          "server.batch_size": "batch size", "server.spec_acceptance_rate": "speculative acceptance rate",
          "server.spec_acceptance_length": "speculative acceptance length", "server.ttft": "engine TTFT",
          "server.itl": "engine inter-token latency", "server.e2e": "engine request latency",
          "server.queue_time": "engine queue time", "gpu.utilization": "GPU utilization",
          "gpu.memory_used": "GPU memory used", "gpu.memory_total": "GPU memory (VRAM)",
          "gpu.memory_share": "GPU memory / VRAM", "gpu.power": "GPU power (W)", "gpu.sm_clock": "GPU SM clock (MHz)"}
#: The format of a figure in each unit (reports.fmt kinds).
KINDS = {"fraction": "share", "s": "ms", "bytes": "mb", "1/s": "rate"}
CHECKS = {"gpu_utilization": "GPU utilization", "gpu_memory": "GPU memory", "result_cache_hit_rate":
          "result cache hit rate", "prefix_cache_hit_rate": "prefix cache hit rate", "batch_timeout": "batch timeout"}
STATUS = {"met": "met", "not_met": "not met", "not_measurable": "not measurable here"}


def kind(unit: str | None) -> str:
    return KINDS.get(unit or "", "num")


def _suffix(unit: str | None) -> str:
    return " ms" if unit == "s" else ""


def _primary(st: TelemetryStat) -> str:
    """The figure a row shows: a gauge's peak, else the mean."""
    return "max" if st.max is not None else "mean"


def move_sentences(s: Summary, name: str, phase: str) -> list[list]:
    """The headline's sentence on the server-side quantity that moved most in ``phase``, from summary.json's
    ``telemetry/moves``; none when the target's telemetry says nothing of it."""
    t = s.telemetry
    out = []
    for i, m in enumerate((t.moves or []) if t else []):
        if m.phase != phase or m.before is None or m.after is None:
            continue
        src, k, unit = f"telemetry/moves/{i}", kind(m.unit), _suffix(m.unit)
        word = "rose" if m.after > m.before else "fell"
        stat = "peak" if m.stat == "max" else "mean"
        out.append([f"On the server, what moved most from {m.baseline} to {phase}: "
                    f"{LABELS.get(m.quantity, m.quantity)} ({stat}) {word} from ",
                    num(m.before, f"{src}/before", k, name), f"{unit} to ", num(m.after, f"{src}/after", k, name),
                    f"{unit} ({m.source})."])
    return out


def phase_rows(s: Summary, target: str) -> tuple[list[str], list[dict], str]:
    """(phase columns, a row per quantity: its label and a cell per phase, the note naming each row's source)."""
    t = s.telemetry or TelemetrySummary()
    phases = [(n, ph) for n, ph in (t.phases or {}).items() if ph.quantities]
    if not phases:
        return [], [], ""
    order = [q for q in LABELS if any(q in (ph.quantities or {}) for _, ph in phases)]
    rows, sources = [], []
    for q in order:
        first = next(ph.quantities[q] for _, ph in phases if q in (ph.quantities or {}))
        stat = _primary(first)
        cells = []
        for n, ph in phases:
            st = (ph.quantities or {}).get(q)
            cells.append(num(getattr(st, stat) if st else None, f"telemetry/phases/{n}/quantities/{q}/{stat}",
                             kind(first.unit), target))
        unit = ", ms" if first.unit == "s" else ""
        rows.append({"label": f"{LABELS[q]} ({'peak' if stat == 'max' else 'mean'}{unit})", "cells": cells})
        sources.append(f"{LABELS[q]}: {first.source}")
    energy = [ph.energy_per_token_j for _, ph in phases]
    if any(e is not None for e in energy):
        rows.append({"label": "GPU energy per output token (J)",
                     "cells": [num(ph.energy_per_token_j, f"telemetry/phases/{n}/energy_per_token_j", "num", target)
                               for n, ph in phases]})
    engine = f"{t.engine_label} names" if t.engine_label else "no engine's names"
    how = "chosen by the scenario" if t.engine_chosen == "scenario" else "recognised"
    note = (f"Read from the target's own telemetry ({engine}, {how}"
            + (f"; GPU: {t.gpu}" if t.gpu else "") + "): " + "; ".join(sources) + ". Gauges: their peak over the "
            "phase's scrapes; histograms: their mean over the phase; counters: per second.")
    return [n for n, _ in phases], rows, note


def checklist_rows(s: Summary, target: str) -> list[dict]:
    """The article's checklist, a row each: item, status, figure (a cell), rule, and what the figure came from."""
    t = s.telemetry
    out = []
    for i, c in enumerate((t.checklist or []) if t else []):
        fig = num(c.figure, f"telemetry/checklist/{i}/figure", kind(c.unit), target) if c.figure is not None \
            else Cell(fmt.DASH)
        unit = " (ms)" if c.unit == "s" and c.figure is not None else ""  # the figure's cell holds the number alone
        out.append({"label": CHECKS.get(c.name, c.name) + unit, "status": STATUS[c.status], "css": c.status,
                    "figure": fig, "rule": c.target or "", "text": c.text or "", "source": c.source or ""})
    return out


def checklist_lines(s: Summary | None) -> list[str]:
    """The checklist as sentences (summary.md): 'GPU utilization: not measurable here: no GPU ...'."""
    t = s.telemetry if s else None
    return [f"{CHECKS.get(c.name, c.name)}: {STATUS[c.status]}: {c.text}" for c in (t.checklist or [])] if t else []
