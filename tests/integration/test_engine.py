"""The native engine measured against servers whose latency is known (real sockets, subprocess servers)."""

import asyncio
import threading
import time

import numpy as np
import pytest
from rich.console import Console

from loadgen.cli.display import summary_table
from loadgen.engine import native as engine_mod
from loadgen.engine.options import EngineOptions
from loadgen.records.results import Summary
from reports import load_rundir
from reports.markdown import render_markdown
from reports.report_model import get
from reports.run_report import write_report
from tests.helpers import formatted, parse, pct, run

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)


def scenario(url, phases, stream=False, extra=""):
    return f"""
    name: t
    target: {{url: "{url}", stream: {str(stream).lower()}}}
    workload: {{prompts: {{input_tokens: 16, output_tokens: 20, distinct: 10}}}}
    load:
      arrival: poisson
      phases:
{phases}
    {extra}
    """


def test_fixed_delay_server_p50_is_its_delay(tmp_path, known_server):
    srv = known_server(delay=0.05)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 5s, qps: 200}"))
    o = s["overall"]
    assert o["count"] == len(df) and o["ok"] == o["count"] > 850
    assert 0.050 <= pct(o, "latency", "p50") <= 0.053
    assert o["achieved_qps"] == pytest.approx(200, rel=0.1)
    assert pct(o, "send_lag", "p50") < 0.002


def test_streaming_ttft_itl_tpot_and_token_count(tmp_path, known_server):
    srv = known_server(ttft=0.08, gap=0.01, tokens=20)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 3s, qps: 20}", stream=True))
    o = s["overall"]
    assert o["ok"] == o["count"] > 40
    # the server sleeps at least 80 ms: below is a measurement bug, a few ms above is loopback + a busy CI host
    assert 0.080 <= pct(o, "ttft", "p50") <= 0.085
    assert pct(o, "itl", "p50") == pytest.approx(0.010, abs=0.002)
    assert pct(o, "tpot", "p50") == pytest.approx(0.010, abs=0.002)
    assert (df["output_tokens"] == 20).all() and (df["output_tokens_source"] == "usage").all()
    assert all(len(t) == 20 for t in df["token_times"])
    assert (df["first_token"] > df["first_byte"]).all()  # the role-only chunk is not a token


def test_generator_stall_shows_in_latency_not_in_service_time(tmp_path, known_server, monkeypatch):
    """Coordinated omission: when the generator cannot send for 1 s, requests due meanwhile are late.

    Latency is measured from the intended send time, so it shows the stall; service time does not.
    """
    srv = known_server(delay=0.01)
    real_run = engine_mod.NativeEngine.run

    async def stalled_run(self):
        asyncio.get_running_loop().call_later(1.0, time.sleep, 1.0)  # block the generator's loop
        return await real_run(self)

    monkeypatch.setattr(engine_mod.NativeEngine, "run", stalled_run)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 3s, qps: 100}"),)
    o = s["overall"]
    assert pct(o, "latency", "p99") > 0.8
    assert pct(o, "service_time", "p99") < 0.2
    late = df[(df["scheduled"] > 1.05) & (df["scheduled"] < 1.9)]
    assert len(late) > 50 and (late["latency"] > late["service_time"] + 0.1).all()
    assert s["generator_limited"]  # and the run says its numbers describe the generator


def test_server_stall_shows_in_latency_of_every_request_due_during_it(tmp_path, known_server):
    srv = known_server(delay=0.01, stall_at=1.5, stall_for=1.0)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 4s, qps: 100}"))
    o = s["overall"]
    assert o["ok"] == o["count"]
    assert pct(o, "latency", "p99") > 0.5
    assert pct(o, "latency", "p50") < 0.1
    # open loop: arrivals continued during the stall, each one was sent on time and waited
    during = df[(df["latency"] > 0.2)]
    assert len(during) > 40
    assert (during["send_lag"] < 0.01).mean() > 0.95


def test_in_flight_cap_drops_and_never_delays(tmp_path, known_server):
    srv = known_server(delay=0.5)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 2s, qps: 100}").replace(
        "arrival: poisson", "arrival: constant\n      max_in_flight: 10"))
    o = s["overall"]
    assert o["errors"].get("dropped", 0) > 100
    assert o["count"] == len(df) == 200  # every scheduled request has a record
    sent = df[df["error"] != "dropped"]
    # a request held for a free slot would wait for an answer (0.5 s) before it left; the ones sent left on time
    # (a tenth of that: a busy host's scheduling hiccup of 11 ms is not a request held back)
    assert len(sent) <= 10 * 5 and (sent["send_lag"] < 0.05).all()


