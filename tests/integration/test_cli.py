"""The latbench command as a user runs it: a real subprocess, real signals, real files."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from tests.helpers import write_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]


def scenario(url, duration="30s", qps=50, extra=""):
    return f"""
    name: cli
    target:
      url: "{url}"
      stream: false
      headers: {{Authorization: "Bearer ${{LB_TEST_KEY}}", x-api-key: literal-secret-123}}
    load:
      phases:
        - {{name: main, duration: {duration}, qps: {qps}}}
    {extra}
    """


def start(args, **kw):
    env = {**os.environ, "LB_TEST_KEY": "sk-planted-secret-456"}
    return subprocess.Popen(LATBENCH + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **kw)


def only_rundir(out: Path) -> Path:
    (d,) = list(out.iterdir())
    return d


def test_validate_and_schema(tmp_path):
    good = write_scenario(tmp_path, scenario("http://127.0.0.1:9/v1"), "good.yaml")
    bad = write_scenario(tmp_path, scenario("http://127.0.0.1:9/v1", qps="lots"), "bad.yaml")
    env = {**os.environ, "LB_TEST_KEY": "x"}
    ok = subprocess.run(LATBENCH + ["validate", str(good)], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "ok" in ok.stdout
    no = subprocess.run(LATBENCH + ["validate", str(good), str(bad)], capture_output=True, text=True, env=env)
    assert no.returncode == 2 and "bad.yaml:9:40: load.phases[0].qps" in no.stderr and "qps" in no.stderr
    sch = subprocess.run(LATBENCH + ["schema"], capture_output=True, text=True)
    assert sch.returncode == 0 and json.loads(sch.stdout)["title"] == "latbench scenario"


def test_validate_refuses_a_framing_header_at_its_line(tmp_path):
    """Issue 27, item 15: `Transfer-Encoding: chunked` in a target's headers went out beside Content-Length (a
    malformed request). validate refuses every header the client writes itself, at the header's own line."""
    path = write_scenario(tmp_path, """\
    name: te
    target:
      url: http://127.0.0.1:9/v1
      headers:
        Authorization: Bearer x
        Transfer-Encoding: chunked
        Host: api.example
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    no = subprocess.run(LATBENCH + ["validate", str(path)], capture_output=True, text=True)
    assert no.returncode == 2, no.stderr
    (line,) = [ln for ln in no.stderr.splitlines() if ln.startswith(str(path))]
    assert line.startswith(f"{path}:6:") and "target.headers.Transfer-Encoding: the HTTP client writes" in line
    assert "Content-Length" in line and "Bearer" not in no.stderr  # the valid choices named; no value quoted


def test_sigint_stops_cleanly_keeps_records_and_marks_incomplete(tmp_path, known_server):
    srv = known_server(delay=0.02)
    path = write_scenario(tmp_path, scenario(srv.url))
    p = start(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"])
    deadline = time.monotonic() + 60  # from the load's start (the records file), not the process's: a busy host
    while not list((tmp_path / "runs").glob("*/target/requests.parquet*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)  # ~100 requests at 50 req/s
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 3, out
    assert "interrupted" in out
    rd = only_rundir(tmp_path / "runs")
    table = pq.read_table(rd / "target" / "requests.parquet")
    assert 60 < table.num_rows < 400
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert summary["complete"] is False and summary["overall"]["count"] == table.num_rows
    assert json.loads((rd / "meta.json").read_text())["complete"] is False


def test_second_sigint_aborts_in_flight_requests_and_still_writes(tmp_path, known_server):
    srv = known_server(delay=120)
    path = write_scenario(tmp_path, scenario(srv.url, qps=20))
    # every answer takes 120 s: the requests in flight are the point, not the pre-flight's wait for its own answer
    p = start(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-preflight"])
    deadline = time.monotonic() + 60  # on a busy host the start (imports, the RunDir) takes a while
    while not (tmp_path / "runs").is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)  # ~40 requests sent, none answered
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    t = time.perf_counter()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=110)
    # aborted, not waited for: the answers were 120 s away (the records, summary and report are written in between)
    assert time.perf_counter() - t < 60
    assert p.returncode == 3
    rd = only_rundir(tmp_path / "runs")
    table = pq.read_table(rd / "target" / "requests.parquet").to_pandas()
    assert len(table) > 5 and set(table["error"]) == {"cancelled"}


def test_secrets_never_reach_the_rundir_or_the_output(tmp_path, known_server):
    srv = known_server(delay=0.01)
    path = write_scenario(tmp_path, scenario(srv.url, duration="1s", qps=20, extra="slo: ['latency.p99 < 1s']"))
    p = start(["run", str(path), "--out", str(tmp_path / "runs")])
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    rd = only_rundir(tmp_path / "runs")
    files = [f for f in rd.rglob("*") if f.is_file()]
    assert len(files) >= 5
    for f in files + [None]:
        data = out.encode() if f is None else f.read_bytes()
        assert b"sk-planted-secret-456" not in data, f
        assert b"literal-secret-123" not in data, f
    assert "${LB_TEST_KEY}" in (rd / "scenario.yaml").read_text()


def test_no_report_writes_the_rundir_and_ci_outputs_but_no_html(tmp_path, known_server):
    srv = known_server(delay=0.01)
    path = write_scenario(tmp_path, scenario(srv.url, duration="1s", qps=20, extra="slo: ['latency.p99 < 1s']"))
    p = start(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report"])
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    rd = only_rundir(tmp_path / "runs")
    assert not (rd / "report.html").exists()
    assert (rd / "summary.md").is_file() and (rd / "junit.xml").is_file() and (rd / "meta.json").is_file()
    assert "report: none (latbench report" in out, out
    later = subprocess.run(LATBENCH + ["report", str(rd)], capture_output=True, text=True)
    assert later.returncode == 0 and (rd / "report.html").is_file(), later.stdout + later.stderr


def test_missing_scenario_file_is_exit_2(tmp_path):
    r = subprocess.run(LATBENCH + ["run", str(tmp_path / "nope.yaml")], capture_output=True, text=True)
    assert r.returncode == 2 and "nope.yaml" in r.stderr


def test_a_broken_dataset_is_exit_2_before_anything_starts(tmp_path, known_server):
    """Issue 13, item 6: validate said ok; run made a RunDir, printed a traceback and exited 1."""
    srv = known_server(delay=0.01)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "fine"}\n{"prompt": "cut\n')
    path = write_scenario(tmp_path, scenario(srv.url, duration="2s", qps=5).replace(
        "load:", "workload: {dataset: prompts.jsonl}\n    load:"))
    for args in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "runs")]):
        p = start(args)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 2, out
        assert "prompts.jsonl:2: expected a JSON object" in out and "Traceback" not in out
    assert not (tmp_path / "runs").exists()


def test_verbose_logs_one_redacted_line_per_failed_request_and_no_library_debug(tmp_path):
    """Issue 13, item 10: -v logged 0 lines for 28 failures, and ~2,300 lines of matplotlib font debug."""
    from tests.bad_servers import BadServer

    with BadServer() as srv:
        path = write_scenario(tmp_path, scenario(srv.url("echo"), duration="1s", qps=20))
        p = subprocess.run(LATBENCH + ["-v", "run", str(path), "--out", str(tmp_path / "runs"), "--quiet",
                                       "--no-preflight"],  # the load's failed requests (the pre-flight stops at 401)
                           capture_output=True, text=True, env={**os.environ, "LB_TEST_KEY": "sk-planted-secret-456"},
                           timeout=120)
    rd = only_rundir(tmp_path / "runs")
    table = pq.read_table(rd / "target" / "requests.parquet").to_pandas()
    failed = [ln for ln in p.stderr.splitlines() if "failed request" in ln]
    assert len(table) > 5 and len(failed) == int((table["error"] != "").sum()) == len(table), p.stderr[-3000:]
    assert all("(target target, phase main): http_4xx, status 401: " in ln and "bad key" in ln for ln in failed)
    assert all("Bearer ${LB_TEST_KEY}" in ln and "sk-planted" not in ln and "literal-secret" not in ln
               for ln in failed), failed[0]
    assert len(p.stderr.splitlines()) < len(failed) + 20, p.stderr[-3000:]  # nothing else floods the log
    assert "matplotlib" not in p.stderr and "font" not in p.stderr.lower()
