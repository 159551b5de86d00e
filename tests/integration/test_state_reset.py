"""``target.reset: prefix_cache``: the engine's caches emptied before each run and repetition, and the summary says
what happened, against real servers on 127.0.0.1: the bundled reference server (its caches really empty: a
request repeated after a reset is a miss again, in its own counters), the vLLM-like server without dev mode
(404: the cache carried over) and started by latbench as a command (dev mode set for it), and an SGLang-like
server whose ``/flush_cache`` refuses while busy, then flushes."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from loadgen.errors import ScenarioError
from loadgen.fetch import fetch
from loadgen.records.results import Meta, Summary
from loadgen.run import reset
from loadgen.run.capacity import run_capacity
from loadgen.run.reset import reset_state
from loadgen.run.targets import free_port
from loadgen.run.watch import WatchSettings, watch_scenario
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import Repeat
from loadgen.scenario.reset import Reset
from loadgen.scenario.slo import parse_slo
from reports import write_outputs
from tests.helpers import parse, run, start_reference, write_scenario
from tests.vllm_like import VllmLikeServer

PREFIX = "You are a careful assistant. Answer briefly and say nothing you do not know. " * 3  # 240 bytes: 15 blocks


def counter(root: str, name: str) -> float:
    """A reference server counter's total (``refserver:<name>_total``), from its /metrics."""
    text = fetch("GET", root + "/metrics").body.decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"refserver:{name}_total"))


def chat(root: str, text: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    assert fetch("POST", root + "/v1/chat/completions", json=body, deadline_s=60).status == 200


@pytest.fixture(scope="module")
def refserver(weights_dir):
    """The reference server (optimized: result, prefix and image caches) in a process of its own."""
    port = free_port()
    proc = start_reference(port, "--cache-dir", weights_dir)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_the_reference_servers_caches_really_empty(refserver):
    chat(refserver, PREFIX + "first question")
    chat(refserver, PREFIX + "first question")  # the same request: a result-cache hit
    hits, prefix_hits = counter(refserver, "cache_hits"), counter(refserver, "prefix_cache_hits")
    chat(refserver, PREFIX + "second question")  # the same prefix: its blocks are found
    assert counter(refserver, "prefix_cache_hits") >= prefix_hits + 14 * 16

    out = reset_state(Reset(what="prefix_cache"), refserver + "/v1")  # the engine told by its /metrics names
    assert (out.done, out.status, out.engine, out.found_by) == (True, 200, "refserver", "metrics")
    assert out.url == refserver + "/reset_prefix_cache" and out.text.startswith("prefix cache reset before the run")

    misses, prefix_hits = counter(refserver, "cache_misses"), counter(refserver, "prefix_cache_hits")
    chat(refserver, PREFIX + "first question")  # was cached whole, and its prefix: a miss of both again
    assert counter(refserver, "cache_misses") == misses + 1 and counter(refserver, "cache_hits") == hits
    assert counter(refserver, "prefix_cache_hits") == prefix_hits


def _scenario(url: str, reset: str) -> str:
    """2 prompts, 4 requests: A B A B, half a second apart (a prompt's repeat comes a second after it)."""
    return f"""
    name: reset
    target: {{url: "{url}", stream: false{reset}}}
    workload: {{prompts: {{input_tokens: 64, output_tokens: 2, distinct: 2}}}}
    load:
      arrival: constant
      host_wait_limit: 1  # what is checked is which requests the server found cached, not their timing:
      send_lag_threshold: 1s  # a busy host makes no run here invalid
      phases: [{{name: main, duration: 2s, qps: 2}}]
    """


@pytest.mark.parametrize("reset", [True, False])
def test_each_repetition_against_one_server_starts_cold_only_with_the_reset(tmp_path, refserver, reset):
    assert fetch("POST", refserver + "/reset_prefix_cache").ok  # what the other case left
    misses = counter(refserver, "cache_misses")
    res, _, _ = run(tmp_path, _scenario(refserver + "/v1", ", reset: prefix_cache" if reset else ""),
                    repeat=Repeat(runs=2), preflight=False)
    assert res.exit_code == 0, res.reasons
    # 2 distinct prompts, 4 requests a run: with the reset both runs miss twice; without, the second never misses
    assert counter(refserver, "cache_misses") - misses == (4 if reset else 2)
    meta = Meta.model_validate_json((res.rundir.path / "meta.json").read_text())
    for tr, entry in zip(res.targets, meta.targets):
        summary = Summary.model_validate_json((res.rundir.path / tr.dir / "summary.json").read_text())
        if not reset:
            assert summary.reset is None and entry.reset is None
            continue
        assert summary.reset.done and summary.reset.status == 200 and summary.reset.engine == "refserver"
        assert entry.reset == summary.reset and summary.reset.at >= meta.targets[0].wall_start - 60


def test_a_vllm_without_dev_mode_answers_404_and_the_summary_says_the_cache_carried_over(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    srv = VllmLikeServer(ttft=0.005, gap=0.001, tokens=2).start()
    try:
        res, summary, _ = run(tmp_path, _scenario(srv.root + "/v1", ", reset: prefix_cache").replace(
            "stream: false", "stream: true"), preflight=False)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons  # a reset that cannot be made never fails the run
    r = summary["reset"]
    assert (r["done"], r["status"], r["engine"], r["found_by"]) == (False, 404, "vllm", "metrics")
    expected = ("prefix cache carried over from earlier runs (reset not available: vLLM answered HTTP 404 to "
                "POST /reset_prefix_cache (vLLM serves it only with VLLM_SERVER_DEV_MODE=1))")
    assert r["text"] == expected
    write_outputs(res.rundir.path)
    assert f"- ⚠️ target: {expected}" in (res.rundir.path / "summary.md").read_text()
    page = parse(res.rundir.path / "report.html")
    assert page.text.count(expected) == 2  # the warning above the section, and its "state reset" row


def test_a_vllm_latbench_starts_gets_dev_mode_and_its_cache_is_reset(tmp_path):
    text = f"""
    name: reset-command
    target:
      command:
        run: [{json.dumps(__import__("sys").executable)}, -m, tests.vllm_like, --port, "{{port}}", --ttft, "0.005"]
        url: "http://127.0.0.1:{{port}}/v1"
        ready_url: "http://127.0.0.1:{{port}}/v1/models"
      reset: prefix_cache
    workload: {{prompts: {{input_tokens: 16, output_tokens: 16, distinct: 2}}}}
    load: {{arrival: constant, phases: [{{name: main, duration: 1s, qps: 4}}]}}
    """
    res, summary, _ = run(tmp_path, text, preflight=False)
    assert res.exit_code == 0, res.reasons
    r = summary["reset"]
    assert (r["done"], r["status"], r["engine"]) == (True, 200, "vllm"), r


class SglangLike(VllmLikeServer):
    """SGLang's names: ``sglang:`` metrics, ``owned_by: sglang``, and ``POST /flush_cache``, which answers 400 while
    requests run (here: its first ``busy`` calls) and 200 with a sentence once it flushed."""

    def __init__(self, busy: int = 1, **kw):
        super().__init__(**kw)
        self.busy, self.flushes, self.auth = busy, 0, None

    async def models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model",
                                                              "owned_by": "sglang"}]})

    async def metrics(self, request):
        return web.Response(text='sglang:num_running_reqs{model_name="tiny"} 0.0\n', content_type="text/plain")

    async def flush_cache(self, request):
        self.flushes += 1
        self.auth = request.headers.get("Authorization")
        if self.flushes <= self.busy:
            return web.Response(status=400, text="Cache not flushed. Please check backend logs for more details. "
                                                 "(When there are running or waiting requests, the operation will "
                                                 "not be performed.)")
        self.seen.clear()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/flush_cache", self.flush_cache)


