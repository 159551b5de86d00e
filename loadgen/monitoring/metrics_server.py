"""The HTTP server of ``latbench watch``'s ``/metrics``: one thread's event loop, so a client that connects and sends
nothing holds a socket for a few seconds, never a thread.

prometheus_client's own server takes a thread per connection and never times a read out: a hundred half-open
connections made a hundred threads, and kept them. Here:

* a request's head must arrive within ``read_timeout_s`` of the connection, and the answer be taken within as long
  again, or the connection is closed (a silent client, half a request, one that does not read);
* at most ``max_connections`` are open: one more closes the oldest that has not sent its request yet (a scraper sends
  at once, so a flood of idle connections cannot lock it out), or itself when every open one is being answered;
* each scrape is rendered by prometheus_client's WSGI app (its formats, gzip, ``name[]``) in a pool of
  ``render_threads`` threads; one request per connection (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote, urlsplit

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("latbench.watch")

READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
RENDER_THREADS = 2
MAX_HEAD_BYTES = 16384  # a request line and headers longer than this are not a scrape


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), IPv4 or IPv6 as ``host`` resolves; OSError if
    the port is taken or the address is not this host's."""
    family, _, _, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                               flags=socket.AI_PASSIVE)[0]
    return socket.create_server(addr[:2], family=family, backlog=128)


class MetricsServer:
    """``registry`` served over HTTP on ``host:port`` by :meth:`start` until :meth:`stop`.

    ``read_timeout_s`` (s): how long a connection may take to send its request head, and to take the answer;
    ``max_connections``: open connections at most; ``render_threads``: threads rendering scrapes at most (with the
    loop's own thread, all the threads the server ever runs). Binding happens here: OSError when it cannot."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, read_timeout_s: float = READ_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS, render_threads: int = RENDER_THREADS):
        self.read_timeout_s = read_timeout_s
        self.max_connections = max(1, max_connections)
        self._app = make_wsgi_app(registry)
        self._sock = listen(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._pool = ThreadPoolExecutor(max(1, render_threads), thread_name_prefix="latbench-metrics-render")
        self._open: dict[asyncio.StreamWriter, bool] = {}  # connection -> still waiting for its request; oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="latbench-metrics-http", daemon=True)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    def start(self) -> None:
        """Serve in a thread of its own; returns once the server accepts connections."""
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """Close the listener and every connection; returns once the server's thread has ended (5 s at most)."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop ended already
                pass
        self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()

    # -- the loop's thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # start() raises it again when it came before serving
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._sock, limit=MAX_HEAD_BYTES)
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for writer in list(self._open):
                writer.transport.abort()

    def _admit(self, writer: asyncio.StreamWriter) -> None:
        self._open[writer] = True
        if len(self._open) <= self.max_connections:
            return
        victim = next((w for w, waiting in self._open.items() if waiting and w is not writer), writer)
        del self._open[victim]
        victim.transport.abort()  # its read ends at once (IncompleteReadError), and with it its connection

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._admit(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout_s)
            if writer not in self._open:
                return
            self._open[writer] = False
            response = await asyncio.get_running_loop().run_in_executor(self._pool, self._respond, head)
            writer.write(response)
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), self.read_timeout_s)  # sent, or given up on
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # too slow, too long, or gone: dropped
        finally:
            self._open.pop(writer, None)
            writer.transport.abort()

    def _respond(self, head: bytes) -> bytes:
        """The whole HTTP response to a request head (in a render thread)."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response("400 Bad Request", [("Content-Type", "text/plain")], b"bad request line\n")
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        url = urlsplit(parts[1])
        environ = {"REQUEST_METHOD": parts[0], "PATH_INFO": unquote(url.path), "QUERY_STRING": url.query,
                   "HTTP_ACCEPT": headers.get("accept"), "HTTP_ACCEPT_ENCODING": headers.get("accept-encoding")}
        answer: dict = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            answer.update(status=status, headers=response_headers)

        try:
            body = b"".join(self._app(environ, start_response))
        except Exception:
            log.exception("the watch metrics could not be rendered")
            return _response("500 Internal Server Error", [("Content-Type", "text/plain")], b"metrics failed\n")
        return _response(answer["status"], answer["headers"], body)


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}",
             "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
