"""Reference server, API surface: the official openai client round trip, /health, /v1/models, /metrics,
bad requests, binding, and the subprocess announcement. Real servers on port 0, the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig

ROOT = Path(__file__).resolve().parents[2]


def tiny(arch: str, weights_dir: str, **kw) -> ServerConfig:
    return ServerConfig.from_preset(arch, model="tiny", backend="numpy", cache_dir=weights_dir, **kw)


@pytest.fixture(scope="module")
def naive(weights_dir):
    with BackgroundServer(tiny("naive", weights_dir)) as srv:
        yield srv


@pytest.fixture(scope="module")
def optimized(weights_dir):
    with BackgroundServer(tiny("optimized", weights_dir)) as srv:
        wait_ready(srv.url)
        yield srv


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 30):
    """(status, headers, body bytes) of one request; never raises on HTTP errors."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def post_json(url: str, obj) -> tuple[int, dict, bytes]:
    return http("POST", url, json.dumps(obj).encode(), {"Content-Type": "application/json"})


def wait_ready(url: str, timeout_s: float = 120.0) -> dict:  # a start's deadline, not a timing claim: a busy host
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _, body = http("GET", url + "/health")
        if status == 200:
            return json.loads(body)
        time.sleep(0.05)
    raise TimeoutError("server never became healthy")


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def test_openai_chat_round_trip(optimized):
    c = client(optimized.url)
    r = c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=7)
    assert r.choices[0].finish_reason == "length"
    assert len(r.choices[0].message.content) == 7 and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 7 and r.usage.prompt_tokens > 0

    chunks = list(c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, stream=True,
                                            stream_options={"include_usage": True}, temperature=0.0))
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and len(first.content) == 1  # role goes out with the first token
    content = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(content) == 5 and all(len(t) == 1 for t in content)
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_openai_completions_round_trip(optimized):
    c = client(optimized.url)
    r = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, temperature=0.7, seed=3)
    assert len(r.choices[0].text) == 6 and r.usage.completion_tokens == 6
    assert r.usage.prompt_tokens == len("Once upon a time")
    chunks = list(c.completions.create(model="tiny", prompt="Once upon", max_tokens=4, stream=True,
                                       stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert len(text) == 4
    assert chunks[-1].usage.total_tokens == len("Once upon") + 4
    plain = list(c.completions.create(model="tiny", prompt="x", max_tokens=3, stream=True))
    assert all(ch.usage is None for ch in plain)


def test_greedy_is_deterministic_and_stop_strings_cut(optimized):
    body = {"model": "tiny", "prompt": "abc", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    _, _, raw = post_json(optimized.url + "/v1/completions", dict(body, prompt="abcd"))
    text = json.loads(raw)["choices"][0]["text"]
    assert len(text) == 40
    stop = text[10:12]
    _, _, raw = post_json(optimized.url + "/v1/completions", dict(body, prompt="abcd", stop=[stop]))
    out = json.loads(raw)["choices"][0]
    assert out["finish_reason"] == "stop" and out["text"] == text[: text.index(stop)]


def test_health_models_metrics_and_backend_header(optimized):
    status, headers, body = http("GET", optimized.url + "/health")
    assert status == 200 and json.loads(body)["status"] == "ready" and headers["x-backend"] == "numpy"
    status, headers, body = http("GET", optimized.url + "/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"
    status, _, body = http("GET", optimized.url + "/metrics")
    text = body.decode()
    for name in ("refserver:num_requests_running", "refserver:num_requests_waiting",
                 "refserver:request_queue_time_seconds_bucket", "refserver:time_to_first_token_seconds_bucket",
                 "refserver:inter_token_latency_seconds_bucket", "refserver:e2e_request_latency_seconds_bucket",
                 "refserver:batch_size_bucket", "refserver:cache_hits_total", "refserver:cache_misses_total",
                 "refserver:prompt_tokens_total", "refserver:generation_tokens_total",
                 "refserver:requests_total", "refserver:model_load_seconds"):
        assert name in text, name
    samples = [ln for ln in text.splitlines() if ln.startswith("refserver:")]
    assert samples and all('backend="numpy"' in ln for ln in samples)
    assert 'le="0.001"' in text and 'le="0.0015"' in text  # fine enough for 1 ms gaps


def _gauge(url: str, name: str) -> float:
    text = http("GET", url + "/metrics")[2].decode()
    return float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith(f"refserver:{name}{{")))


def test_clients_that_leave_free_their_slots_and_the_gauges_say_so(weights_dir):
    """Streams whose clients disconnect leave the batch; the running gauge drops to 0 even though no
    further step runs to update it (it once stayed at the last batch size until the next request)."""
    import socket

    with BackgroundServer(tiny("batching", weights_dir)) as srv:
        wait_ready(srv.url)
        host, port = srv.url.split("//")[1].split(":")
        body = json.dumps({"model": "tiny", "messages": MESSAGES, "max_tokens": 1500, "stream": True}).encode()
        socks = []
        for _ in range(4):
            s = socket.create_connection((host, int(port)))
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            socks.append(s)
        for s in socks:
            assert s.recv(200).startswith(b"HTTP/1.1 200")  # streaming has begun: the request is running
        deadline = time.monotonic() + 10
        while _gauge(srv.url, "num_requests_running") < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gauge(srv.url, "num_requests_running") == 4
        for s in socks:
            s.close()
        deadline = time.monotonic() + 10
        while _gauge(srv.url, "num_requests_running") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gauge(srv.url, "num_requests_running") == 0
        assert _gauge(srv.url, "num_requests_waiting") == 0


def test_health_lazy_then_loaded(weights_dir):
    with BackgroundServer(tiny("naive", weights_dir)) as srv:
        status, _, body = http("GET", srv.url + "/health")
        assert status == 200 and json.loads(body) | {} == {"status": "lazy", "lazy": True, "backend": "numpy"}
        t0 = time.perf_counter()
        assert post_json(srv.url + "/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 1})[0] == 200
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert post_json(srv.url + "/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 1})[0] == 200
        warm = time.perf_counter() - t0
        assert cold > warm  # the first caller paid the load
        status, _, body = http("GET", srv.url + "/health")
        assert status == 200 and json.loads(body)["status"] == "ready"
        metrics = http("GET", srv.url + "/metrics")[2].decode()
        load = [ln for ln in metrics.splitlines() if ln.startswith("refserver:model_load_seconds")]
        assert float(load[0].split()[-1]) > 0


def test_health_503_until_preloaded_and_warmed(weights_dir):
    # small on numpy takes a moment to read and warm: /health must say 503 meanwhile
    config = ServerConfig.from_preset("optimized", model="small", backend="numpy", cache_dir=weights_dir,
                                      max_batch_size=4)
    with BackgroundServer(config) as srv:
        status, _, body = http("GET", srv.url + "/health")
        assert status == 503 and json.loads(body)["status"] in ("loading", "warming")
        assert wait_ready(srv.url, 60)["status"] == "ready"


BAD_REQUESTS = [
    ("/v1/chat/completions", b"{not json", 400),
    ("/v1/chat/completions", b"[1, 2]", 400),
    ("/v1/chat/completions", {"messages": MESSAGES}, 400),  # no model
    ("/v1/chat/completions", {"model": "tiny"}, 400),  # no messages
    ("/v1/chat/completions", {"model": "tiny", "messages": "hi"}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": "5"}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": 0}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": -3}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": 10**9}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "max_tokens": True}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "temperature": "hot"}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "stream": "yes"}, 400),
    ("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "stop": 5}, 400),
    ("/v1/chat/completions", {"model": "nope", "messages": MESSAGES}, 404),
    ("/v1/completions", {"model": "tiny"}, 400),
    ("/v1/completions", {"model": "tiny", "prompt": ""}, 400),
    ("/v1/completions", {"model": "tiny", "prompt": [1, 999]}, 400),
    ("/v1/completions", {"model": "tiny", "prompt": "x", "n": 2}, 400),
    ("/v1/completions", b"x" * (2 << 20), 413),  # over the body limit
    ("/v1/nowhere", {}, 404),
]


