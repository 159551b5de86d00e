"""A verdict blames the service only when the service is to blame: a managed server that dies, a URL that is wrong,
a run in which every request failed (issue 26, items 1-4). Real servers on 127.0.0.1: the reference server, the
misbehaving BadServer, a port nothing listens on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadgen.fetch import FetchError, fetch
from loadgen.records.schema import read_records
from loadgen.run.targets import free_port
from tests.bad_servers import BadServer
from tests.helpers import ROOT, run, start_reference, write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def _latbench(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*LATBENCH, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.alone
def test_a_managed_server_killed_mid_run_makes_the_run_invalid_at_once_and_keeps_everything(tmp_path):
    """SIGKILL of the bundled server 2 s into a 12 s run: the load stops at once (the last record within a second
    of the exit, on the records' clock: the wall time to exit 3 is mostly the report, and this host may be busy),
    the reason names the server, the signal and the phase; the records before it are kept; its log is in the
    RunDir and linked from summary.md."""
    path = write_scenario(tmp_path, """
    name: killed
    target: {reference: {arch: optimized, model: tiny, backend: numpy}, stream: true}
    workload: {max_tokens: 4}
    load:
      arrival: constant
      phases: [{name: baseline, duration: 1s, qps: 10}, {name: burst, duration: 11s, qps: 10}]
    slo: ["error_rate < 1%"]
    """)
    proc = subprocess.Popen([*LATBENCH, "run", str(path), "--out", str(tmp_path / "runs"), "--quiet"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        server = None
        deadline = time.monotonic() + 60
        while server is None and time.monotonic() < deadline:
            server = next((p for p in _children(proc.pid) if "reference_server" in _cmdline(p)), None)
            time.sleep(0.05)
        assert server is not None, "the managed server never started"
        while not list((tmp_path / "runs").glob("*/target/requests.parquet*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)  # into phase burst
        os.kill(server, signal.SIGKILL)
        killed = time.monotonic()
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out
    assert took < 30, took  # not 12 s of load, then the rest: the run ended with its server
    rd = next((tmp_path / "runs").iterdir())
    meta = json.loads((rd / "meta.json").read_text())
    (reason,) = [r for r in meta["verdict"]["reasons"] if r["kind"] == "server_exited"]
    assert "reference server exited (signal 9, SIGKILL)" in reason["text"] and "into phase burst" in reason["text"]
    assert "reference server exited (signal 9, SIGKILL)" in out
    assert meta["complete"] is False  # stopped with its server
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert summary["server_exit"]["phase"] == "burst" and summary["overall"]["ok"] >= 15
    table = read_records(rd / "target" / "requests.parquet")
    seqs = sorted(table.column("seq").to_pylist())
    assert seqs == list(range(len(seqs))) and len(seqs) < 120  # every request sent recorded once; no more sent
    assert set(table.column("error").to_pylist()) <= {"", "connect", "reset", "bad_stream", "cancelled"}
    ov = summary["overall"]
    assert ov["ok"] + sum(ov["errors"].values()) + ov["aborted"] == ov["count"] == len(seqs)
    assert summary["duration_s"] - summary["server_exit"]["t"] < 1.0, summary["duration_s"]
    log = (rd / "target" / "server.log").read_text()
    assert "listening on http://127.0.0.1" in log
    assert (rd / "report.html").is_file() and "server.log" in (rd / "summary.md").read_text()


def test_a_server_that_does_not_start_keeps_its_log(tmp_path):
    path = write_scenario(tmp_path, """
    name: nostart
    target: {command: {run: [python3, -c, "import sys; print('cannot bind: port taken'); sys.exit(4)"],
             url: "http://127.0.0.1:{port}/v1", ready_url: "http://127.0.0.1:{port}/health"}}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    res = _latbench("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report")
    assert res.returncode == 3, res.stdout + res.stderr
    rd = next((tmp_path / "runs").iterdir())
    assert "cannot bind: port taken" in (rd / "target" / "server.log").read_text()


@pytest.fixture(scope="module")
def reference():
    port = free_port()
    proc = start_reference(port)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


STEADY = """
name: steady
target: {url: "http://127.0.0.1:1/v1", stream: true}
workload: {max_tokens: 4}
load: {arrival: constant, phases: [{name: main, duration: 1s, qps: 5}]}
"""


def test_a_target_url_without_v1_runs_against_v1_and_says_so(tmp_path, reference):
    path = write_scenario(tmp_path, STEADY)
    res = _latbench("run", str(path), "--target", reference, "--out", str(tmp_path / "runs"), "--quiet",
                    "--no-report")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{reference} has no /v1 and answers 404; {reference}/v1 answers: using it" in res.stderr
    rd = next((tmp_path / "runs").iterdir())
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert summary["overall"]["ok"] == summary["overall"]["count"] == 5
    meta = json.loads((rd / "meta.json").read_text())
    assert meta["targets"][0]["url"] == reference + "/v1"


def test_a_scenario_url_without_v1_is_refused_with_the_fix(tmp_path, reference):
    path = write_scenario(tmp_path, STEADY.replace("http://127.0.0.1:1/v1", reference))
    res = _latbench("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report")
    assert res.returncode == 3, res.stdout + res.stderr
    assert f"{reference}/v1 answers: add /v1 to the target's url" in res.stdout
    assert not list((tmp_path / "runs").glob("*/target/requests.parquet*"))  # nothing was sent


def test_a_server_that_answers_404_to_everything_exits_3_before_any_load(tmp_path):
    with BadServer(default_mode="nothing-here") as srv:
        path = write_scenario(tmp_path, STEADY.replace("http://127.0.0.1:1/v1", f"http://127.0.0.1:{srv.port}/v1"))
        t0 = time.monotonic()
        res = _latbench("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report")
        took = time.monotonic() - t0
        hits = sum(srv.hits.values())
    assert res.returncode == 3, res.stdout + res.stderr
    assert "pre-flight" in res.stdout and "answered HTTP 404" in res.stdout, res.stdout
    assert hits <= 4  # the model list and one minimal request (each with its /v1 probe): no load
    assert not list((tmp_path / "runs").glob("*/target/requests.parquet*")) and took < 30


def test_an_unreachable_port_exits_3_within_seconds(tmp_path):
    path = write_scenario(tmp_path, STEADY.replace("duration: 1s", "duration: 60s"))
    t0 = time.monotonic()
    res = _latbench("run", str(path), "--target", f"http://127.0.0.1:{free_port()}/v1", "--out",
                    str(tmp_path / "runs"), "--quiet", "--no-report")
    assert res.returncode == 3, res.stdout + res.stderr
    assert time.monotonic() - t0 < 5 + 5  # under 5 s asked; interpreter start-up on a busy host is the rest
    assert "is unreachable: connection refused" in res.stdout


def test_every_request_failing_after_the_preflight_is_invalid_with_the_commonest_error(tmp_path):
    """The pre-flight skipped (--no-preflight, said in the summary): a 404 on every request is a set-up error,
    exit 3, with the status and the body's first bytes; the same for the library call without a check."""
    with BadServer(default_mode="nothing-here") as srv:
        path = write_scenario(tmp_path, STEADY.replace("http://127.0.0.1:1/v1", f"http://127.0.0.1:{srv.port}/v1"))
        res = _latbench("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report",
                        "--no-preflight")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "every request failed" in res.stdout and "http_4xx (HTTP 404) on 5 of 5" in res.stdout
    summary = json.loads(next((tmp_path / "runs").glob("*/target/summary.json")).read_text())
    assert summary["preflight"] == {"ok": None, "skipped": True}
    meta = json.loads(next((tmp_path / "runs").glob("*/meta.json")).read_text())
    assert "which said: {\"error\": {\"message\": \"unknown mode\"}}" in meta["verdict"]["reasons"][0]["text"]


def test_every_request_failing_the_service_s_own_way_fails_the_run(tmp_path):
    """5xx on every request: the service's own failure (exit 1), even with no objective in the scenario."""
    with BadServer() as srv:
        text = STEADY.replace("http://127.0.0.1:1/v1", srv.url("s500body"))
        result, summary, _ = run(tmp_path, text, preflight=False)
    assert result.exit_code == 1 and [r.kind.value for r in result.verdict.reasons] == ["all_failed"]
    assert summary["failures"]["by_status"][0] == {"error": "http_5xx", "status": 500, "count": 5}


def test_latbench_check_prints_one_line_per_target(tmp_path, reference):
    path = write_scenario(tmp_path, f"""
    name: two
    targets:
      - {{name: good, url: "{reference}/v1", stream: true}}
      - {{name: wrongmodel, url: "{reference}/v1", stream: true, model: nosuchmodel}}
    load: {{phases: [{{name: main, duration: 1s, qps: 1}}]}}
    """)
    res = _latbench("check", str(path))
    assert res.returncode == 3, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith(f"good: ok: {reference}/v1 (model tiny; models tiny, a minimal request answered")
    assert lines[1] == ("wrongmodel: FAILED: the server does not list model 'nosuchmodel'; it lists: 'tiny' "
                        "(a request for it answered HTTP 404)"), lines
    ok = _latbench("check", str(path), "--target", reference)
    assert ok.returncode == 0 and ok.stdout.startswith("good: ok: "), ok.stdout + ok.stderr


def test_credentials_refused_name_the_header_never_its_value(tmp_path):
    with BadServer(default_mode="s401") as srv:
        path = write_scenario(tmp_path, STEADY.replace("http://127.0.0.1:1/v1", f"http://127.0.0.1:{srv.port}/v1")
                              .replace("stream: true}", "stream: true, headers: {X-Api-Key: '${KEY}'}}"))
        res = _latbench("check", str(path), env={**os.environ, "KEY": "sk-very-secret-4242"})
    assert res.returncode == 3
    assert "answered HTTP 401" in res.stdout and "headers sent: X-Api-Key" in res.stdout
    assert "sk-very-secret-4242" not in res.stdout + res.stderr


def test_the_one_client_follows_no_redirect_to_another_origin_and_keeps_its_deadline():
    """The model lookup's client: a 302 to another port is not followed (its headers, the key, stay home); a
    server that dribbles its answer is cut at the deadline."""
    with BadServer() as other, BadServer() as srv:
        seen: list[str] = []
        other.log = seen.append
        with pytest.raises(FetchError) as exc:
            fetch("GET", f"{srv.url('redirect_away')}/models?to={other.port}", headers={"Authorization": "Bearer k"})
        assert exc.value.kind == "redirect" and not seen
        t0 = time.monotonic()
        with pytest.raises(FetchError) as exc:
            fetch("GET", srv.url("slowdrip") + "/models", deadline_s=0.5)
        assert exc.value.kind == "timeout" and time.monotonic() - t0 < 2.0


#: a managed server that spins a thread of its own (always runnable: it has work all the time) on one CPU
SPINNING = ("import os, runpy, sys, threading; os.sched_setaffinity(0, {%d}); "
            "threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start(); "
            "sys.argv = ['bad_servers', '--mode', 'ok', '--port', sys.argv[1]]; "
            "runpy.run_module('tests.bad_servers', run_name='__main__')")
HOG = "import os, time; os.sched_setaffinity(0, {%d}); e = time.time() + %f\nwhile time.time() < e: pass"


def _hogged(cpu: int, seconds: float) -> list[subprocess.Popen]:
    """Three spinning processes pinned to ``cpu``, each spinning before this returns: a process there waits for it
    about three quarters of the time. (On a host already busy, a hog still starting when the run begins would leave
    the server's first second uncontended: two hogs, not yet all spinning, gave it a wait share of exactly 1/3.)"""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG % (cpu, seconds)]) for _ in range(3)]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(psutil.Process(h.pid).cpu_times().user > 0.2 for h in hogs):
        time.sleep(0.05)
    return hogs


