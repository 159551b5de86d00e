"""The parts of ``latbench watch`` that need no server: bucket bounds and Prometheus' quantile, the exactness of a
threshold test made from buckets, which objectives a watch judges, the sliding window, the exporter's counts, and
the rotating writer's files."""

from __future__ import annotations

import math
import socket
import threading
import time
import urllib.request

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from loadgen.analysis.stats import nearest_rank
from loadgen.cli.main import main
from loadgen.monitoring.buckets import BASE_BOUNDS, bucket_bounds, bucket_of, bucket_quantile
from loadgen.monitoring.exposition import WatchExporter, serve
from loadgen.monitoring.window import SlidingWindow, watchable
from loadgen.records.rotate import RotatingRecordWriter, disk_bytes, read_segments, segments
from loadgen.records.schema import Outcome, RecordBuffer, read_records
from loadgen.scenario.slo import parse_slo


def batch(latencies, t_done, errors=None, tokens=0):
    """A record batch as the engine drains it: request i scheduled at done - latency, done at ``t_done[i]``."""
    buf = RecordBuffer()
    errors = errors or [""] * len(latencies)
    for i, (lat, done, err) in enumerate(zip(latencies, t_done, errors)):
        sched = done - lat
        toks = [done - 0.01 * (tokens - 1 - k) for k in range(tokens)] if tokens and not err else []
        out = Outcome(sent=sched + 0.001, first_byte=sched + 0.002, first_token=toks[0] if toks else math.nan,
                      done=done, status=0 if err else 200, error=err, output_tokens=len(toks), token_times=toks)
        buf.append(i, 0, True, sched, out, 0.0)
    return buf.drain()


def cumulative(values, bounds):
    v = np.sort(np.asarray(values))
    return [(b, float(np.searchsorted(v, b, side="right"))) for b in bounds] + [(math.inf, float(len(v)))]


@pytest.mark.parametrize("q, cum, want", [
    (0.5, [(0.1, 0), (0.2, 10), (math.inf, 10)], 0.15),  # the middle of the second bucket
    (0.5, [(0.1, 10), (math.inf, 10)], 0.05),  # interpolated from 0 in the first bucket
    (0.99, [(0.1, 5), (0.2, 5), (math.inf, 10)], 0.2),  # in +Inf: the highest finite bound
    (0.5, [(0.1, 0), (math.inf, 0)], math.nan),  # no observation
    (0.5, [(0.1, 3)], math.nan),  # no +Inf bucket
])
def test_bucket_quantile_is_prometheus_histogram_quantile(q, cum, want):
    got = bucket_quantile(q, cum)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want)


def test_slo_thresholds_become_bucket_bounds():
    slos = [parse_slo(s) for s in ("latency.p99 < 270ms", "latency.mean < 120ms", "ttft.max < 400s",
                                   "error_rate < 1%")]
    lat = bucket_bounds(slos, "latency")
    assert 0.27 in lat and 0.12 not in lat and set(BASE_BOUNDS) <= set(lat) and list(lat) == sorted(lat)
    ttft = bucket_bounds(slos, "ttft")
    assert 400.0 in ttft and ttft[-1] == 800.0  # a bound above the highest threshold
    assert bucket_bounds(slos, "itl") == BASE_BOUNDS
    assert bucket_of(0.27, lat) == (0.25, 0.27) and bucket_of(1e9, lat) == (120.0, math.inf)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.001, 2.0), min_size=1, max_size=400), st.sampled_from([50.0, 90.0, 99.0, 99.9]),
       st.floats(0.002, 1.9))
def test_a_threshold_on_a_bound_makes_the_bucket_test_exact(samples, p, threshold):
    """histogram_quantile(q) > T exactly when the nearest-rank percentile is > T, once T is a bucket bound."""
    bounds = bucket_bounds([parse_slo(f"latency.p{p:g} < {threshold * 1e3!r}ms")], "latency")
    t = parse_slo(f"latency.p{p:g} < {threshold * 1e3!r}ms").threshold
    assert t in bounds
    exact = nearest_rank(np.sort(samples), p)
    estimate = bucket_quantile(p / 100, cumulative(samples, bounds))
    if exact != t:  # a sample exactly on the threshold is the one tie the buckets cannot split
        assert (estimate > t) == (exact > t), (exact, estimate, t)


def test_watch_judges_unscoped_and_target_objectives_only():
    slos = [parse_slo(s) for s in ("latency.p99 < 300ms", "burst: latency.p99 < 800ms", "a: ttft.p50 < 1s",
                                   "b/steady: ttft.p50 < 1s", "achieved_qps >= 90", "goodput >= 99%")]
    keep, skip = watchable(slos, "a")
    assert [s.expr for s in keep] == ["latency.p99 < 300ms", "a: ttft.p50 < 1s", "goodput >= 99%"]
    assert {s.expr for s, _ in skip} == {"burst: latency.p99 < 800ms", "achieved_qps >= 90"}


def test_the_window_forgets_what_left_it_and_judges_like_a_run():
    slos = [parse_slo("latency.p99 < 200ms"), parse_slo("error_rate < 10%")]
    w = SlidingWindow(5.0, slos)
    state = w.evaluate(1.0)
    assert state.count == 0 and all(math.isnan(s.holding) for s in state.slos)  # nothing seen: unknown
    w.add(batch([0.5] * 10, np.linspace(1, 2, 10)))  # slow, done at 1..2 s
    w.add(batch([0.05] * 100, np.linspace(4.01, 9, 100), errors=[""] * 95 + ["timeout"] * 5))
    at5 = w.evaluate(5.0)
    assert at5.count == 10 + 20 and at5.slos[0].holding == 0.0 and at5.slos[0].value == pytest.approx(0.5)
    at9 = w.evaluate(9.0)  # the slow ones left the window
    assert at9.count == 100 and at9.errors == 5
    assert at9.slos[0].holding == 1.0 and at9.slos[0].value == pytest.approx(0.05)
    assert at9.slos[1].value == pytest.approx(0.05) and at9.slos[1].holding == 1.0
    assert at9.send_lag_p99 == pytest.approx(0.001) and at9.lagging == 0.0