def test_timeout_is_recorded(tmp_path, known_server):
    srv = known_server(delay=0.5)
    text = scenario(srv.url, "        - {name: main, duration: 1s, qps: 10}").replace("stream: false}",
                                                                                     "stream: false, timeout: 100ms}")
    res, s, df = run(tmp_path, text)
    assert set(df["error"]) == {"timeout"}
    assert np.allclose(df["service_time"], 0.1, atol=0.03)
    assert res.exit_code == 1  # no SLO given, but every request failed, the service's own way (a timeout)


def test_connection_refused_is_unreachable_exit_3(tmp_path):
    # the load path's own rule (the pre-flight would stop the run before any load: tests/integration/test_validity.py)
    res, s, df = run(tmp_path, scenario("http://127.0.0.1:9/v1", "        - {name: main, duration: 1s, qps: 20}"),
                     preflight=False)
    assert set(df["error"]) == {"connect"}
    assert res.exit_code == 3 and "unreachable" in " ".join(res.reasons)


def test_http_errors_are_counted_and_fail_the_error_rate_slo(tmp_path, known_server):
    srv = known_server(status=503)
    res, s, df = run(tmp_path, scenario(srv.url, "        - {name: main, duration: 1s, qps: 20}",
                                        extra="slo: ['error_rate < 1%']"))
    assert set(df["error"]) == {"http_5xx"} and (df["status"] == 503).all()
    assert s["overall"]["error_rate"] == 1.0
    assert res.exit_code == 1 and not s["passed"]
    assert s["overall"]["latency_errors_inf"]["p50"]["value"] == "inf"


def test_closed_loop_keeps_concurrency_workers_busy(tmp_path, known_server):
    srv = known_server(delay=0.05)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: c, duration: 2s, concurrency: 4}"))
    o = s["overall"]
    assert o["achieved_qps"] == pytest.approx(4 / 0.052, rel=0.15)
    assert np.allclose(df["scheduled"], df["sent"], atol=0.005)  # closed loop: scheduled = send time


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])  # the callback path and the Task path
def test_closed_loop_holds_its_concurrency_and_says_so(tmp_path, known_server, transport):
    srv = known_server(delay=0.1)
    text = scenario(srv.url, "        - {name: c, duration: 1s, concurrency: 4}").replace(
        "stream: false}", f"stream: false, transport: {transport}}}")
    res, s, df = run(tmp_path, text)
    cl = s["phases"]["c"]["closed_loop"]
    assert sorted(df["user"].unique()) == [0, 1, 2, 3] and (df.groupby("user").size() >= 8).all()
    assert cl["asked"] == 4 and cl["measure"] == "requests" and cl["held"] == cl["requests_in_flight"]
    assert 0.95 * 4 <= cl["held"] <= 4 + 1e-9 and not cl["limited"]
    assert cl["window"][0] == pytest.approx(df.groupby("user")["sent"].min().max())  # every user has sent
    assert cl["gap"]["n"] == len(df) - 4 and cl["gap"]["p50"] < 0.005
    assert not s["generator_limited"] and res.exit_code == 0, res.reasons


@pytest.mark.parametrize("opts", [EngineOptions(processes=2), EngineOptions(engine="locust", workers=2)],
                         ids=["processes", "locust"])
def test_closed_loop_users_are_numbered_within_each_sender(tmp_path, known_server, opts):
    srv = known_server(delay=0.1)
    res, s, df = run(tmp_path, scenario(srv.url, "        - {name: c, duration: 1s, concurrency: 4}"), opts=opts)
    assert res.exit_code == 0, res.reasons
    assert set(zip(df["worker"], df["user"])) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    cl = s["phases"]["c"]["closed_loop"]
    assert cl["held"] >= 0.95 * 4 and not cl["limited"] and cl["gap"]["n"] == len(df) - 4


