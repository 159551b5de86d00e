"""The same protocol tests on every transport (aiohttp, lean, httpx), against real servers on 127.0.0.1.

Two servers run in one background thread: an aiohttp.web app (JSON, SSE, Content-Length, 5xx, cuts,
a 100 MB stream) and a raw asyncio server that writes exact bytes (chunked framing, a body delimited
by the end of the connection, a garbage status line).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading

import pytest
from aiohttp import web

from loadgen.engine.base import run_async
from loadgen.protocols.base import Request, ResponseHandler
from loadgen.protocols.registry import make_protocol
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt

N_TOKENS = 12
TOKEN_GAP = 0.01
BIG = 100 * 2**20
USAGE = {"prompt_tokens": 7, "completion_tokens": N_TOKENS, "total_tokens": 7 + N_TOKENS}
PROMPT = Prompt("hello there", None, 3, N_TOKENS)


def _chunk(delta: dict) -> bytes:
    obj = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        return web.json_response({"choices": [{"index": 0, "message": {"content": "hi"}}], "usage": USAGE})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_chunk({"role": "assistant", "content": ""}))
    await asyncio.sleep(TOKEN_GAP)
    for i in range(N_TOKENS):  # each event in three TCP writes, one splitting the CRLF pair
        c = _chunk({"content": f"t{i} "}).replace(b"\n", b"\r\n")
        for piece in (c[:7], c[7:-3], c[-3:]):
            await resp.write(piece)
            await asyncio.sleep(0.0005)
        await asyncio.sleep(TOKEN_GAP)
    await resp.write(b"data: " + json.dumps({"choices": [], "usage": USAGE}).encode() + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def sized(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * int(request.query.get("n", "50000")),
                        status=int(request.query.get("status", "200")))


async def cut(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.content_length = 10_000
    await resp.prepare(request)
    await resp.write(b"y" * 1000)
    await asyncio.sleep(0.01)
    request.transport.close()
    return resp


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(1.0)
    return web.Response(text="late")


async def big(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.content_length = BIG
    await resp.prepare(request)
    block = b"z" * 2**20
    for _ in range(BIG // len(block)):
        await resp.write(block)
    await resp.write_eof()
    return resp


_RAW = {
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "/eof": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
    "/garbage": b"HTTP/1.1 abc what\r\n\r\n",
    "/chunkcut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nonly",
}


async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Exact bytes per path; keeps the connection for /chunked, closes after the others."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":")[1]))
            writer.write(_RAW[path])
            await writer.drain()
            if path != "/chunked":
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture(scope="module")
def servers():
    """(aiohttp base URL, raw base URL), both on 127.0.0.1 port 0, served from one thread."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_route("*", "/sized", sized)
    app.router.add_get("/cut", cut)
    app.router.add_get("/slow", slow)
    app.router.add_get("/big", big)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    raw_server = loop.run_until_complete(asyncio.start_server(raw, "127.0.0.1", 0))
    port = site._server.sockets[0].getsockname()[1]
    raw_port = raw_server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{raw_port}"
    raw_server.close()
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _make(name: str):
    if name == "aiohttp":
        from loadgen.transports.aiohttp_client import AiohttpTransport

        return AiohttpTransport()
    if name == "lean":
        from loadgen.transports.lean import LeanTransport

        return LeanTransport()
    pytest.importorskip("h2")
    from loadgen.transports.httpx_client import HttpxTransport

    return HttpxTransport(http2=True)


@pytest.fixture(params=["aiohttp", "lean", "httpx"])
def transport(request):
    return request.param


def send_all(name: str, requests, handlers=None, timeout: float | None = None) -> list[Outcome]:
    """Send ``requests`` one after another on one transport; the Outcomes in order."""

    async def go():
        t = _make(name)
        await t.start()
        outs = []
        try:
            for i, req in enumerate(requests):
                out = Outcome()
                h = handlers[i] if handlers else ResponseHandler()
                try:
                    if timeout is None:
                        await t.send(req, h, out)
                    else:
                        await asyncio.wait_for(t.send(req, h, out), timeout)
                except asyncio.TimeoutError:
                    out.error = "timeout"
                outs.append(out)
        finally:
            await t.close()
        return outs

    return run_async(go())


