"""One shape of a target's ``server`` in meta.json: a run, a capacity search and a watch of the same managed
reference server each describe it the same way (its config with ``listen_s`` and ``ready_s``; capacity.json's
target too), because one function builds it (:func:`loadgen.run.measurement.server_info`) and one object writes
meta.json (:class:`loadgen.records.rundir.RunMeta`). Real runs against the reference server on 127.0.0.1."""

from __future__ import annotations

import json

from loadgen.records.results import Meta
from loadgen.run.capacity import run_capacity
from loadgen.run.runner import run_scenario
from loadgen.run.targets import free_port
from loadgen.run.watch import WatchSettings, watch_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.slo import parse_slo
from tests.helpers import write_scenario

SCENARIO = """
name: one-shape
target: {reference: {arch: optimized, model: tiny, backend: numpy}, stream: true}
workload: {max_tokens: 2}
load:
  phases:
    - {name: steady, duration: 1s, qps: 4}
"""


def _server_entries(rundir) -> list[dict]:
    meta = json.loads((rundir / "meta.json").read_text())
    Meta.model_validate(meta)
    return [t["server"] for t in meta["targets"]]


def test_a_run_a_capacity_search_and_a_watch_describe_the_server_alike(tmp_path):
    loaded = load_scenario(write_scenario(tmp_path, SCENARIO))
    ran = run_scenario(loaded, out=str(tmp_path / "run"))
    cap_rd, cap = run_capacity(loaded, [parse_slo("latency.p99 < 5s")], 4, 4, 1.0, 0.0, out=str(tmp_path / "cap"))
    watched = watch_scenario(loaded, WatchSettings(qps=4, duration=1.0, port=free_port()), out=str(tmp_path / "w"))
    entries = {"run": _server_entries(ran.rundir.path), "capacity": _server_entries(cap_rd.path),
               "capacity.json": [cap.target.server.to_json()], "watch": _server_entries(watched.rundir.path)}
    assert all(len(e) >= 1 for e in entries.values()), entries
    shapes = {where: {tuple(sorted(s)) for s in e} for where, e in entries.items()}
    assert len(set().union(*shapes.values())) == 1, shapes  # one set of keys everywhere
    # capacity.json built as its model keeps the keys, in the order, of the dict it replaced (8d148cc)
    assert [k for k in json.loads((cap_rd.path / "capacity.json").read_text())] == [
        "schema_version", "limited_by_generator", "scenario", "slo", "search", "max_sustainable_qps",
        "first_failing_qps", "bracket", "knee_qps", "expected_qps", "headroom", "complete", "host_contended",
        "generator_limited",
        "unreachable", "steps", "target"]
    assert list(cap.search.to_json()) == ["qps_min", "qps_max", "step_duration_s", "warmup_s", "tolerance", "seconds"]
    for where, e in entries.items():
        for s in e:
            assert s["arch"] == "optimized" and s["backend"] == "numpy", (where, s)
            assert 0 < s["listen_s"] <= s["ready_s"], (where, s)  # the union: watch had no listen_s, capacity neither
