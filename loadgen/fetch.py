"""The one HTTP client for every request latbench makes besides its load: the model lookup, the pre-flight
check, ``/tokenize``, the metrics scrape, a managed server's health.

Load goes through :mod:`loadgen.transports` (timed, pooled, streamed); these requests are few and must never
hurt the run or leak what they carry. So every one of them, whoever makes it:

- has an **overall deadline** (connect, headers and body together): a watchdog shuts the socket down when it
  passes, so a server that dribbles its answer a byte a second cannot hold the run;
- reads at most ``max_bytes`` of body, counted after inflating a gzip or deflate answer (a small compressed
  body cannot grow past the cap either);
- follows a redirect only **within its origin** (same scheme, host and port), at most :data:`MAX_REDIRECTS`
  times; a redirect to another origin is refused (:class:`FetchError` of kind ``redirect``), so the headers
  written for one server (its credentials) never reach another;
- fails with one exception, :class:`FetchError`, whose ``kind`` says what went wrong (``connect``, ``dns``,
  ``tls``, ``timeout``, ``too_large``, ``redirect``, ``protocol``) and whose text names the URL without its
  userinfo or query.

:func:`fetch` is the call for synchronous code, :func:`afetch` the same from a running event loop (in a worker
thread, so the loop keeps sending load); :class:`Client` keeps one connection per origin for a caller that asks
many times (``/tokenize``).
"""

from __future__ import annotations

import asyncio
import http.client
import json as _json
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from loadgen.errors import TargetError

DEADLINE_S = 5.0  # the default overall deadline of one request
MAX_BYTES = 1 << 20  # the default cap on a body (1 MiB)
MAX_REDIRECTS = 3
READ_CHUNK = 1 << 16
REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(TargetError):
    """A request of latbench's own that got no usable answer. ``kind``: connect | dns | tls | timeout |
    too_large | redirect | protocol; ``url``: the URL asked, without userinfo or query."""

    def __init__(self, kind: str, url: str, detail: str):
        self.kind, self.url, self.detail = kind, url, detail
        super().__init__(f"{url}: {detail}")


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names lower-cased; a repeated header's values joined by ", "
    body: bytes
    url: str  # the URL that answered (after redirects within the origin)
    redirects: list[str] = field(default_factory=list)  # the URLs redirected from, in order

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def json(self):
        """The body as JSON; ValueError when it is not."""
        return _json.loads(self.body)


def safe_url(url: str) -> str:
    """``url`` as it may be shown: no userinfo, no query, no fragment."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{p.port}" if p.port else ""
        return f"{p.scheme}://{host}{port}{p.path}"
    except ValueError:
        return "(a URL that does not parse)"


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the port defaulted by scheme."""
    p = urlsplit(url)
    return p.scheme.lower(), (p.hostname or "").lower(), p.port or (443 if p.scheme.lower() == "https" else 80)


class _Inflater:
    """Inflates a gzip or deflate body chunk by chunk, never past ``limit`` bytes out (None: identity)."""

    def __init__(self, encoding: str):
        enc = encoding.strip().lower()
        if enc in ("", "identity"):
            self._z = None
        elif enc in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise ValueError(f"a body in an encoding latbench did not ask for ({encoding!r})")

    def feed(self, chunk: bytes, room: int) -> tuple[bytes, bool]:
        """(bytes out, at most ``room`` + 1 of them; whether more would have come out of this chunk)."""
        if self._z is None:
            return chunk, False
        out = self._z.decompress(chunk, room + 1)
        return out, bool(self._z.unconsumed_tail)


