"""The Locust engine: a real master and real worker processes on 127.0.0.1 against real servers."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request

import numpy as np
import psutil
import pytest

from loadgen.analysis.metrics import records_frame, summarize
from loadgen.records.schema import read_records
from loadgen.schedule import sharding as lplan
from loadgen.schedule.arrivals import PhasePlan, arrivals
from tests.conftest import ROOT

# -- pure: the split of one schedule across workers ------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_worker_shares_are_the_native_schedule_exactly(n):
    p = PhasePlan(index=1, name="x", start=2.0, end=12.0, rate_start=50, rate_end=150, arrival="poisson")
    full = np.concatenate(list(arrivals(p, seed=3)))
    parts = [list(lplan.shard_arrivals(p, k, n, seed=3, burstiness=1.0, base=1000)) for k in range(n)]
    seqs = np.concatenate([first + stride * np.arange(len(t)) for part in parts for t, first, stride in part])
    times = np.concatenate([t for part in parts for t, _, _ in part])
    order = np.argsort(seqs)
    assert np.array_equal(seqs[order], np.arange(1000, 1000 + len(full)))  # every arrival once, seq = its index
    assert np.array_equal(times[order], full)  # at the native engine's intended time
    assert [lplan.share(10, k, 3) for k in range(3)] == [4, 3, 3]


def test_seq_bases_and_closed_seqs_do_not_collide():
    assert lplan.seq_bases([5, 0, 7]) == [0, 5, 5]
    seqs = {lplan.closed_seq(1, j, k, 3) for j in range(100) for k in range(3)}
    assert len(seqs) == 300 and min(seqs) >= lplan.CLOSED_SEQ_BASE


def test_the_calling_process_never_imports_locust_or_gevent():
    code = ("import sys, loadgen.engine.locust as e, loadgen.engine.locust.launch, loadgen.cli.worker, "
            "loadgen.cli.main;"
            "e.LocustResult; assert not {'locust', 'gevent'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# -- real processes --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference_server():
    proc = subprocess.Popen([sys.executable, "-m", "reference_server", "--port", "0", "--model", "tiny",
                             "--arch", "optimized"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    url = None
    for line in proc.stdout:
        if line.startswith("LATBENCH_SERVER_URL="):
            url = line.split("=", 1)[1].strip()
            break
    assert url, "the reference server did not start"
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
    for _ in range(600):  # ready once warm-up is over
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        threading.Event().wait(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def requests_served(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("refserver:requests_total")))


def scenario(tmp_path, url, qps, duration, stream=True, arrival="constant"):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(f"""
        name: locust
        target: {{url: "{url}", stream: {str(stream).lower()}}}
        workload: {{prompts: {{input_tokens: 16, output_tokens: 8, distinct: 50}}}}
        load:
          arrival: {arrival}
          phases:
            - {{name: main, duration: {duration}s, qps: {qps}}}
        """))
    return p


def run(path, url, tdir, **kw):
    from loadgen.engine.locust import run_target_locust
    from loadgen.scenario.loader import load_scenario
    from loadgen.schedule.arrivals import plan_phases

    res = run_target_locust(path, 0, url, kw.pop("model", "tiny"), tdir, **kw)
    return plan_phases(load_scenario(path).scenario.load), res, read_records(tdir / "requests.parquet")


@pytest.mark.alone  # timing-sensitive (conftest.py)
def test_two_workers_hold_the_rate_and_record_every_request_once(tmp_path, reference_server):
    url = reference_server + "/v1"
    before = requests_served(reference_server)
    plans, res, table = run(scenario(tmp_path, url, qps=30, duration=6), url, tmp_path / "t", workers=2)
    served = requests_served(reference_server) - before
    df = records_frame(table)
    assert not res.interrupted and res.notes == []
    assert len(df) == served == res.requests == 180  # nothing lost, nothing doubled
    assert df["seq"].is_unique and set(df["worker"]) == {0, 1}
    assert (df["error"] == "").all()
    s = summarize(table, plans, [], res.duration, processes=res.processes, cpu_seconds=res.cpu_seconds)
    assert s["overall"]["achieved_qps"] == pytest.approx(30, rel=0.05)
    ok = df[df["error"] == ""]
    assert ok["first_token"].notna().all() and (ok["first_token"] > ok["first_byte"]).all()  # TTFT of streams
    assert ((ok["ttft"] > 0) & (ok["ttft"] <= ok["latency"])).all()
    assert (ok["output_tokens"] > 0).all() and (ok["output_tokens_source"] == "usage").all()
    assert np.percentile(df["send_lag"], 50) < 0.005
    assert res.processes == 2 and res.cpu_seconds > 0
    locust_csv = (tmp_path / "t" / "locust_stats.csv").read_text().splitlines()
    assert locust_csv[-1].split(",")[2] == "180"  # Locust's own stats saw every request too


def test_a_worker_killed_mid_run_keeps_the_others_records_and_marks_the_run_incomplete(tmp_path, known_server):
    srv = known_server(delay=0.02)
    killed = {}

    def on_progress(p):
        if p["t"] > 2.0 and not killed:
            for child in psutil.Process(os.getpid()).children(recursive=True):
                try:
                    cmd = " ".join(child.cmdline())
                except psutil.Error:  # a child that ended meanwhile (a zombie not reaped yet)
                    continue
                if "local-1" in cmd:
                    killed["pid"] = child.pid
                    os.kill(child.pid, signal.SIGKILL)

    path = scenario(tmp_path, srv.url, qps=40, duration=5, stream=False)
    plans, res, table = run(path, srv.url, tmp_path / "t", workers=2, on_progress=on_progress, model="known")
    df = records_frame(table)
    assert killed, "the test did not find worker local-1"
    assert res.interrupted
    assert any("local-1" in n and "died" in n for n in res.notes), res.notes
    assert {w["label"]: w["state"] for w in res.workers} == {"local-0": "done", "local-1": "dead"}
    assert df["seq"].is_unique
    k = {w["label"]: w["k"] for w in res.workers}
    survivor, dead = df[df["worker"] == k["local-0"]], df[df["worker"] == k["local-1"]]
    assert len(survivor) == 100 and (survivor["error"] == "").all()  # its whole share, to the end
    assert 0 < len(dead) < 100 and dead["scheduled"].max() < 3.0  # what it sent before it died


def test_worker_command_is_a_click_command():
    from click.testing import CliRunner

    from loadgen.cli.worker import worker

    out = CliRunner().invoke(worker, ["--help"])
    assert out.exit_code == 0 and "--master" in out.output


def test_a_worker_joining_from_another_process_over_the_master_port(tmp_path, known_server):
    """The remote path, on loopback: `latbench run --expect-workers 1 --master-bind HOST:PORT` and a
    separate `latbench worker --master HOST:PORT` process that joins it, as on another host. Both are given
    the run's worker secret in a file (issue 27, item 2); a worker with another secret is refused (exit 2)."""
    import socket

    srv = known_server(delay=0.01)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = scenario(tmp_path, srv.url, qps=20, duration=2, stream=False)
    (tmp_path / "secret").write_text(WORKER_SECRET + "\n")
    (tmp_path / "wrong").write_text("not-the-run-secret-0000000\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATBENCH_WORKER_SECRET")}
    latbench = [sys.executable, "-m", "loadgen.cli"]
    master = subprocess.Popen(latbench + ["run", str(path), "--engine", "locust", "--workers", "1",
                                          "--expect-workers", "1", "--master-bind", f"127.0.0.1:{port}",
                                          "--out", str(tmp_path / "runs"), "--quiet", "--no-report"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**env, "LATBENCH_WORKER_SECRET_FILE": str(tmp_path / "secret")})
    join = latbench + ["worker", "--master", f"127.0.0.1:{port}"]
    wrong = subprocess.Popen(join + ["--label", "remote-wrong", "--secret-file", str(tmp_path / "wrong")], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    worker = subprocess.Popen(join + ["--label", "remote-a", "--secret-file", str(tmp_path / "secret")], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        out, _ = master.communicate(timeout=90)
        _, wrong_err = wrong.communicate(timeout=30)
    finally:
        worker.kill()
        wrong.kill()
    assert wrong.returncode == 2 and "refused" in wrong_err, wrong_err
    assert master.returncode == 0, out
    assert WORKER_SECRET not in out and WORKER_SECRET not in wrong_err
    (rd,) = list((tmp_path / "runs").iterdir())
    assert json.loads((rd / "meta.json").read_text())["engine"] == "locust"
    df = records_frame(read_records(rd / "target" / "requests.parquet"))
    assert len(df) == 40 and df["seq"].is_unique and set(df["worker"]) == {0, 1}  # both workers sent their share
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert any("refused" in n for n in summary["notes"]), summary["notes"]  # the wrong one, named by its id


def test_a_run_expecting_remote_workers_without_a_secret_is_refused_before_it_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LATBENCH_WORKER_SECRET")}
    path = scenario(tmp_path, "http://127.0.0.1:9/v1", qps=1, duration=1, stream=False)
    r = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", str(path), "--engine", "locust",
                        "--expect-workers", "1", "--out", str(tmp_path / "runs")], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 2 and "LATBENCH_WORKER_SECRET" in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()  # nothing started


# -- issue 27: the master's workers prove the run's secret; a worker that dies is named ------------------------

WORKER_SECRET = "a-worker-secret-known-to-the-run-5e1f"


class RogueWorker:
    """A process that joins the master's port as a patched latbench worker would (Locust's ``client_ready``, then
    ``lb_hello``, heartbeats), knowing no secret; it keeps every frame it is sent. Plain pyzmq and msgpack: locust
    itself would monkey-patch this test process."""

    def __init__(self, port: int, ident: str):
        import importlib.metadata

        self.port, self.ident, self.frames = port, ident, []
        self.version = importlib.metadata.version("locust")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import time

        import msgpack
        import zmq

        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.ident.encode())
        sock.connect(f"tcp://127.0.0.1:{self.port}")

        def send(kind, data):
            sock.send(msgpack.dumps((kind, data, self.ident)))

        send("client_ready", self.version)
        send("lb_hello", {"label": "rogue", "host": "elsewhere", "pid": 1})
        beat = 0.0
        while not self.stop.is_set():
            if sock.poll(50):
                self.frames.append(sock.recv())
            if time.monotonic() >= beat:
                beat = time.monotonic() + 1.0
                send("heartbeat", {"state": "ready", "current_cpu_usage": 0.0, "current_memory_usage": 0})
        sock.close(linger=0)

    def close(self) -> list[str]:
        """Stop; the types of the messages it received."""
        import msgpack

        self.stop.set()
        self.thread.join(5)
        return [msgpack.loads(f, raw=False, strict_map_key=False)[0] for f in self.frames]