def _spinning_target(cpu: int) -> str:
    return ('target: {command: {run: ["%s", "-c", "%s", "{port}"], url: "http://127.0.0.1:{port}/ok/v1", '
            'ready_url: "http://127.0.0.1:{port}/health"}, model: m, stream: false}' % (sys.executable, SPINNING % cpu))


@pytest.mark.alone
@pytest.mark.contends
@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or not hasattr(os, "sched_setaffinity"), reason="Linux")
def test_a_capacity_step_failed_on_a_contended_host_makes_the_search_invalid(tmp_path):
    """#26 item 6: capacity steps are sampled as runs are. A managed server pinned to a CPU beside two hogs waits for
    it most of the time it has work: the step it fails says nothing of its capacity, and the search is invalid
    (exit 3), not an answer of 'holds nothing' (exit 1)."""
    cpu = max(os.sched_getaffinity(0))
    sc = tmp_path / "cap.yaml"
    sc.write_text(f"name: cap\n{_spinning_target(cpu)}\nload: {{phases: [{{name: p, duration: 1s, qps: 1}}]}}\n"
                  "slo: [latency.p50 < 1us]\n")  # no step can meet it: the first one fails
    hogs = _hogged(cpu, 60)
    try:
        p = _latbench("capacity", str(sc), "--min", "2", "--max", "2", "--step-duration", "2s", "--warmup", "0s",
                      "--out", str(tmp_path / "runs"))
    finally:
        for h in hogs:
            h.kill(), h.wait()
    assert p.returncode == 3, p.stdout + p.stderr
    assert "the search is invalid: step qps-2: host contended: the server command" in p.stdout, p.stdout
    rd = next((tmp_path / "runs").iterdir())
    cap = json.loads((rd / "capacity.json").read_text())
    assert cap["complete"] is False and "waited for a CPU" in cap["host_contended"]
    step = cap["steps"][0]
    assert step["contended"] and not step["passed"] and step["reasons"][0].startswith("host contended")
    summary = json.loads((rd / step["dir"] / "summary.json").read_text())
    assert summary["host"]["judged"] == "server" and summary["host"]["contended"][0]["wait_share"] > 1 / 3
    assert (rd / step["dir"] / "host.csv").is_file()
    assert "INVALID:" in (rd / "report.html").read_text()


