"""Client-side aborts (workload.cancel) against servers of known timing and against the reference server."""

from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest

from loadgen.engine.cancel import chosen
from loadgen.scenario.model import Cancel
from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig
from tests.helpers import pct, run

TTFT, GAP, TOKENS = 0.08, 0.01, 20


def scenario(url, cancel: str, transport: str = "auto", phases="        - {name: main, duration: 2s, qps: 20}",
             workload="prompts: {input_tokens: 8, output_tokens: 20, distinct: 10}", extra=""):
    return f"""
    name: c
    target: {{url: "{url}", stream: true, transport: {transport}}}
    workload:
      {workload}
      cancel: {cancel}
    load:
      arrival: constant
      phases:
{phases}
    {extra}
    """


def test_the_chosen_share_is_the_fraction_and_the_same_every_time():
    c = Cancel(fraction=0.1, after=0.5)
    picks = np.array([chosen(i, c) for i in range(10_000)])
    assert abs(picks.mean() - 0.1) < 0.001
    for start in range(0, 10_000, 100):  # evenly spread: any 100 consecutive requests hold 10 +- 2
        assert 8 <= picks[start : start + 100].sum() <= 12
    assert [chosen(i, c, seed=3) for i in range(50)] == [chosen(i, c, seed=3) for i in range(50)]
    assert not any(chosen(i, None) for i in range(100))


@pytest.mark.parametrize("transport", ["lean", "aiohttp"])  # the callback path and the Task path
def test_aborted_after_a_time_is_its_own_class(tmp_path, known_server, transport):
    """Half the requests are aborted 130 ms after they were sent (5 tokens in): recorded as aborted, not errors,
    left out of the latency distributions, counted in aborted_rate; the others are untouched."""
    srv = known_server(ttft=TTFT, gap=GAP, tokens=TOKENS)
    _, s, df = run(tmp_path, scenario(srv.url, "{fraction: 0.5, after: 130ms}", transport,
                                      extra="slo: [error_rate < 1%, latency.p50 > 250ms]"))
    o = s["overall"]
    want = np.array([chosen(int(q), Cancel(fraction=0.5, after=0.13)) for q in df["seq"]])
    assert ((df["error"] == "aborted") == want).all()
    ab = df[want]
    assert o["aborted"] == len(ab) > 10 and o["errors"] == {} and o["error_rate"] == 0
    assert o["aborted_rate"] == pytest.approx(len(ab) / o["count"])
    assert o["ok"] + o["aborted"] == o["count"]
    assert (abs(ab["done"] - ab["sent"] - 0.13) < 0.02).all()  # a loop timer on a busy host: late by a few ms
    # tokens sent at 80..120 ms came (fewer when the host is busy), never the whole answer
    assert ((ab["output_tokens"] >= 1) & (ab["output_tokens"] <= 6)).all() and ab["output_tokens"].median() >= 4
    assert o["metrics"]["latency"]["n"] == o["ok"]  # the aborted ones are not latencies
    assert o["metrics"]["latency"]["min"] > 0.25 and pct(o, "latency", "p50") > 0.25  # only whole streams
    assert all(r["passed"] for r in s["slo"])


def test_aborted_after_tokens(tmp_path, known_server):
    srv = known_server(ttft=TTFT, gap=GAP, tokens=TOKENS)
    _, s, df = run(tmp_path, scenario(srv.url, "{fraction: 1.0, after_tokens: 3}",
                                      phases="        - {name: main, duration: 1s, qps: 10}"))
    assert (df["error"] == "aborted").all() and s["overall"]["aborted"] == len(df) >= 9
    # aborted as soon as the third token chunk arrived: at 80 + 2 x 10 ms, before the fourth
    gone = df["done"] - df["first_token"]
    assert ((gone > 1.5 * GAP) & (gone < 3 * GAP)).all()
    assert (df["output_tokens"] == 3).all()
    assert s["overall"]["metrics"]["latency"]["n"] == 0


def _gauge(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith(f"refserver:{name}{{")))


def test_reference_server_frees_the_slot_of_an_aborted_request(tmp_path, tmp_path_factory):
    """Four clients ask for 1500 tokens each and abort after 300 ms: the reference server's running gauge
    shows the slots freed as soon as the run is over, and it generated a small part of what was asked."""
    cfg = ServerConfig.from_preset("batching", model="tiny", backend="numpy",
                                   cache_dir=str(tmp_path_factory.getbasetemp() / "weights-cache"))
    with BackgroundServer(cfg) as srv:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(srv.url + "/health", timeout=5).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        _, s, df = run(tmp_path, scenario(srv.url + "/v1", "{fraction: 1.0, after: 300ms}",
                                          phases="        - {name: main, duration: 1500ms, concurrency: 4}",
                                          workload="prompts: {input_tokens: 4, output_tokens: 1500}\n"
                                                   "      ignore_eos: true"))
        t_end = time.monotonic()
        while _gauge(srv.url, "num_requests_running") > 0 and time.monotonic() < t_end + 2:
            time.sleep(0.02)
        freed_after = time.monotonic() - t_end
        assert _gauge(srv.url, "num_requests_running") == 0 and freed_after < 1.0
        assert (df["error"] == "aborted").all() and len(df) >= 8
        assert (abs(df["done"] - df["sent"] - 0.3) < 0.05).all()
        assert (df["output_tokens"] < 1500).all()
        print(f"{len(df)} requests aborted at 300 ms; running gauge 0 within {freed_after * 1e3:.0f} ms of the end")
