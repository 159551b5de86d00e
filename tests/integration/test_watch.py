"""``latbench watch`` against real servers on 127.0.0.1: its /metrics, scraped and parsed with the Prometheus text
parser, against the records it wrote; and its SLO gauge when the reference server turns slow."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.analysis.stats import nearest_rank
from loadgen.monitoring.buckets import BASE_BOUNDS, bucket_quantile
from loadgen.records.rotate import read_segments
from loadgen.run.targets import free_port
from tests.helpers import start_reference

ROOT = Path(__file__).resolve().parents[2]


def scrape(url: str) -> dict:
    """{sample name: [(labels, value)]} of one scrape, through prometheus_client's text parser."""
    out: dict = {}
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(samples: dict, name: str, **labels) -> float:
    vals = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    assert len(vals) == 1, (name, labels, vals)
    return vals[0]


def buckets(samples: dict, name: str) -> list[tuple[float, float]]:
    return sorted((float(lab["le"]), v) for lab, v in samples[name + "_bucket"])


def start_watch(scenario: Path, out: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "watch", str(scenario), "--metrics-port", "0",
                             "--out", str(out), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("LATBENCH_METRICS_URL="):
            return proc, line.split("=", 1)[1].strip()
    proc.kill()
    raise AssertionError("latbench watch did not serve metrics:\n" + "".join(seen))


def test_watch_metrics_match_the_records(known_server, tmp_path):
    srv = known_server(ttft=0.08, gap=0.01, tokens=5)  # latency >= 0.08 + 4 x 0.01 = 0.12 s
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({
        "name": "known", "target": {"url": srv.url, "stream": True},
        "workload": {"prompts": {"input_tokens": 8, "output_tokens": 5}},
        "load": {"phases": [{"name": "steady", "duration": 10, "qps": 2}]},
        "slo": ["latency.p99 < 1s", "ttft.p99 < 900ms", "error_rate < 1%"],
    }))
    proc, url = start_watch(scenario, tmp_path / "runs", "--qps", "20", "--duration", "4s", "--window", "30s",
                            "--linger", "20s")
    try:
        (rd,) = list((tmp_path / "runs").iterdir())
        deadline = time.monotonic() + 30
        while not (rd / "watch.json").exists():  # written once the probe stopped and every record was counted
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        m = scrape(url)
    finally:
        proc.send_signal(signal.SIGINT)  # the probe stopped already: one Ctrl-C ends the lingering
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out

    table = read_segments(rd / "target")
    errors = np.asarray(table.column("error").to_pylist())
    ok = errors == ""
    done, sched = table.column("done").to_numpy(), table.column("scheduled").to_numpy()
    first = table.column("first_token").to_numpy()
    latency = np.sort((done - sched)[ok])
    n = table.num_rows
    assert 50 <= n <= 110, n  # 20 req/s for 4 s, Poisson
    lab = {"target": "target", "phase": "watch", "scenario": "known"}
    total = sum(v for labels, v in m["latbench_requests_total"] if labels["target"] == "target")
    assert total == n
    assert one(m, "latbench_requests_total", outcome="ok", error="none", **lab) == ok.sum()
    assert one(m, "latbench_latency_seconds_count", **lab) == ok.sum()
    assert one(m, "latbench_ttft_seconds_count", **lab) == np.count_nonzero(ok & ~np.isnan(first))
    assert one(m, "latbench_latency_seconds_sum", **lab) == pytest.approx(latency.sum(), rel=1e-9)

    lat_b = buckets(m, "latbench_latency_seconds")
    bounds = [b for b, _ in lat_b]
    assert 1.0 in bounds and 0.9 in buckets_bounds(m, "latbench_ttft_seconds") and 0.9 not in BASE_BOUNDS
    for q in (0.5, 0.9, 0.99):
        exact = nearest_rank(latency, q * 100)
        estimate = bucket_quantile(q, lat_b)
        i = next(k for k, (_, c) in enumerate(lat_b) if c >= q * len(latency))
        lo, hi = (lat_b[i - 1][0] if i else 0.0), lat_b[i][0]
        assert lo < exact <= hi and lo <= estimate <= hi, (q, exact, estimate, lo, hi)
    assert latency[0] >= 0.12  # the server's known latency: every request took at least that
    # thresholds far above the server's known 0.12 s: holding even on a loaded machine
    assert one(m, "latbench_slo_holding", slo="latency.p99 < 1s", **lab) == 1.0
    assert one(m, "latbench_slo_holding", slo="ttft.p99 < 900ms", **lab) == 1.0
    assert one(m, "latbench_slo_value", slo="latency.p99 < 1s", **lab) == nearest_rank(latency, 99)  # one window
    assert 0 <= one(m, "latbench_send_lag_seconds", **lab) < 1.0
    summary = json.loads((rd / "target" / "summary.json").read_text())
    assert summary["overall"]["count"] == n and summary["phases"]["watch"]["count"] == n
    facts = json.loads((rd / "watch.json").read_text())["targets"][0]
    assert facts["rows_written"] == n and sum(facts["requests"].values()) == n