def get(url: str, method: str = "GET", body: bytes = b"") -> Request:
    path = "/" + url.split("://", 1)[1].split("/", 1)[1]
    return Request(method, url, path, (), body, False)


def chat_protocol(base: str, stream: bool):
    return make_protocol(Target(url=base + "/v1", stream=stream), Workload(), "m1")


# --- the same protocol tests on every transport -----------------------------------------------------


def test_json_response(servers, transport):
    proto = chat_protocol(servers[0], stream=False)
    (out,) = send_all(transport, [proto.build(0, PROMPT)], [proto.handler()])
    assert (out.status, out.error) == (200, "")
    assert (out.prompt_tokens, out.output_tokens, out.output_tokens_source) == (7, N_TOKENS, "usage")
    assert out.connect_start <= out.connected <= out.first_byte <= out.done
    assert out.sent <= out.connect_start and out.bytes_in > 0


def test_sse_stream_split_across_writes(servers, transport):
    proto = chat_protocol(servers[0], stream=True)
    (out,) = send_all(transport, [proto.build(0, PROMPT)], [proto.handler()])
    assert (out.status, out.error, out.output_tokens, out.output_tokens_source) == (200, "", N_TOKENS, "usage")
    assert len(out.token_times) == N_TOKENS and out.token_times[0] == out.first_token
    assert out.first_token >= out.first_byte + TOKEN_GAP * 0.8  # the role-only chunk is not a token
    gaps = [b - a for a, b in zip(out.token_times, out.token_times[1:])]
    assert min(gaps) > TOKEN_GAP * 0.8  # each token timed as it arrived, not when the body ended
    assert out.done >= out.token_times[-1]


def test_chunked_transfer_encoding_and_reuse_after_it(servers, transport):
    outs = send_all(transport, [get(servers[1] + "/chunked")] * 2)
    for out in outs:
        assert (out.status, out.error, out.bytes_in) == (200, "", len(b"hello world"))
    assert not math.isnan(outs[0].connect_start)
    assert math.isnan(outs[1].connect_start) and math.isnan(outs[1].connected)  # kept alive


def test_content_length_body_and_keep_alive_reuse(servers, transport):
    outs = send_all(transport, [get(servers[0] + "/sized?n=50000"), get(servers[0] + "/sized?n=70000", "POST", b"abc")])
    assert [(o.status, o.error, o.bytes_in) for o in outs] == [(200, "", 50000), (200, "", 70000)]
    assert outs[0].connect_start < outs[0].connected
    assert math.isnan(outs[1].connect_start) and math.isnan(outs[1].connected)


def test_body_delimited_by_connection_close(servers, transport):
    (out,) = send_all(transport, [get(servers[1] + "/eof")])
    assert (out.status, out.error, out.bytes_in) == (200, "", len(b"until the end"))


def test_connection_refused_is_connect(transport):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nobody listens once the socket closes
    (out,) = send_all(transport, [get(f"http://127.0.0.1:{port}/x")])
    assert (out.error, out.status) == ("connect", 0)
    assert math.isnan(out.first_byte) and out.done >= out.sent


def test_server_closes_mid_body_is_reset(servers, transport):
    outs = send_all(transport, [get(servers[0] + "/cut"), get(servers[1] + "/chunkcut")])
    for out in outs:
        assert (out.status, out.error) == (200, "reset")
        assert 0 < out.bytes_in < 10_000 and out.done >= out.first_byte


def test_5xx_is_http_5xx_with_body_consumed(servers, transport):
    outs = send_all(transport, [get(servers[0] + "/sized?n=3000&status=503"), get(servers[0] + "/sized?n=10")])
    assert (outs[0].status, outs[0].error, outs[0].bytes_in) == (503, "http_5xx", 3000)
    assert (outs[1].status, outs[1].error) == (200, "")
    assert math.isnan(outs[1].connect_start)  # the body was read, so the connection was reusable


