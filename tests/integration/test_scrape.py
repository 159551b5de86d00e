"""The server-metrics scraper against real aiohttp servers on 127.0.0.1, and the report's use of its CSV."""

import asyncio
import csv
import time

import pandas as pd
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from loadgen.engine.scrape import FRESH_S, MetricsScraper, canonical_labels, parse_samples, rebase
from reports.server import panel_series


class PromServer:
    """Serves refserver-style metrics; every scrape first records a known amount of work."""

    def __init__(self, status=200, delay=0.0):
        self.status, self.delay = status, delay
        r = self.registry = CollectorRegistry()
        lb = ["backend"]
        self.hits = Counter("refserver:cache_hits", "h", lb, registry=r).labels("test")
        self.misses = Counter("refserver:cache_misses", "m", lb, registry=r).labels("test")
        self.batch = Histogram("refserver:batch_size", "b", lb, buckets=(1, 2, 4, 8), registry=r).labels("test")
        self.queue = Histogram("refserver:request_queue_time_seconds", "q", lb, registry=r).labels("test")
        self.gpu = Gauge("refserver:gpu_utilization_percent", "g", lb, registry=r).labels('te"st')
        self.requests = 0

    async def metrics(self, request):
        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.Response(status=self.status, text="<html>not here</html>")
        self.hits.inc(3), self.misses.inc(1)
        self.batch.observe(4), self.batch.observe(4)
        self.queue.observe(0.01)
        self.gpu.set(50)
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def __aenter__(self):
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/metrics"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


async def scrape_for(url, path, seconds, interval=0.2):
    s = MetricsScraper(interval=interval, timeout=1.0)
    t0 = time.perf_counter()
    await s.start(url, path, t0)
    await asyncio.sleep(seconds)
    t = time.perf_counter()
    await s.stop()
    return s, time.perf_counter() - t


def test_scrapes_prometheus_text_into_csv_and_the_report_derives_rates(tmp_path):
    path = tmp_path / "t" / "server_metrics.csv"

    async def go():
        async with PromServer() as srv:
            s, stop_s = await scrape_for(srv.url, path, 1.1)
            return srv, s, stop_s

    srv, s, stop_s = asyncio.run(go())
    assert s.note is None and s.scrapes >= 4 and srv.requests == s.scrapes and stop_s < 0.5
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["time", "metric", "labels", "value"]
    df = pd.read_csv(path, keep_default_na=False)
    assert set(df["metric"]) >= {"refserver:cache_hits_total", "refserver:batch_size_count", "refserver:batch_size_sum",
                                 "refserver:batch_size_bucket", "refserver:gpu_utilization_percent"}
    assert not df["metric"].str.endswith("_created").any()
    times = sorted(set(df["time"]))
    # every interval, from the start; then once more as it stops (the state at the end of the run)
    assert len(times) == s.scrapes and 0 < times[0] < 0.5 and all(0.1 < b - a < 0.4 for a, b in zip(times, times[1:-1]))
    assert times[-1] == pytest.approx(1.1, abs=0.1) and times[-1] - times[-2] > FRESH_S
    hits = df[df["metric"] == "refserver:cache_hits_total"]
    assert (list(hits["value"]) == [3.0 * (i + 1) for i in range(s.scrapes)]
            and set(hits["labels"]) == {'backend="test"'})
    assert set(df.loc[df["metric"] == "refserver:gpu_utilization_percent", "labels"]) == {'backend="te\\"st"'}
    panels = {title: series.dropna() for title, _, series in panel_series(df)}
    assert set(panels) == {"batch size", "queue time", "cache hit rate", "GPU utilization"}
    assert (panels["batch size"] == 4.0).all() and len(panels["batch size"]) == s.scrapes - 1
    assert panels["queue time"].round(6).eq(10.0).all()  # ms
    assert (panels["cache hit rate"] == 75.0).all() and (panels["GPU utilization"] == 50.0).all()


