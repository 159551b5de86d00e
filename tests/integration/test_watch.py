"""``latbench watch`` against real servers on 127.0.0.1: its /metrics, scraped and parsed with the Prometheus text
parser, against the records it wrote; and its SLO gauge when the reference server turns slow."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.analysis.buckets import BASE_BOUNDS, bucket_quantile
from loadgen.analysis.stats import nearest_rank
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
        proc.send_signal(signal.SIGINT)  # the first Ctrl-C stops the probe (stopped already); a second ends lingering
        time.sleep(0.5)  # two at once may reach Python's handler as one (a busy host: both before it runs)
        proc.send_signal(signal.SIGINT)
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
