"""The target's own telemetry per phase: the engine's /metrics and the GPU's samples read through their adapters
(:mod:`loadgen.telemetry.adapters`) into summary.json's ``telemetry`` block and the rows of ``telemetry.csv``; the
article's checklist answered; the server-side quantity that moved most in a spike or a step; the server-side SLOs.

The article's checklist (each met / not met / not measurable here, with its figure):

- GPU utilization inside 70-80% during the steady phases (the recorded phases that are neither a spike nor a step
  above the expected rate): busy, with room for a burst;
- GPU memory at most 80% of VRAM (the highest share sampled in a recorded phase);
- cache hit rates at least 90% (the result cache's, the prefix cache's, over the recorded phases);
- the batch timeout 50-100 ms, where the server's configuration is known (the reference server's
  ``max_queue_delay_s``).

Energy per output token: GPU power (summed over devices) integrated over the phase by the trapezoid rule between
its samples, divided by the output tokens of the phase's successful requests (the client's count); only where two
power samples or more fall in the phase.

One idea at several stages, a target's own telemetry, so one file name: :mod:`loadgen.engine.telemetry` (sampling
it), :mod:`loadgen.telemetry` (the engines' names), this module (the figures), :mod:`reports.telemetry` (showing
them).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen import metric_registry
from loadgen.records.results import (
    ChecklistItem,
    SloResult,
    Summary,
    TelemetryMove,
    TelemetryPhase,
    TelemetryStat,
    TelemetrySummary,
)
from loadgen.records.series_file import HEADER
from loadgen.scenario.slo import SLO
from loadgen.schedule.arrivals import PhasePlan
from loadgen.telemetry import adapters as ad
from loadgen.telemetry.promseries import Figures, interval_series, phase_figures, resets

GPU_BAND = (0.70, 0.80)  # the article: keep GPU utilization at 70-80%
GPU_MEMORY_MAX = 0.80  # ... and GPU memory at most 80% of VRAM
CACHE_HIT_MIN = 0.90  # a cache hit rate below 90% needs work
BATCH_TIMEOUT = (0.050, 0.100)  # a dynamic batcher's timeout, seconds
#: How far a quantity must move to count, by unit, when it started near zero (for the "moved most" choice).
FLOORS = {"requests": 1.0, "sequences": 1.0, "fraction": 0.05, "s": 0.005, "bytes": 1e8, "W": 10.0, "MHz": 100.0,
          "1/s": 1.0, "tokens": 0.1}
#: The engine's own latencies are the effect the client measured too, not a cause: left out of "what moved most".
EFFECTS = ("server.ttft", "server.itl", "server.e2e")
STALE_SCRAPES = 2  # a /metrics whose last scrape is this many intervals before the run's end stopped answering


def read_samples(path: Path) -> pd.DataFrame | None:
    """Raw scraped samples (server_metrics.csv, gpu_metrics.csv: time, metric, labels, value), or None when the
    file is absent, empty or unreadable."""
    try:
        f = pd.read_csv(path, dtype={"metric": str, "labels": str}, keep_default_na=False, na_values=[])
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if not {"time", "metric", "labels", "value"} <= set(f.columns) or f.empty:
        return None
    f["time"] = pd.to_numeric(f["time"], errors="coerce")
    f["value"] = pd.to_numeric(f["value"], errors="coerce")
    return f


def series_frame(server: pd.DataFrame | None, gpu: pd.DataFrame | None = None,
                 engine: str = "auto") -> pd.DataFrame | None:
    """telemetry.csv's frame (time, source, metric, value) made from raw samples, for a RunDir written before
    telemetry.csv existed; None when no quantity can be read."""
    if server is None and gpu is None:
        return None
    rows = Reading(server, gpu, engine if engine in ad.BY_NAME or engine == "auto" else "auto").rows()
    return pd.DataFrame(rows, columns=list(HEADER)) if rows else None


def _quantities() -> list[metric_registry.Metric]:
    return [m for m in metric_registry.telemetry_quantities() if m.name != "gpu.energy_per_token"]


class Reading:
    """Where each quantity is read: (its samples, the way) for every quantity some source gives."""

    def __init__(self, server: pd.DataFrame | None, gpu: pd.DataFrame | None, engine: str = "auto",
                 names: dict[str, str] | None = None):
        snames = set(server["metric"].unique()) if server is not None else set()
        gnames = set(gpu["metric"].unique()) if gpu is not None else set()
        self.engine = ad.BY_NAME[engine] if engine != "auto" else ad.detect(snames)
        self.chosen = "auto" if engine == "auto" else "scenario"
        eng = ad.with_overrides(self.engine, names or {})
        gpu_src = ad.detect(gnames, ad.GPU_SOURCES) if gnames else None
        in_server = ad.detect(snames, (ad.DCGM,)) if not gpu_src else None  # an exporter beside the engine's names
        self.gpu = (gpu_src or in_server).engine if (gpu_src or in_server) else None
        self.ways: dict[str, tuple[pd.DataFrame, ad.Way]] = {}
        for m in _quantities():
            options = []
            if m.name.startswith("gpu.") and gpu_src is not None:
                options.append((gpu, gnames, gpu_src))
            if m.name.startswith("gpu.") and in_server is not None:
                options.append((server, snames, in_server))
            if eng is not None:
                options.append((server, snames, eng))
            for df, have, adapter in options:
                way = ad.pick(adapter, m.name, have)
                if way is not None:
                    self.ways[m.name] = (df, way)
                    if m.name.startswith("gpu.") and self.gpu is None:
                        self.gpu = adapter.engine
                    break

    def stat(self, quantity: str, a: float, b: float) -> TelemetryStat | None:
        if quantity not in self.ways:
            return None
        df, way = self.ways[quantity]
        f = phase_figures(df, way, a, b)
        if f is None or (f.mean is None and f.max is None):
            return None
        return _stat(f, way, metric_registry.metric(quantity).unit)

    def rows(self) -> list[tuple[float, str, str, float]]:
        """telemetry.csv's rows: each quantity at each scrape (or over each interval), named by its source."""
        out = []
        for q, (df, way) in self.ways.items():
            s = interval_series(df, way).dropna()
            out += [(float(t), way.source, q, float(v)) for t, v in s.items() if math.isfinite(v)]
        return sorted(out)