def test_garbage_status_line_is_bad_response(servers, transport):
    (out,) = send_all(transport, [get(servers[1] + "/garbage")])
    assert out.error == "bad_response"


class _Largest(ResponseHandler):
    __slots__ = ("largest", "reads")

    def __init__(self):
        self.largest = self.reads = 0

    def on_body(self, data, now, out):
        out.bytes_in += len(data)
        self.largest = max(self.largest, len(data))
        self.reads += 1


def test_100_mb_stream_is_counted_not_buffered(servers, transport):
    h = _Largest()
    (out,) = send_all(transport, [get(servers[0] + "/big")], [h])
    assert (out.status, out.error, out.bytes_in) == (200, "", BIG)
    assert h.reads > 20 and h.largest <= 8 * 2**20  # handed over as it arrived


def test_cancelled_request_leaves_the_transport_usable(servers, transport):
    outs = send_all(transport, [get(servers[0] + "/slow"), get(servers[0] + "/sized?n=5")], timeout=0.1)
    assert outs[0].error == "timeout"
    assert (outs[1].status, outs[1].error, outs[1].bytes_in) == (200, "", 5)


def test_no_transport_sends_a_framing_header_beside_its_own(transport):
    """Issue 27, item 15: a request's Transfer-Encoding (or Connection, Content-Length) went out beside the
    transport's Content-Length on every transport. The transport's framing alone is sent; a Host is the request's."""
    seen = []

    async def go():
        async def handle(reader, writer):
            seen.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        t = _make(transport)
        await t.start()
        out = Outcome()
        headers = (("Transfer-Encoding", "chunked"), ("connection", "upgrade"), ("Content-Length", "9"),
                   ("Host", "api.example"), ("X-K", "v"))
        await t.send(Request("POST", f"http://127.0.0.1:{port}/x", "/x", headers, b"abc", False), ResponseHandler(),
                     out)
        await t.close()
        srv.close()
        return out

    out = run_async(go())
    assert (out.status, out.error) == (204, "")
    head = seen[0].decode().lower()
    assert "transfer-encoding" not in head and "upgrade" not in head and head.count("content-length:") == 1
    assert "\r\ncontent-length: 3\r\n" in head and "\r\nx-k: v\r\n" in head
    assert head.count("\r\nhost:") == 1 and "\r\nhost: api.example\r\n" in head


# --- lean only -----------------------------------------------------------------------------------------


def test_lean_refuses_https_clearly():
    from loadgen.errors import UnsupportedURL
    from loadgen.transports.lean import LeanTransport

    assert LeanTransport.supports("http://h:1/v1") and not LeanTransport.supports("https://h/v1")
    with pytest.raises(UnsupportedURL, match="transport: aiohttp"):
        send_all("lean", [get("https://127.0.0.1:1/v1")])


def test_lean_writes_the_request_it_was_given(servers):
    """Method, path, headers and body reach the server; Host and Content-Length are the transport's."""
    seen = []

    async def go():
        async def handle(reader, writer):
            seen.append(await reader.readuntil(b"\r\n\r\n") + await reader.readexactly(3))
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        from loadgen.transports.lean import LeanTransport

        t = LeanTransport()
        await t.start()
        out = Outcome()
        req = Request("POST", f"http://127.0.0.1:{port}/a/b?q=1", "/a/b?q=1", (("X-K", "v"), ("Content-Length", "9")),
                      b"abc", False)
        await t.send(req, ResponseHandler(), out)
        await t.close()
        srv.close()
        return out

    out = run_async(go())
    assert (out.status, out.error) == (204, "")
    head = seen[0].decode()
    assert head.startswith("POST /a/b?q=1 HTTP/1.1\r\n") and head.endswith("\r\n\r\nabc")
    assert "\r\nX-K: v\r\n" in head and "\r\nContent-Length: 3\r\n" in head and "Content-Length: 9" not in head
    assert "\r\nUser-Agent: latbench\r\n" in head and "\r\nHost: 127.0.0.1:" in head