def buckets_bounds(m: dict, name: str) -> list[float]:
    return [b for b, _ in buckets(m, name)]


def wait_for(url: str, slo: str, want: float, limit_s: float, min_value: float = -math.inf) -> float:
    """Seconds until the SLO gauge reads ``want`` with the objective's value at least ``min_value`` (scraped every
    0.25 s); fails after ``limit_s``."""
    t0 = time.monotonic()
    v = value = None
    while time.monotonic() - t0 < limit_s:
        m = scrape(url)
        v = one(m, "latbench_slo_holding", slo=slo, target="target")
        value = one(m, "latbench_slo_value", slo=slo, target="target")
        if v == want and value >= min_value:
            return time.monotonic() - t0
        time.sleep(0.25)
    raise AssertionError(f"{slo} did not read {want} (value >= {min_value}) within {limit_s} s (last {v}, {value})")


def test_injected_slowness_flips_the_slo_gauge_within_the_window(tmp_path):
    port = free_port()
    window = 4.0
    slo = "latency.p99 < 380ms"  # healthy: well under, even loaded; slow: every request waits 400 ms first
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({
        "name": "slow", "target": {"url": f"http://127.0.0.1:{port}/v1", "model": "tiny", "stream": True},
        "workload": {"prompts": {"input_tokens": 8, "output_tokens": 4, "distinct": 20}},
        "load": {"phases": [{"name": "steady", "duration": 10, "qps": 5}]},
        "slo": [slo],
    }))
    server = start_reference(port)
    proc = None
    try:
        proc, url = start_watch(scenario, tmp_path / "runs", "--qps", "10", "--duration", "60s",
                                "--window", f"{window:g}s")
        wait_for(url, slo, 1.0, 20)  # a healthy server: holding
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        # the same port, now every request delayed by 400 ms before processing
        server = start_reference(port, "--slow-rate", "1.0", "--slow-ms", "400")
        # while it restarts requests fail (connect) and the gauge may read 0 for that; what is timed is the flip
        # made by slow answers: the first complete ~0.4 s after the server is back, and from then the window's
        # p99 is theirs as soon as more than 1% of its requests are slow, which takes one of them
        flipped = wait_for(url, slo, 0.0, window + 10, min_value=0.4)
        assert flipped <= window, flipped
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)  # as a service manager stops it: a normal end
            proc.communicate(timeout=30)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert proc.returncode == 0
    assert not math.isnan(json.loads(next((tmp_path / "runs").iterdir()).joinpath("watch.json").read_text())
                          ["targets"][0]["window"]["count"])


def known_scenario(tmp_path: Path, url: str) -> Path:
    """A streaming scenario at the known server (its answers take ~0.1 s)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({
        "name": "known", "target": {"url": url, "stream": True},
        "workload": {"prompts": {"input_tokens": 8, "output_tokens": 3}},
        "load": {"phases": [{"name": "steady", "duration": 10, "qps": 2}]},
        "slo": ["latency.p99 < 1s"],
    }))
    return scenario


def wait_for_file(proc: subprocess.Popen, path_of, limit_s: float = 30) -> Path:
    """The path ``path_of()`` names once it exists (the watch still running); fails after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        path = path_of()
        if path is not None and path.exists():
            return path
        if proc.poll() is not None:
            raise AssertionError("latbench watch ended:\n" + proc.stdout.read())
        assert time.monotonic() < deadline, f"{path} did not appear within {limit_s} s"
        time.sleep(0.05)


def ends_within(proc: subprocess.Popen, limit_s: float) -> tuple[float, str]:
    """(seconds until the process ended, its output); killed and failed when it outlives ``limit_s``."""
    t0 = time.monotonic()
    try:
        out = proc.communicate(timeout=limit_s)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {limit_s} s after the signal:\n{proc.communicate()[0]}") from None
    return time.monotonic() - t0, out


