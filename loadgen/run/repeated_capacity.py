"""``latbench capacity --repeat N``: N capacity searches, each from a fresh start of the target, in one RunDir.

One search's bracket says where one session's steps passed and failed; the next session, on the same
machine, can land elsewhere (a slower start, a busier neighbour). Here the search runs N times, each
against a freshly started managed server (a plain URL is searched N times as it is), optionally with a
pause between searches, into ``search1`` .. ``searchN`` of one RunDir; the RunDir's capacity.json holds
every bracket and their spread (:func:`loadgen.analysis.repeated.bracket_spread`).

Repeated runs, one module per stage: :mod:`loadgen.run.repeated` (which runs, in which order),
:mod:`loadgen.run.repeated_capacity` (repeated capacity searches), :mod:`loadgen.analysis.repeated` (between-run
statistics), :mod:`loadgen.analysis.repeated_baseline` (the baseline check between run sets), :mod:`reports.repeated`
(the report's section), :mod:`loadgen.cli.repeated` (the terminal table).
"""

from __future__ import annotations

import time

from loadgen.analysis.repeated import bracket_spread
from loadgen.engine.base import OnEngine
from loadgen.records.results import Capacity, RepeatedSearch
from loadgen.records.rundir import CAPACITY, RunDir, RunMeta, write_json
from loadgen.run.capacity import run_capacity
from loadgen.scenario.loader import LoadedScenario
from loadgen.scenario.slo import SLO


def run_capacity_repeated(loaded: LoadedScenario, slos: list[SLO], qps_min: float, qps_max: float,
                          step_duration: float, warmup: float, tolerance: float = 0.1, out: str | None = None,
                          target_url: str | None = None, on_engine: OnEngine | None = None, on_step=None,
                          repeat: int = 3, pause: float = 0.0, on_search=None,
                          preflight: bool = True) -> tuple[RunDir, Capacity]:
    """Search ``repeat`` times (rates in req/s, durations in seconds); returns the RunDir and its capacity.json, as
    its model: ``repeats`` (the number of searches), ``searches`` (each one's folder and result) and ``spread``.
    ``on_search(k, folder, result)`` after each search (``result``: that search's capacity.json model)."""
    sc = loaded.scenario
    redactor = loaded.redactor
    redactor.add_url(target_url)  # its password and keys are secret too, wherever they resurface
    rd = RunDir.create(out, f"capacity_{sc.name}")
    rd.write_scenario(loaded.redacted(), redactor)
    rd.write_metric_definitions()
    meta = RunMeta.start(rd, sc.name, "native", redactor, kind="capacity", repeat={"runs": repeat, "pause": pause})
    searches = []
    complete = True
    for k in range(1, repeat + 1):
        if k > 1 and pause > 0:
            time.sleep(pause)
        sub, result = run_capacity(loaded, slos, qps_min, qps_max, step_duration, warmup, tolerance,
                                   out=str(rd.path / f"search{k}"), target_url=target_url, on_engine=on_engine,
                                   on_step=on_step, exact_out=True, preflight=preflight)
        searches.append((k, sub.path.name, result))
        meta.add_target(f"search{k}", sub.path.name, search=k, bracket=result.bracket)
        if on_search:
            on_search(k, sub.path, result)
        if not result.complete:
            complete = False
            break
    results = [r for _, _, r in searches]
    spread = bracket_spread(results)
    top = Capacity(
        scenario=sc.name, repeats=repeat, slo=results[0].slo if results else [],
        expected_qps=sc.load.expected_qps, complete=complete and len(searches) == repeat,
        searches=[_search_row(k, folder, r) for k, folder, r in searches], spread=spread,
        max_sustainable_qps=spread.held.median, first_failing_qps=spread.failing.median,
        headroom=spread.headroom, target=results[0].target if results else None,
        unreachable=bool(results) and all(r.unreachable for r in results),
        host_contended=next((f"search {k}: {r.host_contended}" for k, _, r in searches if r.host_contended), None),
        generator_limited=next((f"search {k}: {r.generator_limited}" for k, _, r in searches if r.generator_limited),
                               None))
    write_json(rd.path / CAPACITY, top, redactor)
    meta.update(complete=top.complete, capacity=[top.max_sustainable_qps, top.first_failing_qps])
    return rd, top


def _search_row(k: int, folder: str, result: Capacity) -> RepeatedSearch:
    """One search of a repeated one, as capacity.json's ``searches`` lists it (``result``: its capacity.json)."""
    return RepeatedSearch(search=k, dir=folder, bracket=result.bracket, max_sustainable_qps=result.max_sustainable_qps,
                          first_failing_qps=result.first_failing_qps, knee_qps=result.knee_qps,
                          steps=len(result.steps), seconds=result.search.seconds, complete=result.complete)
