"""Anthropic Messages, OpenAI Responses, rerank, KServe v2 (HTTP/JSON) and Triton generate, each against a server
that speaks it with known timing (tests.api_servers in a subprocess): streaming, usage and TTFT right."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from loadgen.protocols.registry import make_protocol
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt
from tests.helpers import pct, run

TTFT, GAP, TOKENS, THINKING = 0.08, 0.01, 20, 3


def scenario(url: str, api: str, stream: bool, model: str = "m", extra: str = "") -> str:
    return f"""
    name: a
    target: {{url: "{url}", api: {api}, stream: {str(stream).lower()}, model: {model}{extra}}}
    workload: {{prompts: {{input_tokens: 32, output_tokens: 20, distinct: 4}}}}
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 1s, qps: 10}}
    """


@pytest.fixture(scope="module")
def servers():
    """One server with reasoning before the answer, one without."""
    from tests.conftest import ServerProcess

    think = ServerProcess("tests.api_servers", thinking=THINKING)
    plain = ServerProcess("tests.api_servers")
    yield {"think": f"http://127.0.0.1:{think.port}", "plain": f"http://127.0.0.1:{plain.port}"}
    think.stop()
    plain.stop()


STREAMS = [  # api, base path, reasoning before the answer, prompt tokens the usage says
    ("anthropic-messages", "/ok/v1", True, 7),
    ("openai-responses", "/ok/v1", True, 7),
    ("triton-generate", "/ok", False, None),  # the stream has no input count
]


@pytest.mark.parametrize("api, path, reasons, prompt_tokens", STREAMS)
def test_streams_ttft_itl_usage_and_reasoning(tmp_path, servers, api, path, reasons, prompt_tokens):
    base = servers["think" if reasons else "plain"]
    _, s, df = run(tmp_path, scenario(base + path, api, True))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 9, o["errors"]
    ttft = pct(o, "ttft", "p50")
    # the server sleeps 80 ms before the first token: below is an event taken for a token (message_start, ping,
    # response.created), above a busy host (2 cores shared with the server process)
    assert TTFT <= ttft < TTFT + 0.025, ttft
    assert (df["ttft"] >= TTFT).all()
    assert pct(o, "itl", "p50") == pytest.approx(GAP, abs=0.002)
    assert (df["output_tokens"] == TOKENS).all()
    assert all(len(t) == TOKENS for t in df["token_times"])
    if reasons:
        assert (df["reasoning_tokens"] == THINKING).all()
        assert pct(o, "ttfat", "p50") - ttft == pytest.approx(THINKING * GAP, abs=0.002)
        assert (df["prompt_tokens"] == prompt_tokens).all()
    else:
        assert (df["first_answer"] == df["first_token"]).all() and (df["reasoning_tokens"] == 0).all()
        assert (df["chunk_tokens_source"] == "chunk_usage").all()  # num_output_tokens in each response


JSONS = [  # api, base path, output tokens, prompt tokens
    ("anthropic-messages", "/ok/v1", TOKENS, 7),
    ("openai-responses", "/ok/v1", TOKENS, 7),
    ("kserve-v2", "/ok", TOKENS, 7),
    ("triton-generate", "/ok", TOKENS, 7),
    ("rerank", "/ok/v1", 0, None),  # 11 tokens a document: checked below
]


@pytest.mark.parametrize("api, path, output_tokens, prompt_tokens", JSONS)
def test_whole_answers_latency_and_usage(tmp_path, servers, api, path, output_tokens, prompt_tokens):
    _, s, df = run(tmp_path, scenario(servers["plain"] + path, api, False))
    o = s["overall"]
    assert o["ok"] == o["count"] >= 9, o["errors"]
    wait = TTFT if api == "rerank" else TTFT + (TOKENS - 1) * GAP
    assert wait <= pct(o, "latency", "p50") < wait + 0.025
    assert (df["output_tokens"] == output_tokens).all()
    if prompt_tokens is not None:
        assert (df["prompt_tokens"] == prompt_tokens).all()
    else:  # rerank: the server counts 11 tokens a document, and the prompt was cut into at most 8
        assert ((df["prompt_tokens"] % 11 == 0) & (df["prompt_tokens"] > 0) & (df["prompt_tokens"] <= 88)).all()
    assert o["metrics"]["ttft"]["n"] == 0


async def _drive(proto, prompt: Prompt):
    req = proto.build(0, prompt)
    out, handler = Outcome(), proto.handler()
    async with aiohttp.ClientSession() as s:
        async with s.request(req.method, req.url, data=req.body, headers=dict(req.headers)) as resp:
            handler.on_status(resp.status, out)
            async for data in resp.content.iter_any():
                handler.on_body(data, asyncio.get_running_loop().time(), out)
            handler.on_end(out)
    return out


def drive(url: str, api: str, stream: bool, **target) -> Outcome:
    proto = make_protocol(Target(url=url, api=api, stream=stream, **target), Workload(), "m")
    return asyncio.run(_drive(proto, Prompt("say something " * 10, [{"role": "system", "content": "be brief"},
                                                                   {"role": "user", "content": "hello"}], 30, 20)))


@pytest.mark.parametrize(
    "api, mode, stream, error",
    [("anthropic-messages", "noend", True, "bad_stream"), ("anthropic-messages", "error", True, "bad_stream"),
     ("openai-responses", "noend", True, "bad_stream"), ("openai-responses", "error", True, "bad_stream"),
     ("triton-generate", "error", True, "bad_stream"), ("kserve-v2", "noend", False, "bad_response"),
     ("rerank", "noend", False, "bad_response"), ("anthropic-messages", "500", True, "http_5xx"),
     ("kserve-v2", "500", False, "http_5xx")],
)
def test_broken_answers_are_errors(servers, api, mode, stream, error):
    prefix = "/v1" if api in ("anthropic-messages", "openai-responses", "rerank") else ""
    out = drive(f"{servers['plain']}/{mode}{prefix}", api, stream)
    assert out.error == error, (out.error, out.error_detail)


def test_what_each_api_is_sent(servers):
    """The requests as each API documents them."""
    base = servers["plain"]
    out = drive(f"{base}/ok/v1", "anthropic-messages", True, headers={"x-api-key": "k"})
    assert out.error == "" and out.prompt_tokens == 7 and out.output_tokens == TOKENS
    assert out.output_tokens_source == "usage"
    proto = make_protocol(Target(url=f"{base}/ok/v1", api="anthropic-messages", headers={"x-api-key": "k"}),
                          Workload(), "m")
    req = proto.build(0, Prompt("x", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                                1, 9))
    body = json.loads(req.body)
    assert body == {"model": "m", "max_tokens": 9, "system": "be brief",
                    "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert dict(req.headers)["anthropic-version"] == "2023-06-01" and dict(req.headers)["x-api-key"] == "k"
    assert req.url.endswith("/ok/v1/messages")
    resp = make_protocol(Target(url=f"{base}/ok/v1", api="openai-responses", stream=False), Workload(), "m")
    assert json.loads(resp.build(0, Prompt("q", None, 1, 5)).body) == {"model": "m", "input": "q",
                                                                       "max_output_tokens": 5, "stream": False}
    rr = make_protocol(Target(url=f"{base}/ok", api="rerank", documents=3), Workload(), "m")
    rb = json.loads(rr.build(0, Prompt("a b c d e f g h i j", None, 3, 1)).body)
    assert rb == {"model": "m", "query": "a b c d e f g h", "documents": ["a b c d", "e f g h", "i j"]}
    assert rr.build(0, Prompt("a", None, 1, 1)).url.endswith("/ok/rerank")
    ks = make_protocol(Target(url=f"{base}/ok", api="kserve-v2", stream=False), Workload(), "my model")
    kr = ks.build(0, Prompt("q", None, 1, 5))
    assert kr.url.endswith("/ok/v2/models/my%20model/infer")
    assert json.loads(kr.body) == {"inputs": [
        {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["q"]},
        {"name": "max_tokens", "shape": [1], "datatype": "INT32", "data": [5]}]}
    tg = make_protocol(Target(url=f"{base}/ok", api="triton-generate", stream=True,
                              kserve={"text_input": "prompt", "max_tokens": None}), Workload(), "m")
    assert json.loads(tg.build(0, Prompt("q", None, 1, 5)).body) == {"prompt": "q", "stream": True}
    with pytest.raises(ValueError, match="does not stream"):
        make_protocol(Target(url=base, api="kserve-v2", stream=True), Workload(), "m")