class Client:
    """Requests to one or more origins, one kept-alive connection each; thread-safe (one request at a time).

    ``headers`` go with every request (a target's own: its credentials), to the origin asked and to no other."""

    def __init__(self, headers: dict[str, str] | None = None, deadline_s: float = DEADLINE_S,
                 max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS):
        self.headers = dict(headers or {})
        self.deadline_s, self.max_bytes, self.max_redirects = deadline_s, max_bytes, max_redirects
        self._conns: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()

    def get(self, url: str, **kw) -> Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, json=None, **kw) -> Response:
        return self.request("POST", url, json=json, **kw)

    def request(self, method: str, url: str, *, json=None, body: bytes | None = None,
                headers: dict[str, str] | None = None, deadline_s: float | None = None,
                max_bytes: int | None = None) -> Response:
        """One request and its answer, redirects within the origin followed. Any status is a Response; no answer
        (or one over the cap, or a redirect elsewhere) is a FetchError."""
        hdrs = {**self.headers, **(headers or {})}
        if json is not None:
            body = _json.dumps(json).encode()
            hdrs.setdefault("Content-Type", "application/json")
        deadline = time.monotonic() + (self.deadline_s if deadline_s is None else deadline_s)
        cap = self.max_bytes if max_bytes is None else max_bytes
        first = origin(url)
        seen: list[str] = []
        with self._lock:
            while True:
                resp = self._once(method, url, body, hdrs, deadline, cap)
                location = resp.headers.get("location")
                if resp.status not in REDIRECTS or not location or self.max_redirects == 0:  # 0: the 3xx itself
                    return Response(resp.status, resp.headers, resp.body, url, seen)
                target = urljoin(url, location)
                if origin(target) != first:
                    raise FetchError("redirect", safe_url(url), f"HTTP {resp.status} to another origin "
                                     f"({safe_url(target)}): not followed (its headers are not for that server)")
                if len(seen) >= self.max_redirects:
                    raise FetchError("redirect", safe_url(url), f"more than {self.max_redirects} redirects")
                seen.append(url)
                if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                    method, body = "GET", None
                    hdrs = {k: v for k, v in hdrs.items() if k.lower() != "content-type"}
                url = target

    def _connection(self, url: str, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        key = origin(url)
        conn = self._conns.get(key)
        if conn is not None:
            return conn, True
        scheme, host, port = key
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
        elif scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        else:
            raise FetchError("protocol", safe_url(url), f"not an http(s) URL ({scheme or 'no scheme'})")
        self._conns[key] = conn
        return conn, False

    def _once(self, method: str, url: str, body: bytes | None, headers: dict[str, str], deadline: float,
              cap: int) -> Response:
        shown = safe_url(url)
        p = urlsplit(url)
        path = (p.path or "/") + (f"?{p.query}" if p.query else "")
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more on a new one
            left = deadline - time.monotonic()
            if left <= 0:
                raise FetchError("timeout", shown, "no answer within the deadline")
            conn, reused = self._connection(url, left)
            conn.timeout = left
            if conn.sock is not None:
                conn.sock.settimeout(left)
            watchdog = _Watchdog(conn, left)
            try:
                conn.request(method, path, body, {"Accept-Encoding": "gzip, deflate", **headers})
                raw = conn.getresponse()
                out = self._read(raw, cap, shown, watchdog)
                if raw.will_close:
                    self._drop(url)
                return out
            except FetchError:
                self._drop(url)
                raise
            except (OSError, http.client.HTTPException) as exc:
                self._drop(url)
                if watchdog.fired:
                    raise FetchError("timeout", shown, "no answer within the deadline") from None
                if reused and attempt == 0 and isinstance(exc, (ConnectionError, http.client.RemoteDisconnected,
                                                                http.client.BadStatusLine)):
                    continue
                kind, detail = _classify(exc)
                raise FetchError(kind, shown, detail) from None
            finally:
                watchdog.cancel()
        raise AssertionError("unreachable")

    def _read(self, raw: http.client.HTTPResponse, cap: int, shown: str, watchdog: "_Watchdog") -> Response:
        headers: dict[str, str] = {}
        for k, v in raw.getheaders():
            k = k.lower()
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        try:
            inflater = _Inflater(headers.get("content-encoding", ""))
        except ValueError as exc:
            raise FetchError("protocol", shown, str(exc)) from None
        out = bytearray()
        while True:
            chunk = raw.read1(READ_CHUNK)
            if not chunk or watchdog.fired:
                break
            try:
                data, more = inflater.feed(chunk, cap - len(out))
            except zlib.error as exc:
                raise FetchError("protocol", shown, f"a compressed body that does not inflate ({exc})") from None
            out += data
            if len(out) > cap or more:
                raise FetchError("too_large", shown, f"an answer over {_size(cap)}: not read further")
        if watchdog.fired:
            raise FetchError("timeout", shown, "no answer within the deadline")
        raw.close()  # read to its end: the connection may carry the next request
        return Response(raw.status, headers, bytes(out), "")

    def _drop(self, url: str) -> None:
        conn = self._conns.pop(origin(url), None)
        if conn is not None:
            conn.close()


class _Watchdog:
    """Shuts the connection's socket down at the deadline, so that a read blocked on a slow server returns."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float):
        self.conn, self.fired = conn, False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            try:  # Linux still hands over data that arrives after SHUT_RD: a read that must wait now times out
                sock.settimeout(0.001)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def _classify(exc: BaseException) -> tuple[str, str]:
    """(kind, a short description) of a failed request's exception; never the exception's repr of a URL."""
    if isinstance(exc, socket.gaierror):
        return "dns", f"the host name does not resolve ({exc.strerror or exc})"
    if isinstance(exc, ssl.SSLError):
        return "tls", f"TLS failed ({exc.reason or type(exc).__name__})"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout", "no answer within the deadline"
    if isinstance(exc, ConnectionRefusedError):
        return "connect", "connection refused (nothing listens there)"
    if isinstance(exc, http.client.HTTPException):
        return "protocol", f"not an HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError):
        return "connect", f"{exc.strerror or type(exc).__name__}"
    return "protocol", type(exc).__name__


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def fetch(method: str, url: str, *, headers: dict[str, str] | None = None, json=None, body: bytes | None = None,
          deadline_s: float = DEADLINE_S, max_bytes: int = MAX_BYTES, max_redirects: int = MAX_REDIRECTS) -> Response:
    """One request on a connection of its own (see :class:`Client` for the rules). Seconds, bytes."""
    with Client(headers, deadline_s, max_bytes, max_redirects) as client:
        return client.request(method, url, json=json, body=body)


async def afetch(method: str, url: str, **kw) -> Response:
    """:func:`fetch` from a running event loop: in a worker thread, the deadline enforced there."""
    return await asyncio.to_thread(fetch, method, url, **kw)
