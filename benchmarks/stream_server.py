"""A lean OpenAI-style streaming server for benchmarks: token events on a fixed timetable, each stamped with
its send time on CLOCK_MONOTONIC (a script, not a test; not the reference server).

Per request to ``POST /v1/chat/completions`` (or ``/v1/completions``) with ``"stream": true``: the first
token event ``--ttft`` seconds after the request arrived, then one every ``--itl`` seconds, ``max_tokens``
of them (the request's ``max_tokens`` / ``max_completion_tokens``, else ``--tokens``; at most ``--max-tokens``).
Event k is due at ``arrival + ttft + k * itl``; it is written at the first timer-wheel tick at or after that
(never early), and carries the moment it was handed to the socket, ``time.monotonic()`` (CLOCK_MONOTONIC,
one clock for every process of a Linux host; CPython's ``perf_counter`` is the same clock there), twice:

- as a JSON field ``"server_t": 12345.678901`` of the chunk (seconds, 6 decimals, fixed width), and
- as the token text, ``"content": "12345.678901 "``, so a tool that keeps the generated text keeps the stamps.

The last token carries ``finish_reason: "stop"``; then a usage chunk (``choices: []``) when the request asked
``stream_options.include_usage``, and ``data: [DONE]``. A request whose prompt holds ``req-<N>`` is logged as
stream N (its arrival and every stamp) for ``GET /dump``. ``"stream": false`` gets one JSON answer at once.

Lean by construction: ``asyncio.Protocol`` on uvloop, HTTP/1.1 keep-alive with chunked bodies, every chunk
one ``bytes % (stamp, stamp)`` of a pre-encoded template and one ``transport.write``, and one timer wheel
(slots of ``--tick`` seconds, one loop timer) for all streams. ``--procs N`` runs N processes on one port
(SO_REUSEPORT; the kernel spreads connections); ``/stats`` and ``/dump`` then answer for the one process that
got the request, so benchmarks that read them use one process.

Endpoints besides the API: ``GET /v1/models``, ``GET /health``, ``GET /stats`` (JSON: events, streams, CPU
seconds; ``?lags``: also the lag of sends behind their due time p50/p99/max in seconds; ``?reset`` then starts a
new window),
``GET /dump`` (JSON: per logged stream ``[N, arrival, [stamps...]]``, then the log is emptied).

    taskset -c 0 python benchmarks/stream_server.py --port 8123 --ttft 0.2 --itl 0.2 --tokens 50
    python benchmarks/stream_server.py --measure 5   # what one pinned process sustains here (events/s)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import socket
import sys
import time
from array import array

clock = time.monotonic
_CL = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)
_MAX_TOKENS = re.compile(rb'"max_(?:completion_)?tokens"\s*:\s*(\d+)')
_STREAM_TRUE = re.compile(rb'"stream"\s*:\s*true')
_REQ_ID = re.compile(rb"req-(\d+)")
# fixed width (space-padded: valid JSON): every chunk of a stream has one length, its chunk-size line pre-encoded
STAMP = b"%17.6f"


def _templates(chat: bool, model: str) -> tuple[bytes, bytes, bytes]:
    """(token chunk, last token chunk, usage chunk) as HTTP chunked-encoding frames, stamps left as ``%s``."""

    def frame(payload: bytes) -> bytes:
        data = b"data: " + payload + b"\n\n"  # holds two %s, each 17 bytes once stamped
        return b"%x\r\n" % len(data % (b"0" * 17, b"0" * 17)) + data + b"\r\n"

    kind = "chat.completion.chunk" if chat else "text_completion"

    def token(finish: str | None) -> bytes:
        choice = {"index": 0, "finish_reason": finish}
        if chat:
            choice["delta"] = {"content": "@@ "}
        else:
            choice["text"] = "@@ "
        obj = {"id": "cmpl-bench", "object": kind, "created": 1, "model": model, "choices": [choice], "server_t": 0}
        text = json.dumps(obj, separators=(",", ":")).replace("@@", "%s").replace('"server_t":0', '"server_t":%s')
        return frame(text.encode())

    usage = (b'{"id":"cmpl-bench","object":"%s","created":1,"model":"%s","choices":[],'
             b'"usage":{"prompt_tokens":%%d,"completion_tokens":%%d,"total_tokens":%%d}}')
    usage = usage % (kind.encode(), model.encode())
    return token(None), token("stop"), usage


def _usage_frame(template: bytes, prompt: int, completion: int) -> bytes:
    data = b"data: " + template % (prompt, completion, prompt + completion) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
_SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n")


def _response(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (status.encode(), ctype, len(body))
    return head + body


class Stream:
    """One stream in flight: where it writes, what is left, when its next event is due."""

    __slots__ = ("conn", "tpl", "last", "usage", "left", "n", "due", "sid", "stamps", "prompt")

    def __init__(self, conn, tpl, last, usage, n, due, sid, prompt):
        self.conn, self.tpl, self.last, self.usage = conn, tpl, last, usage
        self.left, self.n, self.due, self.sid, self.prompt = n, n, due, sid, prompt
        self.stamps = array("d") if sid >= 0 else None


class Server:
    """The wheel and the counters of one process."""

    def __init__(self, args):
        self.ttft, self.itl, self.tick = args.ttft, args.itl, args.tick
        self.tokens, self.max_tokens = args.tokens, args.max_tokens
        model = args.model
        self.chat_tpl = _templates(True, model)
        self.text_tpl = _templates(False, model)
        self.models = _response("200 OK", json.dumps({"object": "list", "data": [
            {"id": model, "object": "model", "created": 1, "owned_by": "bench"}]}).encode())
        self.wheel: dict[int, list[Stream]] = {}
        self.next_slot = 0  # slots below this were fired
        self.timer: asyncio.TimerHandle | None = None
        self.armed = 0  # the slot the timer is set for
        self.loop: asyncio.AbstractEventLoop | None = None
        self.reset()

    def reset(self) -> None:
        self.events = 0
        self.streams = 0
        self.active = 0
        self.lags = array("f")  # seconds each event was sent after its due time
        self.log: list = []  # finished logged streams: [N, arrival, stamps]
        self.window_start = clock()
        self.cpu_start = time.process_time()

    # -- the wheel ------------------------------------------------------------------------------------
    def add(self, st: Stream) -> None:
        slot = math.ceil(st.due / self.tick)  # every event of slot s is due by s * tick: fired then, never early
        if not self.wheel and self.timer is None:  # idle until now: the wheel starts at the present slot
            self.next_slot = math.floor(clock() / self.tick)
        if slot < self.next_slot:
            slot = self.next_slot
        bucket = self.wheel.get(slot)
        if bucket is None:
            self.wheel[slot] = [st]
        else:
            bucket.append(st)
        if self.timer is None or slot < self.armed:
            self._arm(slot)

    def fire(self) -> None:
        self.timer = None
        wheel, tick, itl, lags = self.wheel, self.tick, self.itl, self.lags
        now_slot = math.floor(clock() / tick)
        s = self.next_slot
        if not wheel:
            s = now_slot + 1
        while s <= now_slot:
            bucket = wheel.pop(s, None)
            s += 1
            self.next_slot = s  # a stream added meanwhile (the next request on a connection) goes after this slot
            if bucket is None:
                continue
            for st in bucket:
                conn = st.conn
                if conn.closed:
                    self.active -= 1
                    continue
                self.events += 1
                t = clock()
                stamp = STAMP % t
                st.left -= 1
                if st.left:
                    conn.transport.write(st.tpl % (stamp, stamp))
                else:
                    data = st.last % (stamp, stamp)
                    if st.usage is not None:
                        data += _usage_frame(st.usage, st.prompt, st.n)
                    conn.transport.write(data + _DONE)
                lags.append(t - st.due)
                if st.stamps is not None:
                    st.stamps.append(t)
                if st.left:
                    st.due += itl
                    slot = math.ceil(st.due / tick)
                    if slot < s:
                        slot = s
                    b = wheel.get(slot)
                    if b is None:
                        wheel[slot] = [st]
                    else:
                        b.append(st)
                else:
                    self.active -= 1
                    if st.stamps is not None:
                        self.log.append((st.sid, st.due - (st.n - 1) * itl - self.ttft, st.stamps))
                    conn.stream = None
                    conn.next_request()
        self.next_slot = s
        if wheel:
            nxt = min(wheel) if len(wheel) < 64 else s  # sparse: sleep to the next slot; busy: the next tick
            if self.timer is None or nxt < self.armed:
                self._arm(nxt)

    def _arm(self, slot: int) -> None:
        """The loop's timer for ``slot``, in whole milliseconds rounded up: uvloop's timers count milliseconds,
        and a shorter delay would fire at once, before the slot (a spin)."""
        if self.timer is not None:
            self.timer.cancel()
        delay = math.ceil(max(0.0, slot * self.tick - clock()) * 1000.0) / 1000.0
        self.armed = slot
        self.timer = self.loop.call_later(delay, self.fire)

    # -- endpoints -------------------------------------------------------------------------------------
    def stats(self, lags: bool) -> dict:
        """Counters of the window; with ``lags`` also the send lag percentiles (a sort of every event's lag:
        ask once at the end of a run, not while polling)."""
        wall = clock() - self.window_start
        out = {"pid": os.getpid(), "events": self.events, "streams": self.streams, "active": self.active,
               "wall_s": wall, "cpu_s": time.process_time() - self.cpu_start,
               "events_per_s": self.events / wall if wall > 0 else 0.0, "window_start": self.window_start}
        if lags:
            ls = sorted(self.lags)
            q = lambda p: ls[min(len(ls) - 1, max(0, math.ceil(p * len(ls)) - 1))] if ls else None  # noqa: E731
            out.update(lag_p50_s=q(0.5), lag_p99_s=q(0.99), lag_max_s=ls[-1] if ls else None)
        return out


class Conn(asyncio.Protocol):
    """One client connection: requests one after another (a request that arrives mid-stream waits its turn)."""

    def __init__(self, server: Server):
        self.server = server
        self.buf = b""
        self.stream: Stream | None = None
        self.closed = False
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.stream is None:
            self.next_request()

    def next_request(self) -> None:
        """Serve the next complete request in the buffer, if any (one stream at a time per connection)."""
        while self.stream is None and not self.closed:
            buf = self.buf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            m = _CL.search(buf, 0, end + 2)
            length = int(m.group(1)) if m else 0
            if len(buf) < end + 4 + length:
                return
            head, body = buf[:end], buf[end + 4: end + 4 + length]
            self.buf = buf[end + 4 + length:]
            self.handle(head[: head.find(b"\r\n")] if b"\r\n" in head else head, body)

    def handle(self, line: bytes, body: bytes) -> None:
        srv = self.server
        parts = line.split(b" ")
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
        write = self.transport.write
        if method == b"GET":
            if path.startswith(b"/v1/models"):
                write(srv.models)
            elif path.startswith(b"/health"):
                write(_response("200 OK", b"ok\n", b"text/plain"))
            elif path.startswith(b"/stats"):
                write(_response("200 OK", json.dumps(srv.stats(b"lags" in path)).encode()))
                if b"reset" in path:
                    srv.reset()
            elif path.startswith(b"/dump"):
                log, srv.log = srv.log, []
                write(_response("200 OK", json.dumps([[n, a, s.tolist()] for n, a, s in log]).encode()))
            else:
                write(_response("404 Not Found", b'{"error":"not found"}'))
            return
        chat = path.endswith(b"/chat/completions")
        if method != b"POST" or not (chat or path.endswith(b"/completions")):
            write(_response("404 Not Found", b'{"error":{"message":"not found"}}'))
            return
        m = _MAX_TOKENS.search(body)
        n = min(int(m.group(1)) if m else srv.tokens, srv.max_tokens)
        prompt = max(1, len(body) // 4)
        if not _STREAM_TRUE.search(body) or n < 1:
            text = "x " * n
            choice = {"index": 0, "finish_reason": "stop",
                      **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
            write(_response("200 OK", json.dumps({"id": "cmpl-bench", "object": "chat.completion", "created": 1,
                                                  "model": "bench", "choices": [choice], "usage": {
                                                      "prompt_tokens": prompt, "completion_tokens": n,
                                                      "total_tokens": prompt + n}}).encode()))
            return
        now = clock()
        rid = _REQ_ID.search(body)
        tpl, last, usage = srv.chat_tpl if chat else srv.text_tpl
        st = Stream(self, tpl, last, usage if b"include_usage" in body else None, n, now + srv.ttft,
                    int(rid.group(1)) if rid else -1, prompt)
        self.stream = st
        srv.streams += 1
        srv.active += 1
        write(_SSE_HEAD)
        srv.add(st)


async def serve(args, sock: socket.socket | None = None) -> None:
    loop = asyncio.get_running_loop()
    server = Server(args)
    server.loop = loop
    if sock is None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((args.host, args.port))
    srv = await loop.create_server(lambda: Conn(server), sock=sock, backlog=65535)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    await stop
    srv.close()


def _run(args, sock=None) -> None:
    import gc

    gc.freeze()
    try:
        import uvloop

        uvloop.run(serve(args, sock))
    except ImportError:
        asyncio.run(serve(args, sock))


def measure(args) -> None:
    """Rising stream counts against one process on this core: events/s sent and the send lag behind due."""
    import subprocess
    import urllib.request

    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = str(cpus[0]), str(cpus[-1])
    port = _free_port()
    srv = subprocess.Popen(["taskset", "-c", server_cpu, sys.executable, __file__, "--port", str(port),
                            "--ttft", str(args.itl), "--itl", str(args.itl), "--max-tokens", "1000000"])
    try:
        _wait(port)
        print(f"server pinned to CPU {server_cpu}, clients (raw asyncio sockets) on CPU {client_cpu}; "
              f"ITL {args.itl * 1e3:g} ms; {args.measure:g} s per step")
        print(f"{'streams':>8}{'events/s':>10}{'server CPU':>11}{'lag p50 ms':>11}{'p99 ms':>8}{'max ms':>8}")
        for streams in [int(s) for s in args.streams.split(",")]:
            tokens = int((args.measure + 2) / args.itl) + 1
            client = subprocess.Popen(["taskset", "-c", client_cpu, sys.executable, __file__, "--_client", str(port),
                                       str(streams), str(tokens)])
            time.sleep(1.0 + args.itl)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?reset", timeout=10).read()
            time.sleep(args.measure)
            st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?lags", timeout=10).read())
            client.terminate()
            client.wait(30)
            time.sleep(1.0)
            print(f"{streams:>8}{st['events_per_s']:>10.0f}{st['cpu_s'] / st['wall_s']:>10.0%}"
                  f"{st['lag_p50_s'] * 1e3:>11.2f}{st['lag_p99_s'] * 1e3:>8.2f}{st['lag_max_s'] * 1e3:>8.1f}",
                  flush=True)
    finally:
        srv.terminate()
        srv.wait(10)


_CLIENT_REQ = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s")


async def _raw_clients(port: int, streams: int, tokens: int) -> None:
    """Open ``streams`` connections, each one long stream whose bytes are read and dropped (load for --measure)."""
    body = b'{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}' % tokens
    loop = asyncio.get_running_loop()

    class Sink(asyncio.Protocol):
        def data_received(self, data):
            pass

    for i in range(streams):
        tr, _ = await loop.create_connection(Sink, "127.0.0.1", port)
        tr.write(_CLIENT_REQ % (len(body), body))
        if i % 64 == 63:
            await asyncio.sleep(0.01)  # spread the streams' phases over the ITL a little
    await asyncio.sleep(3600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123, help="0: a free port, printed as PORT=N")
    ap.add_argument("--ttft", type=float, default=0.05, help="seconds from a request's arrival to its first token")
    ap.add_argument("--itl", type=float, default=0.02, help="seconds between tokens")
    ap.add_argument("--tokens", type=int, default=50, help="tokens per stream when the request gives no max_tokens")
    ap.add_argument("--max-tokens", type=int, default=100_000, help="cap on a request's max_tokens")
    ap.add_argument("--tick", type=float, default=0.001, help="timer-wheel slot, seconds")
    ap.add_argument("--model", default="bench")
    ap.add_argument("--procs", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    ap.add_argument("--measure", type=float, default=0.0, help="seconds per step: measure what one process sustains")
    ap.add_argument("--streams", default="500,1000,2000,4000,8000", help="--measure: concurrent streams per step")
    ap.add_argument("--_client", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._client:
        _run_client(*args._client)
        return
    if args.measure:
        measure(args)
        return
    if args.port == 0:
        args.port = _free_port()
    print(f"PORT={args.port}", flush=True)
    if args.procs <= 1:
        _run(args)
        return
    import multiprocessing as mp

    procs = [mp.get_context("fork").Process(target=_run, args=(args,)) for _ in range(args.procs)]
    for p in procs:
        p.start()
    signal.signal(signal.SIGTERM, lambda *a: [p.terminate() for p in procs])
    for p in procs:
        p.join()


def _run_client(port: int, streams: int, tokens: int) -> None:
    try:
        import uvloop

        uvloop.run(_raw_clients(port, streams, tokens))
    except ImportError:
        asyncio.run(_raw_clients(port, streams, tokens))


if __name__ == "__main__":
    main()
