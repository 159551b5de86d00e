"""Raw asyncio HTTP servers that misbehave on purpose, for the fault matrix and the secrets tests.

One :class:`BadServer` serves every misbehaviour at once: the first path segment names it, so a target
``http://127.0.0.1:PORT/reset/v1`` gets a stream reset mid-way. It is raw ``asyncio.start_server``
(no HTTP framework that would tidy a broken answer up), on 127.0.0.1 only, on its own event loop in a
daemon thread, optionally behind TLS with a self-signed certificate made at test time
(:func:`self_signed_cert`). ``hits`` counts requests per mode as the server read them.

``python -m tests.bad_servers [--mode echo]`` runs one in its own process, printing ``PORT=N``; every
request's headers go to stdout as a log line (the "server log" a hostile or careless server keeps).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import socket
import ssl
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

BIG_BYTES = 100 * 1024 * 1024  # the 100 MB body of mode `big`
DRIP_GAP = 0.004  # seconds between the 8-byte pieces of mode `drip`
SLOW_DRIP_GAP = 0.05  # seconds between the 8-byte pieces of mode `slowdrip` (meant to outlast the request timeout)
SLOW_S = 1.0  # mode `slow` answers after this long
STALL_S = 30.0  # mode `stall` sends headers, then nothing for this long
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
FLOOD_MB = 64  # megabytes sent by modes `sse_noline`, `sse_noevent` and `headers_forever`
LONG_BYTES = 2 * 1024 * 1024  # the 200 answers of modes `html_long` and `error_long`
BOMB_MIB = 1024  # what mode `gzip_bomb`'s ~1 MB body inflates to


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(cert, key) PEM files of a fresh self-signed certificate for 127.0.0.1 (cryptography, else openssl)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        _cert_with_cryptography(cert, key)
    except ImportError:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    return cert, key


def _cert_with_cryptography(cert: Path, key: Path) -> None:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    c = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now)
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                        critical=False)
         .sign(k, hashes.SHA256()))
    key.write_bytes(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))


# --- wire helpers ----------------------------------------------------------------------------------


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 301: "Moved Permanently", 401: "Unauthorized", 429: "Too Many Requests",
              500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()] + ["Connection: close", "", ""]
    return "\r\n".join(lines).encode()


def _full(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    return _head(status, {"Content-Type": ctype, "Content-Length": str(len(body))}) + body


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


SSE_HEAD = _head(200, {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked"})
CHUNKED_END = b"0\r\n\r\n"


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _token(text: str) -> bytes:
    return _event({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]})


def good_stream() -> bytes:
    """A complete, valid chat stream: a role chunk, 3 tokens, a usage chunk, [DONE]."""
    role = _event({"id": "x", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    usage = _event({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": USAGE})
    return role + _token("a") + _token("b") + _token("c") + usage + b"data: [DONE]\n\n"


def good_json() -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "a b c"}, "finish_reason": "length"}],
        "usage": USAGE}).encode()


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a clean FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# --- the server ------------------------------------------------------------------------------------


class Req:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.mode = path.split("?", 1)[0].strip("/").split("/", 1)[0]

    @property
    def stream(self) -> bool:
        try:
            return bool(json.loads(self.body).get("stream"))
        except (ValueError, AttributeError):
            return False


class BadServer:
    """Misbehaving HTTP/1.1 server; a mode per first path segment (see ``MODES``). Use as a context manager."""

    def __init__(self, cert: tuple[Path, Path] | None = None, default_mode: str | None = None, log=None, port: int = 0):
        self.cert = cert
        self._port = port
        self.default_mode = default_mode  # for paths whose first segment is not a mode
        self.hits: collections.Counter = collections.Counter()
        self.arrivals: list[float] = []  # perf_counter of each request read
        self.log = log  # a callable given each request's log line (the server's "log")
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task] = set()

    @property
    def scheme(self) -> str:
        return "https" if self.cert else "http"

    def url(self, mode: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{mode}/v1"

    def __enter__(self) -> "BadServer":
        self._thread = threading.Thread(target=self._main, name="bad-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("bad server did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._loop.set_exception_handler(lambda loop, ctx: None)  # failed TLS handshakes are the point
            self._stop = asyncio.Event()
            ctx = None
            if self.cert:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.load_cert_chain(str(self.cert[0]), str(self.cert[1]))
            server = await asyncio.start_server(self._conn, "127.0.0.1", self._port, ssl=ctx)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()
            server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run(main())

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            req = await asyncio.wait_for(self._read(reader), 10)
            if req is None:
                return
            mode = req.mode if req.mode in MODES else (self.default_mode or req.mode)
            self.hits[mode] += 1
            self.arrivals.append(time.perf_counter())
            if self.log is not None:
                self.log(f"{req.method} {req.path} headers={json.dumps(req.headers)}")
            handler = MODES.get(mode)
            if handler is None:
                writer.write(_full(404, b'{"error": {"message": "unknown mode"}}'))
            else:
                await handler(req, writer)
            await writer.drain()
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(task)
            if not writer.transport.is_closing():
                writer.close()

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> Req | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip()] = v.strip()
        n = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
        body = await reader.readexactly(n) if n else b""
        return Req(method, path, headers, body)


# --- modes: each writes its (mis)answer ---------------------------------------------------------------


MODEL_LIST = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'


async def ok(req, w):
    if req.method == "GET" and req.path.split("?", 1)[0].endswith("/models"):  # an OpenAI server's model list
        w.write(_full(200, MODEL_LIST))
    elif req.stream:
        w.write(SSE_HEAD + _chunk(good_stream()) + CHUNKED_END)
    else:
        w.write(_full(200, good_json()))


async def hugeusage(req, w):
    """A valid answer whose usage counts no record can hold (2**40 output tokens, a negative prompt)."""
    usage = {"prompt_tokens": -5, "completion_tokens": 2**40, "total_tokens": 2**40}
    if req.stream:
        tail = _event({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        w.write(SSE_HEAD + _chunk(_token("a") + _token("b") + tail + b"data: [DONE]\n\n") + CHUNKED_END)
    else:
        w.write(_full(200, json.dumps({"id": "x", "object": "chat.completion", "usage": usage, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "a b"}, "finish_reason": "length"}]}).encode()))


async def slow(req, w):
    """A valid answer after SLOW_S seconds."""
    await asyncio.sleep(SLOW_S)
    await ok(req, w)


async def close(req, w):
    """Read the request, close without a byte of answer."""
    w.close()


async def reset(req, w):
    """Headers and the first tokens, then a TCP reset."""
    w.write(SSE_HEAD + _chunk(good_stream()[:120]))
    await w.drain()
    await asyncio.sleep(0.05)
    _rst(w)


async def stall(req, w):
    """Headers, then nothing: the client's timeout must fire."""
    w.write(SSE_HEAD)
    await w.drain()
    await asyncio.sleep(STALL_S)


