"""The lean transport's callback path (``submit``) and the engine's per-prompt Request cache.

``send`` is built on ``submit``, so every protocol test in test_transports runs through it too; these
tests pin what only ``submit`` promises: one callback, never from inside ``submit``, none after ``cancel``,
and a connection never reused after bytes that no request asked for.
"""

from __future__ import annotations

import asyncio
import gzip
import math

from loadgen.engine.base import run_async
from loadgen.protocols.base import Request, ResponseHandler
from loadgen.protocols.registry import make_protocol
from loadgen.protocols.reqcache import RequestCache
from loadgen.records.schema import Outcome
from loadgen.scenario.model import HttpRequest, Target, Workload
from loadgen.scenario.prompts import ListPrompts, Prompt
from loadgen.transports.lean import LeanTransport

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def _server(double_at: int | None = None):
    """A keep-alive server answering RESPONSE; request number ``double_at`` is answered twice in one write.
    Returns (server, url, list of connection counts)."""
    conns, seen = [0], [0]

    async def handle(reader, writer):
        conns[0] += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                seen[0] += 1
                writer.write(RESPONSE * (2 if seen[0] == double_at else 1))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x", conns


def _req(url: str) -> Request:
    return Request("GET", url, "/x", (), b"", False)


def test_submit_calls_back_once_never_from_inside_submit_and_reuses_the_connection():
    async def go():
        server, url, conns = await _server()
        t = LeanTransport()
        await t.start()
        req = _req(url)  # the same object twice: its bytes are encoded once
        done: list = []
        outs = []
        try:
            for _ in range(2):
                fut = asyncio.get_running_loop().create_future()
                out = Outcome()
                call = t.submit(req, ResponseHandler(), out, lambda c, f=fut: (done.append(c), f.set_result(None)),
                                "ctx")
                assert not done or done[-1] is not call  # not called from inside submit
                await asyncio.wait_for(fut, 5)
                assert done[-1] is call and call.finished and call.ctx == "ctx"
                outs.append(out)
            await asyncio.sleep(0.05)
        finally:
            await t.close()
            server.close()
        return outs, len(done), conns[0]

    outs, calls, conns = run_async(go())
    assert calls == 2 and conns == 1
    for out in outs:
        assert out.status == 200 and out.error == "" and out.bytes_in == 2
        assert out.sent <= out.first_byte <= out.done
    assert not math.isnan(outs[0].connect_start) and math.isnan(outs[1].connect_start)  # kept alive


def test_cancelled_call_never_calls_back_and_the_transport_goes_on():
    async def go():
        hang = asyncio.Event()

        async def silent(reader, writer):  # reads, never answers
            await hang.wait()
            writer.close()

        quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
        server, url, _ = await _server()
        t = LeanTransport()
        await t.start()
        called = []
        try:
            port = quiet.sockets[0].getsockname()[1]
            call = t.submit(_req(f"http://127.0.0.1:{port}/x"), ResponseHandler(), Outcome(), called.append)
            await asyncio.sleep(0.1)
            call.cancel()
            call.cancel()  # twice is harmless
            out = Outcome()
            await t.send(_req(url), ResponseHandler(), out)
            await asyncio.sleep(0.05)
        finally:
            hang.set()
            await t.close()
            server.close()
            quiet.close()
        return called, call, out

    called, call, out = run_async(go())
    assert called == [] and call.finished
    assert out.status == 200 and out.error == ""


def test_bytes_after_a_response_are_not_the_next_answer():
    """The server answers request 1 twice in one write: request 2 must not take the stale answer."""
    async def go():
        server, url, conns = await _server(double_at=1)
        t = LeanTransport()
        await t.start()
        outs = []
        try:
            for _ in range(3):
                out = Outcome()
                await asyncio.wait_for(t.send(_req(url), ResponseHandler(), out), 5)
                outs.append(out)
        finally:
            await t.close()
            server.close()
        return outs, conns[0]

    outs, conns = run_async(go())
    assert [o.status for o in outs] == [200, 200, 200] and all(o.error == "" for o in outs)
    assert not math.isnan(outs[1].connect_start)  # the first connection was dropped, not reused
    assert conns == 2


def test_request_cache_builds_once_per_prompt_unless_the_request_has_seq():
    prompts = ListPrompts([Prompt("a", None, 1, 4), Prompt("b", None, 1, 4)])
    chat = make_protocol(Target(url="http://h/v1", stream=False), Workload(), "m")
    cache = RequestCache(chat, prompts)
    assert cache.get(0) is cache.get(2) and cache.get(1) is cache.get(3)
    assert cache.get(0) is not cache.get(1)
    assert cache.get(5).body == chat.build(5, prompts.get(5)).body

    per_seq = make_protocol(Target(url="http://h", api="http", request=HttpRequest(method="POST", path="/q",
                                                                                    body={"n": "{seq}"})),
                            Workload(), None)
    cache = RequestCache(per_seq, prompts)
    assert cache.get(0).body != cache.get(2).body  # {seq}: built for every request
    assert b'"n":"2"' in cache.get(2).body


def test_a_compressed_body_is_inflated_wherever_the_reads_split_the_response():
    """The Content-Encoding is looked for in the header block only, found without a search for its end: before
    the first body bytes of the read that ended the headers, or in all of that read when no body came with it.
    Every split and spelling inflates; text like a header inside a body does not."""
    text = b'{"answer": "x"}' * 40
    packed = gzip.compress(text)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(packed), packed)
    cases = {  # name -> (writes, the body the handler must see)
        "one read": ([b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(packed), packed)], text),
        "headers, then the body": ([b"HTTP/1.1 200 OK\r\nCONTENT-ENCODING: gzip\r\nContent-Length: %d\r\n\r\n"
                                    % len(packed), packed], text),
        "chunked, split mid-chunk": ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
                                      + chunked[:30], chunked[30:]], text),
        "a header's text in the body": ([b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n"
                                         + b"\r\ncontent-encoding: gzip\r\n".ljust(40, b"-")],
                                        b"\r\ncontent-encoding: gzip\r\n".ljust(40, b"-")),
    }

    class Keep(ResponseHandler):
        __slots__ = ("body",)

        def __init__(self):
            self.body = b""

        def on_body(self, data, now, out):
            self.body += data

    async def go():
        pending: list = []

        async def handle(reader, writer):
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    for part in pending.pop(0):
                        writer.write(part)
                        await writer.drain()
                        await asyncio.sleep(0.05)  # a read of its own
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/x"
        t = LeanTransport()
        await t.start()
        seen = {}
        try:
            for name, (writes, _) in cases.items():
                pending.append(writes)
                out, handler = Outcome(), Keep()
                await asyncio.wait_for(t.send(_req(url), handler, out), 10)
                seen[name] = (out.error, handler.body)
        finally:
            await t.close()
            server.close()
            await server.wait_closed()
        return seen

    seen = run_async(go())
    for name, (_, body) in cases.items():
        assert seen[name] == ("", body), (name, seen[name][0], seen[name][1][:60])
