"""Target URLs as users write them (issue 13, item 8): a base URL with a query string (Azure's
``?api-version=``) gets its paths before the query, which is kept, on every transport; a URL latbench cannot
send to is a validation error, not a run of failures."""

from __future__ import annotations

import pytest

from loadgen.errors import ScenarioError, UsageError
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from tests.helpers import run, write_scenario
from tests.servers import KnownServer


@pytest.fixture(scope="module")
def server():
    srv = KnownServer(delay=0.005).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
def test_paths_go_before_the_query_which_is_kept(tmp_path, server, transport):
    server.queries.clear()
    res, summary, frame = run(tmp_path, f"""
    name: azure
    target: {{url: "{server.url}?api-version=2024-02-01", stream: false, transport: {transport}}}
    load:
      arrival: constant
      phases: [{{name: main, duration: 500ms, qps: 10}}]
    """)
    assert set(frame["error"]) == {""} and len(frame) == 5, frame["error"].tolist()
    assert summary["model"] == "known"  # /v1/models?api-version=... answered too
    assert server.queries and set(server.queries) == {"api-version=2024-02-01"}


def test_a_path_with_its_own_query_merges_with_the_base_query(tmp_path, server):
    server.queries.clear()
    res, summary, frame = run(tmp_path, f"""
    name: http
    target:
      url: "{server.url}?api-version=1"
      api: http
      request: {{method: POST, path: "/chat/completions?n={{seq}}", body: {{model: m, messages: []}}}}
    load:
      arrival: constant
      phases: [{{name: main, duration: 300ms, qps: 10}}]
    """)
    assert set(frame["error"]) == {""}
    # the pre-flight's one minimal request (seq 0, not recorded) reached the server too
    assert sorted(server.queries) == sorted(["api-version=1&n=0"] + [f"api-version=1&n={i}" for i in range(3)])


@pytest.mark.parametrize("url", ["127.0.0.1:8000/v1", "ftp://127.0.0.1/v1", "http:///v1"])
def test_a_url_latbench_cannot_send_to_is_a_validation_error(tmp_path, url):
    path = write_scenario(tmp_path, f"""
    name: bad
    target: {{url: "{url}"}}
    load: {{phases: [{{name: main, duration: 1s, qps: 1}}]}}
    """)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    assert ":3:" in e.value.errors[0] and "target.url" in e.value.errors[0]


def test_a_bad_target_flag_is_a_usage_error(tmp_path):
    path = write_scenario(tmp_path, """
    name: flag
    target: {url: "http://127.0.0.1:9/v1"}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    with pytest.raises(UsageError, match="--target"):
        run_scenario(load_scenario(path), out=str(tmp_path / "runs"), target_url="localhost:8000/v1")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
@pytest.mark.parametrize("api", ["http", "openai-chat", "anthropic-messages", "openai-responses", "rerank",
                                 "kserve-v2", "triton-generate"])
def test_a_redirect_is_an_error_on_every_transport_never_a_success(tmp_path, transport, api):
    """Issue 13, item 11: with api: http the lean transport recorded a 301 as a success (error_rate < 1% passed),
    while aiohttp followed it. No transport follows one now: every 3xx is http_3xx, and the objective fails."""
    from tests.bad_servers import BadServer

    with BadServer() as srv:
        res, summary, frame = run(tmp_path, f"""
        name: redirect
        target: {{url: "{srv.url('redirect')}", api: {api}, stream: false, transport: {transport}, model: m}}
        load:
          arrival: constant
          phases: [{{name: main, duration: 300ms, qps: 10}}]
        slo: ["error_rate < 1%"]
        """, preflight=False)  # what the load path records (the pre-flight refuses a redirecting URL before any load)
        assert srv.hits["redirect"] == 3 and srv.hits["ok"] == 0  # not followed
    assert list(frame["error"]) == ["http_3xx"] * 3 and list(frame["status"]) == [301] * 3
    assert res.exit_code == 3 and summary["overall"]["errors"] == {"http_3xx": 3}  # every request: a set-up error


@pytest.mark.parametrize("api, path", [
    ("anthropic-messages", "/ok/v1/messages"), ("openai-responses", "/ok/v1/responses"), ("rerank", "/ok/v1/rerank"),
    ("kserve-v2", "/ok/v1/v2/models/m/infer"), ("triton-generate", "/ok/v1/v2/models/m/generate"),
])
def test_every_api_puts_its_path_before_the_base_query(tmp_path, api, path):
    """The APIs that came after join_url build their URLs with it too: paths before the query, which is kept."""
    from tests.bad_servers import BadServer

    lines: list[str] = []
    with BadServer(log=lines.append) as srv:
        run(tmp_path, f"""
        name: q
        target: {{url: "{srv.url('ok')}/?api-version=2024-02-01", api: {api}, stream: false, model: m}}
        load:
          arrival: constant
          phases: [{{name: main, duration: 200ms, qps: 10}}]
        """, preflight=False)  # BadServer's `ok` answers every API as chat does: the pre-flight would refuse it
    assert lines and all(f"POST {path}?api-version=2024-02-01 " in ln for ln in lines), lines[:2]


def test_a_grpc_target_url_is_valid(tmp_path):
    """KServe v2 over gRPC names its target grpc://HOST:PORT: a URL latbench sends to."""
    path = write_scenario(tmp_path, """
    name: grpc
    target: {url: "grpc://127.0.0.1:8001", api: kserve-v2, transport: grpc, stream: false, model: m}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    assert load_scenario(path, env={}).scenario.target.url == "grpc://127.0.0.1:8001"