@pytest.mark.parametrize("path,body,status", BAD_REQUESTS, ids=[str(i) for i in range(len(BAD_REQUESTS))])
def test_bad_requests_get_openai_style_4xx(naive, path, body, status):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, headers, payload = http("POST", naive.url + path, raw, {"Content-Type": "application/json"})
    assert got == status
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert headers["x-backend"] == "numpy"
    ok = post_json(naive.url + "/v1/completions", {"model": "tiny", "prompt": "still here", "max_tokens": 2})
    assert ok[0] == 200  # the server keeps serving


def test_openai_client_sees_bad_request_error(naive):
    with pytest.raises(openai.BadRequestError):
        client(naive.url).chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=0)


def test_binds_localhost_by_default(naive):
    assert ServerConfig().host == "127.0.0.1"
    assert naive.url.startswith("http://127.0.0.1:")
    socks = naive.server.runner.addresses
    assert socks and all(addr[0] == "127.0.0.1" for addr in socks)


def test_subprocess_announces_url_and_config(weights_dir):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "reference_server", "--port", "0", "--model", "tiny", "--backend", "numpy",
         "--cache-dir", weights_dir, "--arch", "optimized", "--max-batch-size", "4", "--no-warmup"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url_line = proc.stdout.readline().strip()
        assert url_line.startswith("LATBENCH_SERVER_URL=http://127.0.0.1:")
        config = json.loads(proc.stdout.readline().strip().split("=", 1)[1])
        assert config["arch"] == "optimized" and config["max_batch_size"] == 4 and config["warmup"] is False
        assert config["backend"] == "numpy" and config["parameter_count"] > 4_000_000
        url = url_line.split("=", 1)[1]
        wait_ready(url)
        assert post_json(url + "/v1/completions", {"model": "tiny", "prompt": "a", "max_tokens": 3})[0] == 200
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert "[backend=numpy]" in proc.stderr.read()


def test_invalid_flags_exit_2(weights_dir):
    from reference_server.__main__ import main

    assert main(["--model", "huge", "--backend", "numpy", "--cache-dir", weights_dir]) == 2
    assert main(["--backend", "sim:nogpu-8b"]) == 2