def test_a_rogue_worker_without_the_secret_gets_no_header_and_is_named_in_the_log(tmp_path, known_server, capfd,
                                                                                 monkeypatch):
    """Issue 27, item 2: the master sent the expanded headers and extra_body to any process that joined its port.
    Now the rogue (joined first) gets only the challenge and a refusal and is named in the log, while a
    ``latbench worker`` given the secret by environment joins and sends its share."""
    header, body = "sk-rogueHEADER-4c4c4c4c", "rogueBODY-9d9d9d9d"
    monkeypatch.setenv("LB_ROGUE_HEADER", header)
    monkeypatch.setenv("LB_ROGUE_BODY", body)
    monkeypatch.setenv("LATBENCH_WORKER_SECRET", WORKER_SECRET)
    srv = known_server(delay=0.01)
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(f"""
        name: rogue
        target:
          url: "{srv.url}"
          stream: false
          headers: {{Authorization: "Bearer ${{LB_ROGUE_HEADER}}"}}
          extra_body: {{user: "${{LB_ROGUE_BODY}}"}}
        workload: {{prompts: {{input_tokens: 16, output_tokens: 8, distinct: 50}}}}
        load:
          arrival: constant
          phases: [{{name: main, duration: 2s, qps: 10}}]
        """))
    joined = {}

    def on_master(m):
        joined["rogue"] = RogueWorker(m["port"], "rogue-7f3a")
        joined["worker"] = subprocess.Popen(
            [sys.executable, "-m", "loadgen.cli", "worker", "--master", f"127.0.0.1:{m['port']}", "--label",
             "remote-ok"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the secret: by env

    try:
        plans, res, table = run(path, srv.url, tmp_path / "t", workers=1, expect_workers=1, on_master=on_master,
                                model="known", connect_timeout=30)
    finally:
        types = joined["rogue"].close() if "rogue" in joined else []
        if "worker" in joined:
            joined["worker"].kill()
    received = b"".join(joined["rogue"].frames)
    assert header.encode() not in received and body.encode() not in received
    assert "lb_start" not in types and set(types) <= {"lb_challenge", "lb_refused"}, types
    err = capfd.readouterr().err
    assert "rogue-7f3a" in err and "refused" in err, err[-2000:]
    assert any("rogue-7f3a" in n for n in res.notes), res.notes
    df = records_frame(table)
    assert not res.interrupted, res.notes
    assert {w["label"] for w in res.workers} == {"local-0", "remote-ok"}
    assert len(df) == 20 and set(df["worker"]) == {0, 1} and (df["error"] == "").all()


def _kill_worker_at_start(label: str, found: dict, stop: threading.Event) -> None:
    """SIGKILL the local worker ``label`` as soon as its process exists (long before it can join)."""
    import time

    while not stop.is_set() and not found:
        for child in psutil.Process(os.getpid()).children(recursive=True):
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            if "loadgen.engine.locust.worker" in cmd and label in cmd:
                os.kill(child.pid, signal.SIGKILL)
                found.update(pid=child.pid, at=time.monotonic())
                return
        time.sleep(0.01)


def test_a_worker_dying_in_start_up_is_reported_within_seconds_by_name(tmp_path, known_server):
    """Issue 27, item 19: a local worker that died before it joined cost the whole connect timeout (60 s) and the
    terminal said only "interrupted". Now the master sees its process end, stops waiting, and names it."""
    import time

    srv = known_server()
    found, stop = {}, threading.Event()
    killer = threading.Thread(target=_kill_worker_at_start, args=("local-1", found, stop), daemon=True)
    killer.start()
    try:
        plans, res, table = run(scenario(tmp_path, srv.url, qps=10, duration=2, stream=False), srv.url,
                                tmp_path / "t", workers=2, model="known", connect_timeout=30)
    finally:
        stop.set()
    assert found, "the test did not find worker local-1"
    assert time.monotonic() - found["at"] < 8.0  # seconds, not the 30 s connect timeout
    assert res.interrupted and table.num_rows == 0
    (lost,) = res.lost_workers
    assert (lost.label, lost.during, lost.pid, lost.exit_code) == ("local-1", "start-up", found["pid"], -9)
    assert any("local-1" in n and "SIGKILL" in n and "start-up" in n for n in res.notes), res.notes


def test_a_dead_worker_is_named_in_the_verdict_and_in_summary_md(tmp_path, known_server):
    """Issue 27, item 20: the killed worker was named in summary.json's notes only; the verdict said "interrupted"
    and so did the report. Now an interrupted reason for its target names it, and summary.md shows it."""
    import reports
    from loadgen.analysis.verdict import Kind
    from loadgen.engine.options import EngineOptions
    from loadgen.run.runner import run_scenario
    from loadgen.scenario.loader import load_scenario

    srv = known_server(delay=0.02)
    killed = {}

    def on_progress(p):
        if p["t"] > 0.8 and not killed:
            for child in psutil.Process(os.getpid()).children(recursive=True):
                if "local-1" in " ".join(child.cmdline()):
                    killed["pid"] = child.pid
                    os.kill(child.pid, signal.SIGKILL)

    path = scenario(tmp_path, srv.url, qps=20, duration=2, stream=False)
    result = run_scenario(load_scenario(path), out=str(tmp_path / "runs"),
                          opts=EngineOptions("locust", workers=2, on_progress=on_progress))
    assert killed, "the test did not find worker local-1"
    assert result.verdict.outcome == "invalid"
    (tr,) = result.targets
    named = [r for r in result.verdict.reasons if r.kind is Kind.INTERRUPTED and r.target == tr.name]
    assert len(named) == 1 and "local-1" in named[0].text and "SIGKILL" in named[0].text, result.reasons
    stored = json.loads((result.rundir.path / "meta.json").read_text())["verdict"]
    assert any(r["target"] == tr.name and "local-1" in r["text"] for r in stored["reasons"]), stored
    reports.write_outputs(result.rundir.path, html=False)
    md = (result.rundir.path / "summary.md").read_text()
    assert any("local-1" in line and "died mid-run" in line for line in md.splitlines()), md
