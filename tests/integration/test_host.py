"""The host sampler against real processes: a busy child pinned to one CPU, alone or beside a hog pinned to the same
CPU (it must then wait for it about half the time), a tree of forked children, and a real run of the reference
server whose summary holds the host's phases."""

import os
import subprocess
import sys
import time

import pytest

from loadgen.analysis.host import read_host, tree_phase
from loadgen.engine.host import HostSampler, Watched, tree
from tests.helpers import run

pytestmark = [pytest.mark.alone, pytest.mark.contends,
              pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux /proc")]

CPU = max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
BUSY = "import os, sys, time; os.sched_setaffinity(0, {%d}); e = time.time() + %f\nwhile time.time() < e: pass"


def busy(seconds: float, cpu: int = CPU) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUSY % (cpu, seconds)])


def sampled(w: Watched, seconds: float, tmp_path) -> dict:
    """The tree's CPU and wait over ``seconds`` of sampling (every 0.1 s), from the host.csv written."""
    s = HostSampler([w], interval=0.1).start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    s.stop()
    frame = read_host(s.write(tmp_path / "host.csv", t0))
    return tree_phase(frame, w.source, 0.0, seconds).to_json()  # as summary.json's host block holds it


def test_a_child_pinned_beside_hogs_waits_for_its_cpu(tmp_path):
    child = busy(4.0)
    time.sleep(0.3)  # its interpreter started, pinned, spinning
    quiet = sampled(Watched("child", child.pid), 0.8, tmp_path)
    hogs = [busy(3.0) for _ in range(3)]
    time.sleep(0.4)
    hogged = sampled(Watched("child", child.pid), 0.8, tmp_path)
    for p in [child, *hogs]:
        p.kill(), p.wait()
    for got in (quiet, hogged):  # a spinning thread is always runnable: it runs or it waits, all the time
        assert 0.8 < (got["cpu_s"] + got["wait_s"]) / 0.8 < 1.15, got
    # its CPU shared fairly with three spinning hogs: it waits while they run, three quarters of the time (tasks
    # of other programs, free to move, go to the other CPUs); alone it ran more and waited a smaller share
    assert hogged["wait_share"] > 0.6, hogged
    assert quiet["busy"] > hogged["busy"] and quiet["wait_share"] < hogged["wait_share"], (quiet, hogged)
    assert hogged["cpus"] == 1 and hogged["threads"] == 1


def test_a_tree_holds_forked_children_and_not_an_excluded_subtree(tmp_path):
    code = ("import subprocess, sys; kids = [subprocess.Popen([sys.executable, '-c', %r]) for _ in range(2)]; "
            "[k.wait() for k in kids]") % (BUSY % (CPU, 2.0))
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 5
        while len(tree(Watched("p", parent.pid))) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = tree(Watched("p", parent.pid))
        assert len(pids) == 3 and pids[0] == parent.pid
        kid = pids[1]
        assert tree(Watched("p", parent.pid, exclude=(kid,))) == [p for p in pids if p != kid]
        got = sampled(Watched("p", parent.pid), 0.6, tmp_path)
        assert got["threads"] == 3, got  # the grandchildren's threads are the tree's; two spin, always runnable:
        assert 1.6 < (got["cpu_s"] + got["wait_s"]) / 0.6 < 2.3, got
    finally:
        parent.kill(), parent.wait()
        for p in pids[1:]:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass


def test_a_run_of_the_reference_server_samples_both_trees_per_phase(tmp_path):
    result, summary, _ = run(tmp_path, """
        name: host
        target: {reference: {arch: optimized, model: tiny}, api: openai-chat, stream: true}
        workload: {prompts: {input_tokens: 8, output_tokens: 4}}
        load:
          phases:
            - {name: warm, duration: 0.5s, qps: 5, record: false}
            - {name: main, duration: 1s, qps: 10}
    """)
    host = summary["host"]
    assert host["measured"] and host["judged"] == "server"
    assert host["labels"]["server"] == "the reference server"
    assert set(host["phases"]) == {"warm", "main"}
    main = host["phases"]["main"]
    assert set(main["processes"]) == {"latbench", "server"}
    assert main["processes"]["server"]["cpu_s"] > 0 and main["processes"]["latbench"]["cpu_s"] > 0
    assert 0 <= main["processes"]["server"]["wait_share"] < 1 and main["processes"]["server"]["cpus"] >= 1
    assert main["load1_max"] is not None and main["steal_share"] is not None
    frame = read_host(result.rundir.path / result.targets[0].dir / "host.csv")
    t = frame["time"]
    assert t.min() < 0.1 and t.max() >= summary["duration_s"] - 0.6  # the records' clock, the whole run
    assert set(frame["source"]) == {"latbench", "server", "host"}