def _status(status: int, body: bytes | None, ctype="application/json"):
    async def answer(req, w):
        if body is None:
            w.write(_head(status, {"Content-Length": "0"}))
        else:
            w.write(_full(status, body, ctype))
    answer.__doc__ = f"HTTP {status} {'without a body' if body is None else 'with a body'}"
    return answer


async def s503close(req, w):
    """503 whose (empty) body is delimited by closing the connection: no Content-Length."""
    w.write(_head(503, {"Content-Type": "text/plain"}))


async def s500cut(req, w):
    """500 announcing 1000 bytes of body, sending 10, then closing: still http_5xx, not reset."""
    w.write(_head(500, {"Content-Type": "application/json", "Content-Length": "1000"}) + b'{"error": ')


async def badjson(req, w):
    w.write(_full(200, b'{"choices": [ not json'))


async def nochoices(req, w):
    w.write(_full(200, b'{"object": "chat.completion", "usage": {"prompt_tokens": 1}}'))


async def sse_garbage(req, w):
    """Garbage lines (ignored by SSE), then a data line that is not JSON."""
    body = b"this is not sse\n:comment\n\n" + _token("a") + b"data: {garbage\n\n" + b"data: [DONE]\n\n"
    w.write(SSE_HEAD + _chunk(body) + CHUNKED_END)


async def sse_nodone(req, w):
    w.write(SSE_HEAD + _chunk(good_stream().replace(b"data: [DONE]\n\n", b"")) + CHUNKED_END)


async def sse_error(req, w):
    body = _token("a") + _event({"error": {"message": "overloaded", "type": "server_error"}}) + b"data: [DONE]\n\n"
    w.write(SSE_HEAD + _chunk(body) + CHUNKED_END)


async def sse_event_error(req, w):
    body = _token("a") + b'event: error\ndata: {"message": "boom"}\n\n' + b"data: [DONE]\n\n"
    w.write(SSE_HEAD + _chunk(body) + CHUNKED_END)