@pytest.mark.parametrize("kind", ["404", "refused", "garbage"])
def test_a_target_without_metrics_is_noted_once_and_left_alone(tmp_path, kind):
    path = tmp_path / "server_metrics.csv"

    async def go():
        if kind == "refused":
            return await scrape_for("http://127.0.0.1:9/metrics", path, 0.6), None
        srv = PromServer(status=404)
        if kind == "garbage":
            srv.metrics = _garbage
        async with srv:
            return await scrape_for(srv.url, path, 0.8), srv

    async def _garbage(request):
        return web.Response(text="this is { not prometheus", content_type="text/plain")

    (s, stop_s), srv = asyncio.run(go())
    assert s.note and s.scrapes == 0 and not path.exists() and stop_s < 0.5
    assert {"404": "HTTP 404", "refused": "connection refused", "garbage": "not Prometheus"}[kind] in s.note
    if srv is not None and kind == "404":
        assert srv.requests == 1  # noted once, then no longer asked


def test_a_slow_metrics_endpoint_never_delays_stop(tmp_path):
    async def go():
        async with PromServer(delay=1.5) as srv:
            return await scrape_for(srv.url, tmp_path / "m.csv", 0.3)

    s, stop_s = asyncio.run(go())
    assert stop_s < 0.5 and s.scrapes == 0


def test_parse_and_canonical_labels():
    assert canonical_labels({"b": "2", "a": 'x"y\n'}) == 'a="x\\"y\\n",b="2"'
    text = '# TYPE x counter\nx_total{k="v"} 2\n# TYPE h histogram\nh_bucket{le="+Inf"} 1\nh_count 1\nh_sum 0.5\n'
    assert parse_samples(text) == [("x_total", 'k="v"', 2.0), ("h_bucket", 'le="+Inf"', 1.0), ("h_count", "", 1.0),
                                   ("h_sum", "", 0.5)]


def test_t0_may_be_read_from_the_engine_once_it_starts(tmp_path):
    path = tmp_path / "m.csv"
    clock = {"t0": None}

    async def go():
        async with PromServer() as srv:
            s = MetricsScraper(interval=0.1)
            await s.start(srv.url, path, lambda: clock["t0"])
            await asyncio.sleep(0.35)
            assert not path.exists()
            clock["t0"] = time.perf_counter()
            await asyncio.sleep(0.35)
            await s.stop()
            return s

    s = asyncio.run(go())
    times = sorted(set(pd.read_csv(path)["time"]))
    assert s.scrapes == len(times) >= 2 and 0 <= times[0] < 0.2


def test_a_long_scrape_is_thinned_to_its_bound_and_rebased_onto_the_run(tmp_path):
    """``max_scrapes`` (a watch's bound): older scrapes thinned, the first and the newest kept, counters whole;
    :func:`rebase` moves the times onto the run's t0 and keeps only the last scrape before it."""
    path = tmp_path / "server_metrics.csv"

    async def go():
        async with PromServer() as srv:
            s = MetricsScraper(interval=0.05, timeout=1.0, max_scrapes=4)
            await s.start(srv.url, path, time.perf_counter())
            await asyncio.sleep(0.8)
            await s.stop()
            return s

    s = asyncio.run(go())
    df = pd.read_csv(path, keep_default_na=False)
    times = sorted(set(df["time"]))
    assert s.scrapes >= 10 and 3 <= len(times) <= 4 and times[0] < 0.05, (s.scrapes, times)
    hits = df[df["metric"] == "refserver:cache_hits_total"].sort_values("time")["value"].tolist()
    assert hits[-1] == 3 * s.scrapes and hits == sorted(hits)  # the newest scrape holds every hit counted
    rebase(path, times[1] + 0.01)  # the run began just after the second scrape kept
    after = sorted(set(pd.read_csv(path)["time"]))
    assert after[0] == pytest.approx(-0.01, abs=1e-3) and len(after) == len(times) - 1
    assert after[1:] == pytest.approx([t - times[1] - 0.01 for t in times[2:]], abs=1e-3)
