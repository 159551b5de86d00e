"""What a person sees in the terminal: one live status line during a run, a table at the end."""

from __future__ import annotations

import math
import threading

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadgen.analysis.closedloop import held_share
from loadgen.metric_registry import outcome_counts
from loadgen.records.results import ClosedLoop, Scope, ScopeTokens, Summary, TokenInfo
from loadgen.units import fmt_ms


def status_line(engine) -> str:
    """Elapsed, the phase, the achieved rate against what the phase asks (an arrival rate in an open loop, its
    workers in a closed one), requests in flight, errors, and the recent p50/p99. After the last phase, while
    requests still in flight get the grace to finish: ``draining`` instead of a phase (nothing more is asked)."""
    live = engine.live
    now = engine.now() if engine.t0 else 0.0
    w = live.window(now)
    if live.draining:
        where = f"{now:6.1f}s  draining (after the last phase) "
        asked = "nothing asked"
    else:
        where = f"{now:6.1f}/{live.total_duration:.0f}s  phase {live.phase or '-':<10} "
        asked = f"concurrency {live.concurrency}" if live.concurrency else f"target {live.target_rate:.0f}"
    return (f"{where}qps {w['qps']:7.1f} ({asked})  in-flight {live.in_flight:5d}  "
            f"errors {live.errors:5d}  p50 {fmt_ms(w['p50'])}  p99 {fmt_ms(w['p99'])}")


class StatusDisplay:
    """Attach to each engine (``attach``), refreshes a line 4x/s; on a non-terminal, a line every 5 s."""

    def __init__(self, console: Console, label: str = ""):
        self.console = console
        self.engine = None
        self.label = label
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, engine) -> None:
        self.close()
        self.engine = engine
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        if self.console.is_terminal:
            with Live(Text(""), console=self.console, refresh_per_second=4, transient=True) as lv:
                while not self._stop.wait(0.25):
                    lv.update(Text(self.label + status_line(self.engine)))
        else:
            while not self._stop.wait(5.0):
                self.console.print(self.label + status_line(self.engine), highlight=False)

    def close(self) -> None:
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def say(self, msg: str) -> None:
        self.console.print(msg, style="yellow", highlight=False)


def tokens_line(summary: Summary) -> str:
    """One line on how tokens were counted and at what rate they went: an approximation is said to be one."""
    info, o = summary.tokens or TokenInfo(), summary.overall or Scope()
    rate = f"input {o.input_tokens_per_s or 0:.0f} tokens/s, output {o.output_tokens_per_s or 0:.0f} tokens/s"
    if not info.tokenizer:
        return f"tokens: {rate}; prompt lengths approximated (4 characters a token; set workload.tokenizer for exact)"
    tk = o.tokens or ScopeTokens()
    who = "the target's /tokenize" if info.tokenizer == "server" else info.tokenizer
    parts = [f"tokens: {rate}; counted with {who}"]
    if info.special_tokens:
        parts.append(f"special tokens added to a plain prompt: {' '.join(info.special_tokens)}")
    if tk.added_tokens:
        a = tk.added_tokens
        parts.append(f"added by the server (template or special tokens): {a.min}-{a.max}")
    if tk.usage_vs_counted:
        u = tk.usage_vs_counted
        parts.append(f"server usage = latbench's count for {u.equal}/{u.n} requests")
    return "; ".join(parts)


def summary_table(name: str, summary: Summary) -> Table:
    """Per-phase table: requests, errors (and client aborts), achieved vs target QPS, latency and TTFT
    percentiles, goodput when the scenario defines it, and a closed loop's concurrency held against the asked
    with the client's done->sent gap (p50/p99)."""
    t = Table(title=f"{name}", title_justify="left")
    rows = [(label, s) for label, _, s in summary.scopes()[1:]] + [("overall", summary.overall or Scope())]
    goodput = any(s.goodput is not None for _, s in rows)
    closed = any(s.closed_loop for _, s in rows)
    held_cols = ("concurrency held", "gap p50/p99") if closed else ()
    for col in ("phase", "requests", "errors", "qps (target)", "lat p50", "lat p99", "lat max", "ttft p50", "ttft p99",
                "itl p50") + (("goodput",) if goodput else ()) + held_cols:
        t.add_column(col, justify="right" if col != "phase" else "left")
    for label, s in rows:
        m = s.metrics
        lat, ttft, itl = m["latency"], m["ttft"], m["itl"]
        err = f"{s.error_rate * 100:.2f}%" if s.error_rate is not None else "-"
        if s.aborted:
            err += f" (+{s.aborted_rate * 100:.1f}% aborted)"
        extra = ([f"{s.goodput * 100:.1f}%" if s.goodput is not None else "-"] if goodput else [])
        extra += _held_cells(s.closed_loop) if closed else []
        name_cell = label + ("" if s.is_recorded else " (not recorded)")
        asked = _asked(label, s, summary)
        t.add_row(name_cell, str(s.count), err,
                  f"{s.achieved_qps:.1f} ({asked})" if asked else f"{s.achieved_qps:.1f}",
                  fmt_ms(lat.stat("p50")), fmt_ms(lat.stat("p99")), fmt_ms(lat.stat("max")),
                  fmt_ms(ttft.stat("p50")), fmt_ms(ttft.stat("p99")), fmt_ms(itl.stat("p50"), 2),
                  *extra)
    return t


def _asked(label: str, s: Scope, summary: Summary) -> str:
    """What a scope asked, beside the rate it achieved: 'c 4' (a closed loop's concurrency), '10' (an open loop's
    target rate), or '' (the overall scope of phases that asked different things, or nothing known)."""
    cl = s.closed_loop
    if cl and cl.asked is not None:
        return f"c {cl.asked}"
    if label == "overall":
        recorded = [ph for ph in (summary.phases or {}).values() if ph is not None and ph.is_recorded]
        if any(ph.closed_loop for ph in recorded):  # its target_qps would count a closed loop's as 0
            asks = {f"c {ph.closed_loop.asked}" for ph in recorded if ph.closed_loop}
            return asks.pop() if len(asks) == 1 and len(recorded) == 1 else ""
    tq = s.target_qps
    return f"{tq:.0f}" if tq is not None and not math.isnan(tq) else ""


def outcomes_line(summary: Summary) -> str:
    """How the run's requests ended, in the outcome vocabulary of loadgen.metric_registry.OUTCOMES, with counts."""
    o = summary.overall or Scope()
    return "requests: " + outcome_counts(o.count or 0, o.ok or 0, o.errors, o.aborted)


def _held_cells(cl: ClosedLoop | None) -> list[str]:
    """'3.9 of 4 (98%)' (sessions: '... sessions') and 'p50/p99 ms' of the done->sent gap; dashes if unknown."""
    if not cl or cl.held is None:
        return ["-", "-"]
    what = " sessions" if cl.measure == "sessions" else ""
    held = f"{cl.held:.1f} of {cl.asked}{what} ({held_share(cl.fraction)})"
    gap = cl.gap
    return [held, f"{fmt_ms(gap.p50, 2)}/{fmt_ms(gap.p99, 2)}" if gap else "-"]