async def sse_json(req, w):
    """A stream was asked for; a plain JSON body came."""
    w.write(_full(200, good_json()))


async def big(req, w):
    """A 100 MB JSON body with `usage` at its end, sent in 1 MB writes."""
    head = (b'{"id": "x", "object": "chat.completion", '
            b'"choices": [{"index": 0, "message": {"role": "assistant", "content": "')
    tail = (b'"}, "finish_reason": "length"}], '
            b'"usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}')
    fill = BIG_BYTES - len(head) - len(tail)
    w.write(_head(200, {"Content-Type": "application/json", "Content-Length": str(BIG_BYTES)}) + head)
    block = b"a" * (1 << 20)
    while fill > 0:
        n = min(fill, len(block))
        w.write(block[:n])
        fill -= n
        await w.drain()
    w.write(tail)


async def html_long(req, w):
    """A 2 MB HTML page with status 200 (a proxy's or a login page where an API answer was expected)."""
    page = b"<!DOCTYPE html>\n<html><body>\n" + b"<p>lorem ipsum</p>\n" * (LONG_BYTES // 19) + b"</body></html>\n"
    await _write_long(w, _full(200, page, "text/html"))


async def error_long(req, w):
    """A 2 MB `{"error": ...}` JSON body with status 200."""
    body = json.dumps({"error": {"message": "overloaded " + "x" * LONG_BYTES, "type": "server_error"}}).encode()
    await _write_long(w, _full(200, body))


async def _write_long(w, data: bytes) -> None:
    for i in range(0, len(data), 1 << 16):
        w.write(data[i:i + (1 << 16)])
        await w.drain()  # raises once the client has closed


@functools.cache
def gzip_bomb() -> bytes:
    """~1 MB of gzip that inflates to BOMB_MIB MiB: one valid-looking chat answer, ``{"choices": [`` then spaces.

    Never held inflated: 1 MiB of spaces is deflated once with a full flush (which resets the dictionary, so its
    bytes stand alone) and those bytes repeated; the CRC is streamed over the same block."""
    head = b'{"id": "x", "object": "chat.completion", "choices": ['
    tail = b'], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}'
    block = b" " * (1 << 20)

    def deflate(data: bytes, mode: int) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(data) + c.flush(mode)

    crc = zlib.crc32(head)
    for _ in range(BOMB_MIB):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = len(head) + BOMB_MIB * len(block) + len(tail)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + deflate(head, zlib.Z_FULL_FLUSH)
            + deflate(block, zlib.Z_FULL_FLUSH) * BOMB_MIB + deflate(tail, zlib.Z_FINISH)
            + struct.pack("<II", crc, size & 0xFFFFFFFF))


async def gzip_bomb_mode(req, w):
    """Content-Encoding: gzip, ~1 MB on the wire, BOMB_MIB MiB inflated (sent whatever the request accepts)."""
    bomb = gzip_bomb()
    await _write_long(w, _head(200, {"Content-Type": "application/json", "Content-Encoding": "gzip",
                                     "Content-Length": str(len(bomb))}) + bomb)


async def gzip_ok(req, w):
    """A valid chat answer, gzip-compressed (sent whatever the request accepts)."""
    body = zlib.compress(good_json(), wbits=16 + zlib.MAX_WBITS)
    w.write(_head(200, {"Content-Type": "application/json", "Content-Encoding": "gzip",
                        "Content-Length": str(len(body))}) + body)


async def _drip(w, gap: float):
    w.write(_head(200, {"Content-Type": "text/event-stream"}))  # delimited by close
    data = good_stream()
    for i in range(0, len(data), 8):
        w.write(data[i:i + 8])
        await w.drain()
        await asyncio.sleep(gap)


async def drip(req, w):
    """A valid stream, a few bytes at a time (tokens split across reads)."""
    await _drip(w, DRIP_GAP)


async def slowdrip(req, w):
    await _drip(w, SLOW_DRIP_GAP)