def _stat(f: Figures, way: ad.Way, unit: str) -> TelemetryStat:
    keep = {k: v for k, v in vars(f).items() if v is not None and k != "total"}
    return TelemetryStat(source=way.source, kind=way.kind, unit=unit, **keep)


def _window(plans: list[PhasePlan], duration: float) -> tuple[float, float] | None:
    rec = [p for p in plans if p.recorded]
    if not rec:
        return None
    return min(p.start for p in rec), min(max(p.end for p in rec), max(duration, 0.0))


def energy(power: pd.Series | None, a: float, b: float) -> float | None:
    """Joules over ``[a, b]`` from power samples (watts, indexed by time): the trapezoid between the samples in the
    window, with the power at its ends interpolated; None with fewer than two samples in it."""
    if power is None or power.empty:
        return None
    t, w = power.index.to_numpy(dtype=float), power.to_numpy(dtype=float)
    inside = (t >= a) & (t <= b)
    if inside.sum() < 2:
        return None
    tt = np.concatenate([[a], t[inside], [b]])
    ww = np.concatenate([[np.interp(a, t, w)], w[inside], [np.interp(b, t, w)]])
    return float(np.sum((ww[1:] + ww[:-1]) / 2 * np.diff(tt)))


def _phase(reading: Reading, power, a: float, b: float, recorded: bool, scope) -> TelemetryPhase:
    qs = {m.name: st for m in _quantities() if (st := reading.stat(m.name, a, b)) is not None}
    ph = TelemetryPhase(start=a, end=b, recorded=recorded, quantities=qs)
    e = energy(power, a, b)
    if e is not None:
        ph.energy_j = e
        rate, dur = (scope.output_tokens_per_s, scope.duration_s) if scope is not None else (None, None)
        if isinstance(rate, (int, float)) and isinstance(dur, (int, float)) and rate * dur > 0:
            ph.output_tokens = rate * dur
            ph.energy_per_token_j = e / (rate * dur)
    return ph