# --- the multi-process engine ----------------------------------------------------------------------------


def test_two_processes_send_every_arrival_of_the_schedule_exactly_once(servers, tmp_path):
    """Process k takes arrivals k, k+2, ... of the seeded schedule; the merge has each seq once."""
    import numpy as np

    from loadgen.engine.base import MeasuredTarget
    from loadgen.engine.multiproc import MultiProcess
    from loadgen.engine.single import SingleProcess
    from loadgen.records.schema import read_records
    from loadgen.scenario.loader import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(f"""
name: mp
target: {{url: "{servers[0]}/v1", stream: false}}
workload: {{prompts: {{input_tokens: 8, output_tokens: 4, distinct: 10}}}}
load:
  arrival: poisson
  seed: 7
  phases:
    - {{name: a, duration: 0.6s, qps: 150, record: false}}
    - {{name: b, duration: 0.6s, qps: 250}}
""")
    loaded = load_scenario(path)
    target = loaded.scenario.target_list()[0]
    (tmp_path / "one").mkdir()
    single = SingleProcess().run(MeasuredTarget(loaded, target, target.url, "m", tmp_path / "one"))
    multi = MultiProcess(2).run(MeasuredTarget(loaded, target, target.url, "m", tmp_path / "two"))
    one = read_records(tmp_path / "one" / "requests.parquet").to_pandas()
    two = read_records(tmp_path / "two" / "requests.parquet").to_pandas()
    assert multi.requests == single.requests == len(one) == len(two) > 150
    assert (two["seq"].to_numpy() == np.arange(len(two))).all()  # sorted, every seq exactly once
    assert set(two["worker"]) == {0, 1} and abs((two["worker"] == 0).sum() - len(two) / 2) <= 2
    assert np.allclose(two["scheduled"].to_numpy(), one.sort_values("seq")["scheduled"].to_numpy())  # the same schedule
    assert (two["phase"].to_numpy() == one.sort_values("seq")["phase"].to_numpy()).all()
    assert (two["error"] == "").all() and multi.cpu_seconds > 0 and not multi.interrupted
    assert not list((tmp_path / "two").glob("*.part*"))  # the parts are merged away


def test_lean_bounds_connects_in_progress_without_losing_requests(servers):
    """A burst of 100 on max_connecting=3: every request answered, on at most 100 connections; refused too."""
    from loadgen.transports.lean import LeanTransport

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]

    async def go():
        t = LeanTransport(max_connecting=3)
        await t.start()
        outs = [Outcome() for _ in range(140)]
        reqs = [get(servers[0] + "/sized?n=7")] * 100 + [get(f"http://127.0.0.1:{dead}/")] * 40
        await asyncio.gather(*(t.send(r, ResponseHandler(), o) for r, o in zip(reqs, outs)))
        conns = len(t.conns)
        await t.close()
        return outs, conns

    outs, conns = run_async(go())
    assert [(o.status, o.error, o.bytes_in) for o in outs[:100]] == [(200, "", 7)] * 100
    assert {o.error for o in outs[100:]} == {"connect"}
    assert 1 <= conns <= 100 and sum(not math.isnan(o.connect_start) for o in outs[:100]) == conns


def test_connection_close_with_a_length_cut_short_is_reset_not_success(transport):
    """'Connection: close' + Content-Length, closed early: a reset; with no length, the end is the body's end."""

    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\nshort")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        return srv, srv.sockets[0].getsockname()[1]

    async def both():
        srv, port = await go()
        t = _make(transport)
        await t.start()
        out = Outcome()
        await t.send(get(f"http://127.0.0.1:{port}/"), ResponseHandler(), out)
        await t.close()
        srv.close()
        return out

    out = run_async(both())
    assert (out.status, out.error, out.bytes_in) == (200, "reset", 5)