def test_a_closed_loop_that_cannot_hold_its_concurrency_is_generator_limited(tmp_path, known_server, monkeypatch):
    """A client made slow (50 ms from each answer to its user's next request, whatever the machine) holds about a
    sixth of its 4 users against a 10 ms server: send lag cannot see it, the held figure does, in every output."""
    srv = known_server(delay=0.01)
    real_next = engine_mod.NativeEngine._closed_next

    def slow_next(self, *args):
        self._loop.call_later(0.05, real_next, self, *args)

    monkeypatch.setattr(engine_mod.NativeEngine, "_closed_next", slow_next)
    text = scenario(srv.url, "        - {name: c, duration: 1s, concurrency: 4}").replace(
        "stream: false}", "stream: false, transport: lean}")
    res, s, df = run(tmp_path, text)
    cl = s["phases"]["c"]["closed_loop"]
    assert cl["gap"]["p50"] >= 0.05 and cl["held"] < 0.6 * 4 and cl["limited"]
    assert not s["generator"]["lagging"] and s["generator_limited"] and res.exit_code == 3
    figure = f"closed loop held {cl['held']:.1f} of 4 in flight ({cl['fraction']:.0%}) in phase c"
    assert any(figure in r for r in res.reasons), res.reasons
    console = Console(width=250, record=True)
    console.print(summary_table("t", Summary.model_validate(s)))
    assert f"{cl['held']:.1f} of 4 ({cl['fraction']:.0%})" in console.export_text()
    loaded = load_rundir(res.rundir.path)
    md = render_markdown(loaded)
    assert figure in md and f"| target | c (**not held**) | 4 | {cl['held']:.1f} |" in md
    page = parse(write_report(loaded, tmp_path / "report.html"))
    cells = {c["src"]: c for c in page.cells if "/closed_loop/" in c["src"]}
    assert {"phases/c/closed_loop/held", "phases/c/closed_loop/gap/p99"} <= set(cells)
    assert all(c["text"] == formatted(get(s, src), c["fmt"]) for src, c in cells.items())
    assert "c (not held)" in "".join(page.text)


def test_unrecorded_warmup_is_stored_but_not_counted(tmp_path, known_server):
    srv = known_server(delay=0.01)
    _, s, df = run(tmp_path, scenario(srv.url, "        - {name: w, duration: 1s, qps: 30, record: false}\n"
                                               "        - {name: m, duration: 1s, qps: 30}"))
    assert (~df["recorded"]).sum() == s["phases"]["w"]["count"] > 0
    assert s["overall"]["count"] == s["phases"]["m"]["count"] == df["recorded"].sum()


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])  # the callback path and the Task path
def test_closed_loop_timeouts_are_recorded_and_workers_go_on(tmp_path, known_server, transport):
    srv = known_server(delay=0.5)
    text = scenario(srv.url, "        - {name: c, duration: 1s, concurrency: 2}").replace(
        "stream: false}", f"stream: false, timeout: 100ms, transport: {transport}}}")
    _, s, df = run(tmp_path, text)
    assert set(df["error"]) == {"timeout"}
    assert 12 <= len(df) <= 24  # two workers, a timeout every ~0.1 s each
    assert np.allclose(df["service_time"], 0.1, atol=0.03)
    assert sorted(df["seq"]) == list(range(len(df)))


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])
def test_requests_in_flight_past_the_grace_are_cancelled_records(tmp_path, known_server, transport):
    srv = known_server(delay=3.0)
    text = scenario(srv.url, "        - {name: m, duration: 1s, qps: 20}").replace(
        "arrival: poisson", "arrival: constant\n      grace: 200ms").replace(
        "stream: false}", f"stream: false, transport: {transport}}}")
    # the load path's own cancellation: the pre-flight's one request would wait out the server's 3 s first
    res, s, df = run(tmp_path, text, preflight=False)
    assert len(df) == 20 and set(df["error"]) == {"cancelled"}
    assert (df["done"] < 1.0 + 0.2 + 0.1).all()  # cancelled at the grace's end, not at the server's answer


def test_a_flush_in_progress_at_the_end_of_the_run_is_not_lost(tmp_path, monkeypatch):
    """The last periodic flush may still be writing (in its thread) when the run ends: its rows must land."""
    from loadgen.engine.base import EngineSettings, run_async
    from loadgen.engine.native import NativeEngine
    from loadgen.records.schema import Outcome, RecordWriter, read_records
    from loadgen.scenario.model import Load
    from loadgen.schedule.arrivals import arrivals, plan_phases

    class SlowWriter(RecordWriter):  # slow in the flusher's thread only, not in the run's final write
        def write(self, batch):
            if threading.current_thread() is not threading.main_thread():
                time.sleep(0.3)
            super().write(batch)

    class Instant:
        name, submit = "instant", None

        async def send(self, req, handler, out: Outcome):
            out.sent = out.first_byte = out.done = time.perf_counter()
            out.status = 200

    class Proto:
        def build(self, seq, prompt):
            return None

        def handler(self):
            return None

    class Prompts:
        def get(self, seq):
            return None

        def __len__(self):
            return 1

    monkeypatch.setattr(engine_mod, "FLUSH_ROWS", 50)
    plans = plan_phases(Load.model_validate({"phases": [{"name": "m", "duration": "0.5s", "qps": 400}]}))
    expected = sum(len(t) for t in arrivals(plans[0]))
    path = tmp_path / "r.parquet"
    engine = NativeEngine(EngineSettings(plans), Proto(), Prompts(), Instant(), SlowWriter(path))
    result = run_async(engine.run())
    table = read_records(path)
    assert result.requests == table.num_rows == expected
    assert sorted(table.column("seq").to_pylist()) == list(range(expected))