async def _flood(w, head: bytes, block: bytes, chunked: bool) -> None:
    w.write(head)
    for _ in range(FLOOD_MB * (1 << 20) // len(block)):
        w.write(_chunk(block) if chunked else block)
        await w.drain()  # raises once the client has closed: it stopped reading, as it should
    if chunked:
        w.write(CHUNKED_END)


async def sse_noline(req, w):
    """`data: ` and then FLOOD_MB megabytes without a line end."""
    await _flood(w, SSE_HEAD + _chunk(_token("a") + b"data: "), b"a" * (1 << 20), True)


async def sse_noevent(req, w):
    """Short `data:` lines for FLOOD_MB megabytes, never a blank line: one event that never ends."""
    await _flood(w, SSE_HEAD + _chunk(_token("a")), b"data: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" * 25000, True)


async def headers_forever(req, w):
    """A status line, then header lines for FLOOD_MB megabytes: a header block that never ends."""
    await _flood(w, b"HTTP/1.1 200 OK\r\n", (b"X-Pad: " + b"a" * 1000 + b"\r\n") * 1000, False)


async def redirect(req, w):
    """301 to the same path under mode `ok` (same origin): a redirect is recorded, never followed."""
    w.write(_head(301, {"Location": req.path.replace("/redirect/", "/ok/", 1), "Content-Length": "0"}))


async def redirect_away(req, w):
    """302 to the same path on another origin: the port the query's ``to=`` names (the model lookup must not
    follow it with the target's headers)."""
    port = req.path.split("to=", 1)[1].split("&")[0] if "to=" in req.path else "1"
    w.write(_head(302, {"Location": f"http://127.0.0.1:{port}/ok/v1/models", "Content-Length": "0"}))


async def echo(req, w):
    """A hostile server: every request header echoed back in a 401 error body."""
    w.write(_full(401, json.dumps({"error": {"message": "bad key", "echo": req.headers}}).encode()))


async def echo_ok(req, w):
    """Headers echoed inside a 200 body that is not what the protocol expects (its text reaches error details)."""
    w.write(_full(200, b"not json: " + json.dumps(req.headers).encode()))


#: what mode `echo_ansi` starts its error body with: a new window title, a bell, the line wiped, a fake verdict
ANSI_BODY = "\x1b]0;pwned\x07\x1b[2K\rverdict: PASSED\x1b[0m "


async def echo_ansi(req, w):
    """A hostile server: a 500 whose body drives a terminal (ESC, BEL, CR) before echoing every request header."""
    w.write(_full(500, (ANSI_BODY + json.dumps(req.headers)).encode(), "text/plain"))


async def health(req, w):
    w.write(_full(200, b'{"status": "ok"}'))


async def metrics(req, w):
    w.write(_full(200, b"refserver:requests_total 1\n", "text/plain"))


async def metrics_echo(req, w):
    """Prometheus text whose labels echo the request's path and query (a metrics URL's token, say)."""
    path = req.path.replace("\\", "\\\\").replace('"', '\\"')
    w.write(_full(200, f'refserver:requests_total{{path="{path}"}} 1\n'.encode(), "text/plain"))


MODES = {
    "ok": ok, "hugeusage": hugeusage, "slow": slow, "close": close, "reset": reset, "stall": stall,
    "s500body": _status(500, b'{"error": {"message": "boom", "type": "server_error"}}'),
    "s500empty": _status(500, None), "s503close": s503close, "s500cut": s500cut,
    "s429body": _status(429, b'{"error": {"message": "slow down", "type": "rate_limit_error"}}'),
    "s429empty": _status(429, None),
    "badjson": badjson, "nochoices": nochoices,
    "sse_garbage": sse_garbage, "sse_nodone": sse_nodone, "sse_error": sse_error,
    "sse_event_error": sse_event_error, "sse_json": sse_json,
    "big": big, "drip": drip, "slowdrip": slowdrip, "echo": echo, "echo_ok": echo_ok,
    "health": health, "metrics": metrics, "metrics_echo": metrics_echo,
    "sse_noline": sse_noline, "sse_noevent": sse_noevent, "headers_forever": headers_forever, "redirect": redirect,
    "redirect_away": redirect_away, "s401": _status(401, b'{"error": {"message": "invalid api key"}}'),
    "echo_ansi": echo_ansi,
    "html_long": html_long, "error_long": error_long, "gzip_bomb": gzip_bomb_mode, "gzip_ok": gzip_ok,
}


def main(argv=None) -> None:
    """Run a BadServer in its own process; print PORT=N; log each request's headers to stdout."""
    import argparse
    import signal

    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default=None, help="mode for paths that do not name one")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # for sigwait, before any thread
    with BadServer(default_mode=a.mode, port=a.port, log=lambda line: print("bad-server:", line, flush=True)) as srv:
        print(f"PORT={srv.port}", flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main()