def telemetry_summary(server: pd.DataFrame | None, gpu: pd.DataFrame | None, plans: list[PhasePlan],
                      duration: float, summary: Summary, engine: str = "auto", names: dict[str, str] | None = None,
                      server_config: dict | None = None, notes: list[str] | None = None,
                      interval: float = 1.0) -> tuple[TelemetrySummary, list[tuple[float, str, str, float]]]:
    """summary.json's ``telemetry`` and telemetry.csv's rows, from the raw samples of the target's /metrics
    (``server``) and of its GPU (``gpu``: NVML or a DCGM exporter), each a frame of time, metric, labels, value;
    ``engine`` / ``names``: the scenario's ``target.telemetry``; ``server_config``: a managed server's settings;
    ``notes``: what the samplers said (a /metrics that was not Prometheus text, or stopped answering)."""
    notes = list(notes or [])
    reading = Reading(server, gpu, engine, names)
    if not reading.ways:
        if server is not None and reading.engine is None:
            notes.append("the target's /metrics names no engine latbench knows (vllm, sglang, tgi, triton, "
                         "refserver): set target.telemetry.engine or .names")
        out = TelemetrySummary(measured=False, notes=notes or ["no server telemetry was recorded: no samples of the "
                                                               "target's /metrics (none set, or none scraped) and "
                                                               "no GPU sampled"])
        out.checklist = checklist(out, summary, server_config)
        return out, []
    power = None
    if "gpu.power" in reading.ways:
        df, way = reading.ways["gpu.power"]
        power = interval_series(df, way)
    scopes = summary.phases or {}
    phases = {}
    for p in plans:
        a, b = p.start, min(p.end, max(duration, p.start))
        if b > a:
            phases[p.name] = _phase(reading, power, a, b, p.recorded, scopes.get(p.name))
    win = _window(plans, duration)
    overall = _phase(reading, power, *win, True, summary.overall) if win and win[1] > win[0] else None
    notes += _reset_notes(reading) + _stale_notes(server, duration, interval)
    out = TelemetrySummary(measured=True, engine=reading.engine.engine if reading.engine else None,
                           engine_label=reading.engine.label if reading.engine else None,
                           engine_chosen=reading.chosen, gpu=reading.gpu,
                           scrapes=int(server["time"].nunique()) if server is not None else 0,
                           gpu_samples=int(gpu["time"].nunique()) if gpu is not None else 0,
                           phases=phases, overall=overall, notes=notes)
    out.moves = moves(out, summary)
    out.checklist = checklist(out, summary, server_config)
    if server_config and "max_queue_delay_s" in server_config:
        out.batch_timeout_s = server_config["max_queue_delay_s"]
    return out, reading.rows()


def _reset_notes(reading: Reading) -> list[str]:
    out = []
    for df, way in {id(w): (df, w) for df, w in reading.ways.values()}.values():
        counted = way.names if way.kind in ("counter", "share", "ratio") else \
            (way.names[0] + "_count",) if way.kind == "histogram" else ()
        for name, t in resets(df, counted):
            out.append(f"counter {name} went down at {t:.1f} s (the engine restarted?): its increase is counted "
                       "from zero after it")
    return sorted(set(out))