def rundir_file(runs: Path, name: str):
    return lambda: next((d / name for d in runs.iterdir()), None) if runs.exists() else None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_one_signal_during_the_linger_ends_it(known_server, tmp_path, sig):
    srv = known_server(ttft=0.05, gap=0.01, tokens=3)
    runs = tmp_path / "runs"
    proc, url = start_watch(known_scenario(tmp_path, srv.url), runs, "--qps", "5", "--duration", "1s",
                            "--linger", "1h")
    wait_for_file(proc, rundir_file(runs, "watch.json"))  # the probe has stopped: lingering
    assert "latbench_requests_total" in scrape(url)  # /metrics still up
    proc.send_signal(sig)
    took, out = ends_within(proc, 10)
    assert proc.returncode == 0 and took < 5, (took, out)
    assert "ending the linger" in out


def test_sigterm_while_probing_stops_and_does_not_linger(known_server, tmp_path):
    srv = known_server(ttft=0.05, gap=0.01, tokens=3)
    runs = tmp_path / "runs"
    proc, url = start_watch(known_scenario(tmp_path, srv.url), runs, "--qps", "5", "--linger", "1h")
    time.sleep(1.0)
    assert scrape(url)
    proc.send_signal(signal.SIGTERM)  # as a service manager stops it: within the grace (5 s), not after the linger
    took, out = ends_within(proc, 15)
    assert proc.returncode == 0 and took < 8, (took, out)
    (rd,) = list(runs.iterdir())
    assert json.loads((rd / "watch.json").read_text())["targets"][0]["rows_written"] > 0
    assert (rd / "target" / "summary.json").exists()


def test_ctrl_c_while_probing_keeps_metrics_up_for_the_linger_and_a_second_ends_it(known_server, tmp_path):
    srv = known_server(ttft=0.05, gap=0.01, tokens=3)
    runs = tmp_path / "runs"
    proc, url = start_watch(known_scenario(tmp_path, srv.url), runs, "--qps", "5", "--linger", "1h")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # graceful: the probe stops, the last scrape still answers
    facts = wait_for_file(proc, rundir_file(runs, "watch.json"))
    time.sleep(0.5)
    assert proc.poll() is None
    m = scrape(url)
    rows = json.loads(facts.read_text())["targets"][0]["rows_written"]
    assert rows > 0 and sum(v for lab, v in m["latbench_requests_total"]) == rows  # the final counts
    proc.send_signal(signal.SIGINT)
    took, out = ends_within(proc, 10)
    assert proc.returncode == 0 and took < 5, (took, out)


def test_sigterm_while_a_managed_server_starts_ends_at_once(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({
        "name": "slowstart", "target": {"model": "m", "command": {
            "run": ["sleep", "60"], "url": "http://127.0.0.1:{port}/v1", "ready_url": "http://127.0.0.1:{port}/health",
            "startup_timeout": "60s"}},
        "load": {"phases": [{"name": "steady", "duration": 10, "qps": 2}]},
    }))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "watch", str(scenario), "--metrics-port", "0",
                             "--out", str(runs)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    wait_for_file(proc, rundir_file(runs, "meta.json"))  # the signal handlers are in; the server is starting
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    took, out = ends_within(proc, 30)
    assert proc.returncode == 3 and took < 5, (took, out)  # stopped before the probe began: interrupted
    assert "interrupted" in out


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts threads in /proc")
def test_half_open_connections_neither_grow_threads_nor_block_a_scrape(known_server, tmp_path):
    srv = known_server(ttft=0.05, gap=0.01, tokens=3)
    proc, url = start_watch(known_scenario(tmp_path, srv.url), tmp_path / "runs", "--qps", "5", "--duration", "60s")
    idle = []
    try:
        scrape(url)
        scrape(url)
        time.sleep(0.3)
        before = threads_of(proc.pid)
        host, port = url.split("/")[2].rsplit(":", 1)
        for i in range(100):
            s = socket.create_connection((host, int(port)), timeout=5)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half a request
            idle.append(s)
        time.sleep(0.5)
        during = threads_of(proc.pid)
        t0 = time.monotonic()
        m = scrape(url)  # a real scrape, the 100 still open
        assert time.monotonic() - t0 < 3 and "latbench_requests_total" in m
        assert during <= before + 3, (before, during)
    finally:
        for s in idle:
            s.close()
        proc.send_signal(signal.SIGTERM)
        out = ends_within(proc, 15)[1]
    assert proc.returncode == 0, out