def test_exporter_counts_what_it_was_given():
    ex = WatchExporter("s", 60.0)
    slos = [parse_slo("latency.p99 < 270ms")]
    ex.add_target("a", slos, 2.0, lambda: 10.0)
    lat = [0.1, 0.2, 0.3, 0.26]
    ex.observe("a", batch(lat + [0.1], [5.0] * 5, errors=[""] * 4 + ["http_5xx"], tokens=3))
    fams = {f.name: f for f in text_string_to_metric_families(ex.render().decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    lab = (("phase", "watch"), ("scenario", "s"), ("target", "a"))
    assert samples[("latbench_latency_seconds_count", lab)] == 4
    assert samples[("latbench_latency_seconds_bucket", tuple(sorted(lab + (("le", "0.27"),))))] == 3
    assert samples[("latbench_latency_seconds_sum", lab)] == pytest.approx(sum(lat))
    assert samples[("latbench_itl_seconds_count", lab)] == 4 * 2  # two gaps per 3-token stream
    assert samples[("latbench_tpot_seconds_count", lab)] == 4
    err = tuple(sorted(lab + (("error", "http_5xx"), ("outcome", "error"))))
    assert samples[("latbench_requests_total", err)] == 1
    assert samples[("latbench_slo_holding", tuple(sorted(lab + (("slo", "latency.p99 < 270ms"),))))] == 0.0
    assert samples[("latbench_window_requests", lab)] == 5


def test_rotation_keeps_the_newest_files_and_every_row_until_deleted(tmp_path):
    now = [0.0]
    w = RotatingRecordWriter(tmp_path, every_s=10.0, keep=2, clock=lambda: now[0])
    sizes = []
    for k in range(7):  # a batch every 5 s: a new file every second batch
        w.write(batch([0.1] * 20, [k * 5.0 + 1] * 20))
        now[0] += 5.0
        sizes.append(disk_bytes(tmp_path))
        assert len(segments(tmp_path)) <= 2
    # the open file's rows are held for one row group, but a run killed now still has them: the partial stream
    assert read_records(tmp_path / "requests.parquet").num_rows == 20
    w.close()
    assert [p.name for p in segments(tmp_path)] == ["requests-000002.parquet", "requests-000003.parquet"]
    assert w.rows == 140 and w.deleted_rows == 40 and w.deleted_segments == 1
    assert read_segments(tmp_path).num_rows == 100  # two closed files of 40 and the open one of 20
    assert not (tmp_path / "requests.parquet.partial").exists()
    assert max(sizes) <= 4 * max(p.stat().st_size for p in segments(tmp_path))
    assert all(pq.ParquetFile(p).metadata.num_row_groups == 1 for p in segments(tmp_path))


def test_watch_refuses_a_load_test_rate_at_someone_elses_server_and_a_taken_port(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text('name: s\ntarget: {url: "https://api.example.com/v1"}\nload: {phases: [{name: a, duration: 1s, '
                  'qps: 1}]}\n')
    res = CliRunner().invoke(main, ["watch", str(sc), "--qps", "50", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--force-rate" in res.output and not any(tmp_path.glob("*-watch"))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with taken:
        res = CliRunner().invoke(main, ["watch", str(sc), "--target", "http://127.0.0.1:9/v1", "--metrics-port",
                                        str(taken.getsockname()[1]), "--duration", "1s", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "cannot serve metrics on 127.0.0.1:" in res.output, res.output


def closed_within(sock: socket.socket, limit_s: float) -> bool:
    """True once the server has closed ``sock`` (end of file, or a reset), within ``limit_s``."""
    sock.settimeout(limit_s)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_metrics_server_drops_half_open_connections_and_still_answers_a_scrape():
    ex = WatchExporter("s", 60.0)
    ex.add_target("a", [parse_slo("latency.p99 < 270ms")], 2.0, lambda: 10.0)
    url, stop = serve(ex, "127.0.0.1", 0, read_timeout_s=0.5, max_connections=8)
    port = int(url.split(":")[2].split("/")[0])
    idle = []
    try:
        assert b"latbench_requests_total" in urllib.request.urlopen(url, timeout=5).read()
        threads = threading.active_count()  # this process's, the server's included (its loop, one render thread)
        t0 = time.monotonic()
        for i in range(100):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # half a request; the others send nothing
            idle.append(s)
        assert threading.active_count() <= threads + 1  # a second render thread at most, never one a connection
        assert b"latbench_requests_total" in urllib.request.urlopen(url, timeout=5).read()  # a scrape still answers
        assert all(closed_within(s, 3.0) for s in idle)
        took = time.monotonic() - t0
        assert 0.4 <= took < 3.0, took  # the last ones held until the read timeout, not for good
        late = socket.create_connection(("127.0.0.1", port), timeout=5)
        t1 = time.monotonic()
        assert closed_within(late, 3.0) and 0.4 <= time.monotonic() - t1 < 2.5  # alone, dropped after 0.5 s
        late.close()
    finally:
        for s in idle:
            s.close()
        stop()
