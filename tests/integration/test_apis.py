"""Protocol clients against a real aiohttp server on 127.0.0.1, driven the way a transport drives them."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from loadgen.protocols.openai import _event_json
from loadgen.protocols.registry import make_protocol
from loadgen.protocols.shape import MAX_PARSED_BODY
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt

N_TOKENS = 20
ROLE_PAUSE = 0.03  # seconds between the role-only chunk and the first content chunk


def chunk(delta=None, text=None, usage=None, choices=True) -> bytes:
    obj: dict = {"id": "x", "object": "chat.completion.chunk"}
    if choices:
        obj["choices"] = [{"index": 0, "delta": delta} if text is None else {"index": 0, "text": text}]
    else:
        obj["choices"] = []
    if usage:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


SEEN = web.AppKey("seen", dict)  # what the server last received, for the tests to check
USAGE = {"prompt_tokens": 7, "completion_tokens": N_TOKENS, "total_tokens": 7 + N_TOKENS}


async def _stream(request: web.Request, mode: str, chat: bool) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if chat:
        await resp.write(b": keep-alive\r\n\r\n" + chunk({"role": "assistant", "content": ""}))
        await asyncio.sleep(ROLE_PAUSE)
    for i in range(N_TOKENS):
        if mode == "error" and i == 5:
            await resp.write(b'data: {"error": {"message": "overloaded", "code": 503}}\n\n')
        if mode == "errevent" and i == 5:
            await resp.write(b'event: error\ndata: {"message": "overloaded"}\n\n')
        if mode == "garbage" and i == 5:
            await resp.write(b"data: this is not json\n\n")
        c = chunk({"content": f"tok{i} "}) if chat else chunk(text=f"tok{i} ")
        if mode == "split":  # one event written in three pieces, one splitting the CRLF pair
            c = c.replace(b"\n", b"\r\n")
            for piece in (c[:10], c[10:-3], c[-3:]):
                await resp.write(piece)
                await asyncio.sleep(0.001)
        else:
            await resp.write(c)
        if i == 0 and chat:
            await resp.write(chunk({}))  # an empty delta is not a token
    if mode != "nousage":
        await resp.write(chunk(usage=USAGE, choices=False))
    if mode != "nodone":
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def openai(request: web.Request) -> web.StreamResponse:
    mode = request.match_info["mode"]
    request.app[SEEN]["last"] = body = await request.json()
    request.app[SEEN]["last_headers"] = dict(request.headers)
    if mode in ("500", "429"):
        return web.Response(status=int(mode), text='{"error": "no"}')
    kind = request.match_info["kind"]
    if kind == "embeddings":
        data = [] if mode != "nodata" else None
        obj = {"object": "list", "usage": {"prompt_tokens": 9, "total_tokens": 9}}
        if data is not None:
            obj["data"] = [{"embedding": [0.1, 0.2], "index": 0}]
        return web.json_response(obj)
    if body.get("stream"):
        return await _stream(request, mode, chat=kind == "chat/completions")
    if mode == "badjson":
        return web.Response(text='{"choices": [', content_type="application/json")
    if mode == "nochoices":
        return web.json_response({"object": "chat.completion"})
    if mode == "huge":  # a body past the parse limit, usage at its end
        pad = "x" * (MAX_PARSED_BODY + 100_000)
        return web.Response(text=json.dumps({"choices": [{"message": {"content": pad}}], "usage": USAGE}),
                            content_type="application/json")
    return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                              "usage": USAGE})


async def echo(request: web.Request) -> web.Response:
    request.app[SEEN]["echo"] = (request.method, request.path_qs, await request.read(), dict(request.headers))
    return web.Response(status=int(request.query.get("status", "200")), text="ok" * 50)


@pytest.fixture(scope="module")
def server():
    """A real aiohttp server on 127.0.0.1, port 0, in a thread with its own event loop."""
    app = web.Application()
    app[SEEN] = seen = {}
    app.router.add_post("/{mode}/v1/{kind:chat/completions|completions|embeddings}", openai)
    app.router.add_route("*", "/echo/{tail:.*}", echo)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield seen, f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


async def _drive(proto, prompt: Prompt, seq: int = 0):
    """What a transport does: on_status once, on_body per read with its arrival time, on_end."""
    req = proto.build(seq, prompt)
    out, arrivals = Outcome(), []
    handler = proto.handler()
    async with aiohttp.ClientSession() as s:
        async with s.request(req.method, req.url, data=req.body, headers=dict(req.headers)) as resp:
            out.first_byte = time.perf_counter()
            handler.on_status(resp.status, out)
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                arrivals.append(now)
                handler.on_body(data, now, out)
            handler.on_end(out)
    return out, arrivals


def drive(base: str, mode: str, api: str = "openai-chat", stream: bool = True, prompt: Prompt | None = None, **target):
    t = Target(url=f"{base}/{mode}/v1/", api=api, stream=stream, **target)
    proto = make_protocol(t, Workload(), "m1")
    return asyncio.run(_drive(proto, prompt or Prompt("hello", None, 2, 32)))


def test_chat_stream_tokens_times_and_usage(server):
    app, base = server
    out, arrivals = drive(base, "ok")
    assert out.error == "" and out.status == 200
    assert out.output_tokens == N_TOKENS and out.output_tokens_source == "usage" and out.prompt_tokens == 7
    assert len(out.token_times) == N_TOKENS
    assert out.first_token == out.token_times[0]
    # the role-only chunk arrived first, alone; the first token came after the pause
    assert out.first_token > arrivals[0] + ROLE_PAUSE * 0.5
    assert list(out.token_times) == sorted(out.token_times)
    assert out.bytes_in > 0
    body = app["last"]
    assert body == {
        "model": "m1",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert app["last_headers"]["Accept"] == "text/event-stream"


def test_chat_stream_split_events_and_crlf(server):
    out, _ = drive(server[1], "split")
    assert (out.error, out.output_tokens, len(out.token_times)) == ("", N_TOKENS, N_TOKENS)


def test_chat_stream_without_usage_counts_chunks(server):
    out, _ = drive(server[1], "nousage")
    assert (out.error, out.output_tokens, out.output_tokens_source, out.prompt_tokens) == ("", N_TOKENS, "chunks", -1)


@pytest.mark.parametrize(
    "mode, detail",
    [("nodone", "without [DONE]"), ("error", "error in stream"), ("errevent", "event: error"), ("garbage", "not JSON")],
)
def test_broken_streams_are_bad_stream(server, mode, detail):
    out, _ = drive(server[1], mode)
    assert out.error == "bad_stream" and detail in out.error_detail, out.error_detail


@pytest.mark.parametrize("mode, stream, error", [("500", True, "http_5xx"), ("429", True, "http_429"),
                                                 ("500", False, "http_5xx"), ("429", False, "http_429")])
def test_http_error_status_keeps_its_class(server, mode, stream, error):
    out, _ = drive(server[1], mode, stream=stream)
    assert (out.status, out.error, out.output_tokens) == (int(mode), error, 0)
    assert out.bytes_in > 0 and math.isnan(out.first_token)


def test_completions_stream(server):
    app, base = server
    out, _ = drive(base, "ok", api="openai-completions", prompt=Prompt("t", [{"role": "user", "content": "t"}], 1, 5))
    assert (out.error, out.output_tokens, len(out.token_times)) == ("", N_TOKENS, N_TOKENS)
    assert app["last"]["prompt"] == "t" and "messages" not in app["last"]


@pytest.mark.parametrize(
    "mode, error, tokens",
    [("ok", "", N_TOKENS), ("badjson", "bad_response", 0), ("nochoices", "bad_response", 0), ("huge", "", N_TOKENS)],
)
def test_chat_json_responses(server, mode, error, tokens):
    app, base = server
    out, _ = drive(base, mode, stream=False)
    assert (out.error, out.output_tokens, out.output_tokens_source == "usage") == (error, tokens, tokens > 0)
    assert math.isnan(out.first_token)
    assert app["last"]["stream"] is False and "stream_options" not in app["last"]


def test_embeddings(server):
    app, base = server
    out, _ = drive(base, "ok", api="embeddings")
    assert (out.error, out.prompt_tokens, out.output_tokens) == ("", 9, 0)
    assert app["last"] == {"model": "m1", "input": "hello"}
    out, _ = drive(base, "nodata", api="embeddings")
    assert out.error == "bad_response"


def test_ignore_eos_and_target_headers(server):
    app, base = server
    t = Target(url=f"{base}/ok/v1", headers={"Authorization": "Bearer k", "accept": "*/*"})
    proto = make_protocol(t, Workload(ignore_eos=True), None)
    out, _ = asyncio.run(_drive(proto, Prompt("x", None, 1, 3)))
    assert out.error == ""
    assert app["last"]["ignore_eos"] is True and "model" not in app["last"]
    assert app["last_headers"]["Authorization"] == "Bearer k"
    assert app["last_headers"]["Accept"] == "*/*"  # the target's header replaced the protocol's


QUOTED = 'say "hi"\n\\ and {braces}'


@pytest.mark.parametrize(
    "request_, method, path, body",
    [
        ({"path": "/echo/{seq}", "body": {"q": "{prompt}", "n": "{seq}", "k": [1, 2]}}, "POST", "/echo/42",
         {"q": QUOTED, "n": "42", "k": [1, 2]}),
        ({"path": "echo/t", "template": '{"q": "{prompt}", "id": {seq}}'}, "POST", "/echo/t", {"q": QUOTED, "id": 42}),
        ({"method": "PUT", "path": "/echo/x", "template": "p={prompt}", "content_type": "text/plain"}, "PUT", "/echo/x",
         "p=" + QUOTED),
        ({"method": "GET", "path": "/echo/g?q={prompt}&status=201"}, "GET", None, None),
    ],
)
def test_http_protocol_substitution(server, request_, method, path, body):
    app, base = server
    t = Target(url=base, api="http", request=request_)
    proto = make_protocol(t, Workload(), None)
    out, _ = asyncio.run(_drive(proto, Prompt(QUOTED, None, 5, 5), seq=42))
    got_method, got_path, got_body, headers = app["echo"]
    assert out.error == "" and out.bytes_in == 100 and out.status in (200, 201)
    assert got_method == method
    if path is not None:
        assert got_path == path
    else:  # the prompt went into the query, percent-encoded
        from urllib.parse import parse_qs, urlsplit

        assert parse_qs(urlsplit(got_path).query)["q"] == [QUOTED]
    if isinstance(body, dict):
        assert json.loads(got_body) == body and headers["Content-Type"] == "application/json"
    elif body is not None:
        assert got_body.decode() == body and headers["Content-Type"] == "text/plain"
    else:
        assert got_body == b""


def test_http_protocol_error_status(server):
    app, base = server
    t = Target(url=base, api="http", request={"method": "GET", "path": "/echo/e?status=503"})
    out, _ = asyncio.run(_drive(make_protocol(t, Workload(), None), Prompt("x", None, 1, 1)))
    assert (out.status, out.error) == (503, "http_5xx")


def test_build_is_deterministic_and_strips_trailing_slash():
    t = Target(url="http://h:8000/v1/", api="openai-completions", stream=False)
    proto = make_protocol(t, Workload(max_tokens=9), "m")
    p = Prompt("abc", None, 1, 9)
    a, b = proto.build(3, p), proto.build(3, p)
    assert a == b
    assert (a.method, a.url, a.path, a.stream) == ("POST", "http://h:8000/v1/completions", "/v1/completions", False)
    assert a.body == b'{"model":"m","prompt":"abc","max_tokens":9,"stream":false}'


def test_reference_target_needs_a_base_url():
    t = Target(reference={"arch": "naive"})
    with pytest.raises(ValueError, match="base_url"):
        make_protocol(t, Workload(), None)
    proto = make_protocol(t, Workload(), "tiny", base_url="http://127.0.0.1:9/v1")
    assert proto.build(0, Prompt("a", None, 1, 1)).url == "http://127.0.0.1:9/v1/chat/completions"


@pytest.mark.parametrize("payload, ok", [(b' {"choices": []}', True), (b'{"choices": []} ', True),
                                         (b'{"choices": []}}', False), (b"\xff\xfe", False), (b"", False)])
def test_event_json_is_json_loads(payload, ok):
    if ok:
        assert _event_json(payload) == json.loads(payload)
    else:
        with pytest.raises(ValueError):
            json.loads(payload)
        with pytest.raises(ValueError):
            _event_json(payload)