def _stale_notes(server: pd.DataFrame | None, duration: float, interval: float) -> list[str]:
    if server is None or server.empty:
        return []
    last = float(server["time"].max())
    if duration - last > STALE_SCRAPES * interval:
        # scraping starts before the engine fixes its t0: a /metrics that answered only then has a scrape before 0
        when = f"{last:.1f} s into the" if last >= 0 else f"{-last:.1f} s before the start of the"
        return [f"the target's /metrics stopped answering: its last scrape was {when} {duration:.1f} s run; later "
                "phases have no server figures"]
    return []


def _figure(st: TelemetryStat) -> tuple[str, float | None]:
    return ("max", st.max) if st.max is not None else ("mean", st.mean)


def moves(t: TelemetrySummary, summary: Summary) -> list[TelemetryMove]:
    """For each spike (summary ``burst``) and step above the expected rate (``headroom``): the quantity whose figure
    (a gauge's max, else its mean) changed most from the baseline phase, relative to the baseline (or to a floor
    by unit when the baseline is near zero); the engine's own latencies (``EFFECTS``) are not candidates."""
    pairs = [(b.spike, b.baseline) for b in summary.burst or [] if b.spike and b.baseline]
    h = summary.headroom
    if h is not None and h.high is not None and h.base is not None and h.high.phase and h.base.phase:
        pairs.append((h.high.phase, h.base.phase))
    out = []
    for phase, base in pairs:
        after, before = (t.phases or {}).get(phase), (t.phases or {}).get(base)
        if after is None or before is None:
            continue
        best, score = None, 0.0
        for q, st in (after.quantities or {}).items():
            b = (before.quantities or {}).get(q)
            if b is None or q in EFFECTS:
                continue
            stat, va = _figure(st)
            vb = getattr(b, stat)
            if va is None or vb is None:
                continue
            s = abs(va - vb) / max(abs(vb), FLOORS.get(st.unit or "", 1e-9))
            if s > score:
                best, score = TelemetryMove(phase=phase, baseline=base, quantity=q, source=st.source, stat=stat,
                                            unit=st.unit, before=vb, after=va), s
        if best is not None:
            out.append(best)
    return out


def _steady(summary: Summary, t: TelemetrySummary) -> list[str]:
    moving = {b.spike for b in summary.burst or []}
    if summary.headroom is not None and summary.headroom.high is not None:
        moving.add(summary.headroom.high.phase)
    return [n for n, ph in (t.phases or {}).items() if ph.recorded and n not in moving]


def checklist(t: TelemetrySummary, summary: Summary, server_config: dict | None) -> list[ChecklistItem]:
    """The article's checklist (see the module docstring), each item met / not_met / not_measurable."""
    out = []
    steady = _steady(summary, t)
    util = [(ph.quantities or {}).get("gpu.utilization") for n, ph in (t.phases or {}).items() if n in steady]
    util = [u for u in util if u is not None and u.mean is not None]
    if util:
        w = [max(u.samples or 1, 1) for u in util]
        v = float(np.average([u.mean for u in util], weights=w))
        ok = GPU_BAND[0] <= v <= GPU_BAND[1]
        out.append(ChecklistItem(name="gpu_utilization", status="met" if ok else "not_met", figure=v,
                                 unit="fraction", target="70-80% during steady phases", source=util[0].source,
                                 phase=", ".join(steady),
                                 text=f"GPU utilization {v:.0%} during the steady phases: "
                                      + ("inside" if ok else "outside") + " the 70-80% band"))
    else:
        out.append(_unknown("gpu_utilization", "70-80% during steady phases", "no GPU utilization was sampled"))
    mem = [(n, (ph.quantities or {}).get("gpu.memory_share")) for n, ph in (t.phases or {}).items() if ph.recorded]
    mem = [(n, m) for n, m in mem if m is not None and m.max is not None]
    if mem:
        n, m = max(mem, key=lambda x: x[1].max)
        ok = m.max <= GPU_MEMORY_MAX
        out.append(ChecklistItem(name="gpu_memory", status="met" if ok else "not_met", figure=m.max,
                                 unit="fraction", target="at most 80% of VRAM", source=m.source, phase=n,
                                 text=f"GPU memory peaked at {m.max:.0%} of VRAM (in {n}): "
                                      + ("within" if ok else "above") + " 80%"))
    else:
        out.append(_unknown("gpu_memory", "at most 80% of VRAM", "GPU memory and VRAM were not both sampled"))
    for q, name, what in (("server.result_cache_hit_rate", "result_cache_hit_rate", "result cache"),
                          ("server.prefix_cache_hit_rate", "prefix_cache_hit_rate", "prefix cache")):
        st = ((t.overall.quantities or {}) if t.overall else {}).get(q)
        if st is None or st.mean is None:
            out.append(_unknown(name, "at least 90%", f"the server reports no {what} hit rate"))
            continue
        ok = st.mean >= CACHE_HIT_MIN
        out.append(ChecklistItem(name=name, status="met" if ok else "not_met", figure=st.mean, unit="fraction",
                                 target="at least 90%", source=st.source, phase="overall",
                                 text=f"{what} hit rate {st.mean:.0%} over the recorded phases: "
                                      + ("at least" if ok else "below") + " 90%"))
    out.append(_batch_timeout(server_config))
    return out