@pytest.mark.alone
@pytest.mark.contends
@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or not hasattr(os, "sched_setaffinity"), reason="Linux")
def test_a_watch_on_a_contended_host_is_invalid(tmp_path):
    """#26 item 6: a watch samples the host over its span too; its managed server starved of a CPU makes it exit 3."""
    cpu = max(os.sched_getaffinity(0))
    sc = tmp_path / "w.yaml"
    sc.write_text(f"name: w\n{_spinning_target(cpu)}\nload: {{phases: [{{name: p, duration: 1s, qps: 1}}]}}\n")
    hogs = _hogged(cpu, 60)
    try:
        p = _latbench("watch", str(sc), "--qps", "2", "--duration", "3s", "--metrics-port", "0",
                      "--out", str(tmp_path / "runs"))
    finally:
        for h in hogs:
            h.kill(), h.wait()
    assert p.returncode == 3, p.stdout + p.stderr
    rd = next((tmp_path / "runs").iterdir())
    summary = json.loads(next(rd.glob("*/summary.json")).read_text())
    assert summary["host"]["measured"] and summary["host"]["contended"], summary["host"]
    meta = json.loads((rd / "meta.json").read_text())
    kinds = [r["kind"] for r in meta["verdict"]["reasons"]]
    # the starved server is named; on a host busy beyond the hogs, latbench's own lag may be named beside it
    assert "host_contended" in kinds and set(kinds) <= {"host_contended", "generator_limited"}, meta["verdict"]
    assert next(rd.glob("*/host.csv")).is_file()