def test_sglangs_flush_cache_is_asked_again_while_busy_then_flushes(monkeypatch):
    monkeypatch.setattr(reset, "BUSY_RETRY_S", 1.0)
    srv = SglangLike(busy=2).start()
    try:
        out = reset_state(Reset(what="prefix_cache"), srv.root + "/v1", headers={"Authorization": "Bearer s3cret"})
        assert (out.done, out.status, out.engine, out.found_by) == (True, 200, "sglang", "metrics")
        assert srv.flushes == 3 and out.url == srv.root + "/flush_cache"
        assert srv.auth == "Bearer s3cret" and "s3cret" not in out.model_dump_json()  # sent, never written
        srv.busy = 10**6  # busy for good: after the retries, the cache carried over, and the run goes on
        out = reset_state(Reset(what="prefix_cache", url=srv.root + "/flush_cache"), srv.root + "/v1")
        assert (out.done, out.status, out.found_by) == (False, 400, "given")
        assert out.text.startswith("prefix cache carried over from earlier runs (reset failed: the server answered "
                                   "HTTP 400 to POST /flush_cache for")
    finally:
        srv.stop()


class SglangWithoutMetrics(SglangLike):
    """SGLang behind something that answers /metrics with a page, not Prometheus text."""

    async def metrics(self, request):
        return web.Response(text="<html><body>sglang: metrics are elsewhere</body></html>", content_type="text/html")