def _unknown(name: str, target: str, why: str) -> ChecklistItem:
    return ChecklistItem(name=name, status="not_measurable", target=target, text=why)


def _batch_timeout(cfg: dict | None) -> ChecklistItem:
    target = "50-100 ms"
    if not cfg or "max_queue_delay_s" not in cfg:
        return _unknown("batch_timeout", target, "the server's batch timeout is not known to latbench")
    v, most = float(cfg["max_queue_delay_s"]), cfg.get("max_batch_size")
    src = "the reference server's max_queue_delay_s"
    if isinstance(most, int) and most <= 1:
        return ChecklistItem(name="batch_timeout", status="not_met", figure=v, unit="s", target=target, source=src,
                             text="no dynamic batching (max_batch_size 1): every request runs alone")
    ok = BATCH_TIMEOUT[0] <= v <= BATCH_TIMEOUT[1]
    return ChecklistItem(name="batch_timeout", status="met" if ok else "not_met", figure=v, unit="s", target=target,
                         source=src, text=f"batch timeout {v * 1e3:g} ms: " + ("inside" if ok else "outside")
                         + " 50-100 ms")


def telemetry_slos(summary: Summary, slos: list[SLO]) -> None:
    """Judge the server-side objectives of ``summary.slo`` on its ``telemetry`` block (in place), and ``passed``
    again: a quantity the telemetry did not give is not measurable here, which fails the objective."""
    t = summary.telemetry or TelemetrySummary(measured=False)
    by_expr = {s.expr: s for s in slos if s.server_side}
    for i, r in enumerate(summary.slo or []):
        s = by_expr.get(r.expr or "")
        if s is None or not r.applies:
            continue
        name = (s.scope_parts()[1] or "") if s.scope else ""
        ph = (t.phases or {}).get(name) if name in (t.phases or {}) else t.overall
        value, why = None, None
        if ph is None:
            why = "no server telemetry" + (f" ({t.notes[0]})" if t.notes else "")
        elif s.metric == "gpu.energy_per_token":
            value = ph.energy_per_token_j
            why = None if value is not None else "no GPU power was sampled"
        else:
            st = (ph.quantities or {}).get(s.metric)
            value = getattr(st, s.stat or "mean", None) if st is not None else None
            if value is None:
                why = (f"the target's telemetry gave no {s.metric}" if st is None
                       else f"{st.source} gives no {s.stat}")
        summary.slo[i] = SloResult(expr=s.expr, metric=s.metric, stat=s.stat, op=s.op, threshold=s.threshold,
                                   scope=s.scope, applies=True, value=value, ci=None, passed=s.check(value),
                                   **({"reason": why} if why else {}),
                                   **({"upper": s.upper} if s.upper is not None else {}))
    summary.passed = all(r.passed for r in summary.slo or [] if r.applies)