def test_without_prometheus_text_the_model_lists_owner_names_the_engine():
    srv = SglangWithoutMetrics(busy=0).start()
    try:
        out = reset_state(Reset(what="prefix_cache"), srv.root + "/v1")
    finally:
        srv.stop()
    assert (out.done, out.status, out.engine, out.found_by) == (True, 200, "sglang", "models"), out


class TgiLike(SglangLike):
    """TGI's metric names, and no endpoint that empties its prefix cache."""

    async def metrics(self, request):
        return web.Response(text="tgi_request_count 0\n", content_type="text/plain")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)


def test_an_engine_without_a_reset_and_one_latbench_cannot_tell_are_said_so():
    srv = TgiLike().start()
    try:
        tgi = reset_state(Reset(what="prefix_cache"), srv.root + "/v1")
    finally:
        srv.stop()
    assert (tgi.done, tgi.engine, tgi.status, tgi.url) == (False, "tgi", None, None)
    assert tgi.text == ("prefix cache carried over from earlier runs (reset not available: TGI has no endpoint that "
                        "empties its prefix cache)")
    unknown = reset_state(Reset(what="prefix_cache"), "http://127.0.0.1:9/v1")  # nothing listens: no names at all
    assert not unknown.done and unknown.engine is None and "latbench cannot tell the engine" in unknown.text


@pytest.mark.parametrize("reset, expected", [
    ("kv", "s.yaml:3:47: target.reset.what: Input should be 'prefix_cache', got 'kv'"),
    ("{what: prefix_cache, url: ftp://x}", "s.yaml:3:73: target.reset.url: expected an http:// or https:// URL"),
    ("{what: prefix_cache, when: always}", "s.yaml:3:68: target.reset.when: unknown field"),
])
def test_a_bad_reset_is_named_with_its_line_before_anything_is_sent(tmp_path, reset, expected):
    text = f"""name: x
load: {{phases: [{{name: a, duration: 1s, qps: 1}}]}}
target: {{url: "http://127.0.0.1:9/v1", reset: {reset}}}
"""
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, text))
    assert [err[err.index("s.yaml:"):][: len(expected)] for err in e.value.errors] == [expected], e.value.errors
    assert load_scenario(write_scenario(tmp_path, text.replace(reset, "prefix_cache"))).scenario.target.reset.what \
        == "prefix_cache"


def test_each_capacity_step_starts_from_an_empty_cache(tmp_path, refserver):
    loaded = load_scenario(write_scenario(tmp_path, _scenario(refserver + "/v1", ", reset: prefix_cache")))
    misses = counter(refserver, "cache_misses")
    rd, found = run_capacity(loaded, [parse_slo("latency.p99 < 5s")], 1.0, 2.0, 1.0, 0.0, out=str(tmp_path / "runs"),
                             preflight=False)
    meta = Meta.model_validate_json((rd.path / "meta.json").read_text())
    sent = 0
    for entry in meta.targets:  # one entry a step (1 req/s, then 2: prompt A, then A and B)
        summary = Summary.model_validate_json((rd.path / entry.dir / "summary.json").read_text())
        assert summary.reset.done and entry.reset == summary.reset
        sent += min(2, summary.overall.count)  # the prompts a step sent: each a miss after its reset
    assert len(meta.targets) == len(found.steps) >= 1
    assert counter(refserver, "cache_misses") - misses == sent


def test_a_reference_server_latbench_starts_is_reset_at_its_own_root(tmp_path):
    text = _scenario("x", ", reset: prefix_cache").replace('url: "x"', "reference: {arch: optimized, model: tiny}")
    res, summary, _ = run(tmp_path, text, preflight=False)
    assert res.exit_code == 0, res.reasons
    r = summary["reset"]
    assert (r["done"], r["status"], r["engine"], r["found_by"]) == (True, 200, "refserver", "managed")
    assert r["url"].endswith("/reset_prefix_cache") and "/v1" not in r["url"]


def test_a_watch_resets_once_before_its_probe(tmp_path, refserver):
    loaded = load_scenario(write_scenario(tmp_path, _scenario(refserver + "/v1", ", reset: prefix_cache")))
    for k in range(2):  # the second watch finds what the first left cached: its reset empties it
        misses = counter(refserver, "cache_misses")
        watched = watch_scenario(loaded, WatchSettings(qps=2, duration=2.0, port=free_port()),
                                 out=str(tmp_path / f"w{k}"), preflight=False)
        (wt,) = watched.targets
        assert wt.summary.reset.done and wt.summary.reset.engine == "refserver"
        meta = Meta.model_validate_json((watched.rundir.path / "meta.json").read_text())
        assert meta.targets[0].reset == wt.summary.reset
        assert counter(refserver, "cache_misses") - misses == 2  # A and B, once each: the rest are hits
