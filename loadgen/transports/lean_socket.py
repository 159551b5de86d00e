"""The lean transport's socket, read with the kernel's receive timestamps (Linux).

A client that stamps a token when its own code reads the socket stamps it late by however long it took to
get there: its event loop was busy with other streams, a record flush held the GIL, the core was saturated.
Those are the client's delays, not the server's, and at thousands of streams they grow to milliseconds. The
kernel stamps every packet as it arrives (``SO_TIMESTAMPNS``, a software receive timestamp, before any
process runs), and ``recvmsg`` hands that stamp over with the bytes: a token's time is then the moment its
bytes reached this host, whenever the client got to read them.

:class:`StampedSocket` is the small part of ``asyncio.Transport`` that :class:`~loadgen.transports.lean_conn.Conn`
uses (``write``, ``abort``, ``is_closing``) over a non-blocking socket the event loop watches
(``add_reader``); each read is one ``recvmsg_into`` whose stamp goes to ``protocol.data_received(data, t)``.

The stamp, on the program's one clock: the kernel's is CLOCK_REALTIME, turned into ``perf_counter`` time
(CLOCK_MONOTONIC on Linux) by an offset measured as a tight pair of readings and measured again every
:data:`OFFSET_EVERY_S`. TCP gives the stamp of the *last* packet a read took, so bytes that waited in the
socket get a time at or before the read's (never later). A stamp that does not fall between the last
write or read and now (no stamp came; the wall clock was stepped between two offset readings) is replaced by
the read time, as without stamps: the lean client reads only answers, which cannot arrive before their
request was written. The target's ``receive_stamps`` chooses (:func:`loadgen.transports.factory.receive_stamps`);
``read`` stamps every read by the client's clock when its code runs, as every other transport does.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections import deque

clock = time.perf_counter
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value; Python names it from 3.12 on
_CMSG_SPACE = 64  # room for one struct timespec (16 bytes) and its header
READ_BYTES = 1 << 16
OFFSET_EVERY_S = 1.0
_TIMESPEC = struct.Struct("qq").unpack_from


def available() -> bool:
    """Whether this platform stamps received packets for ``recvmsg`` this way (Linux)."""
    return sys.platform == "linux" and hasattr(socket.socket, "recvmsg")


class Stamps:
    """What the sockets of one transport (one event loop) share: the offset of CLOCK_REALTIME from
    ``perf_counter`` time in nanoseconds, from the tightest of a few reading pairs, and one read buffer (each read
    is copied out of it at once: a fresh 64 KiB buffer per read costs more than the read)."""

    __slots__ = ("ns", "at", "bufs", "view")

    def __init__(self) -> None:
        self.ns = 0
        self.at = -OFFSET_EVERY_S
        buf = bytearray(READ_BYTES)
        self.bufs, self.view = [buf], memoryview(buf)
        self.measure()

    def measure(self) -> None:
        best = None
        for _ in range(5):
            a = time.perf_counter_ns()
            r = time.clock_gettime_ns(time.CLOCK_REALTIME)
            b = time.perf_counter_ns()
            if best is None or b - a < best[0]:
                best = (b - a, r - (a + b) // 2)
        self.ns = best[1]
        self.at = clock()


class StampedSocket:
    """A connected non-blocking TCP socket driven by the event loop, for one protocol (see the module)."""

    __slots__ = ("_sock", "_fd", "_loop", "_protocol", "_stamps", "_out", "_closing", "_last", "_recv", "_feed")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, protocol, stamps: Stamps):
        self._sock, self._loop, self._protocol, self._stamps = sock, loop, protocol, stamps
        self._fd = sock.fileno()
        self._recv = sock.recvmsg_into
        self._feed = protocol.data_received  # with the read's stamp: (data, t)
        self._out: deque[memoryview] = deque()  # bytes the socket did not take yet
        self._closing = False
        self._last = clock()  # the last write's time or read's stamp: a read's stamp is not before it
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    @classmethod
    async def connect(cls, loop: asyncio.AbstractEventLoop, protocol_factory, host: str, port: int,
                      stamps: Stamps) -> tuple["StampedSocket", object]:
        """Connect to ``host:port`` (an IP address): ``(transport, protocol)``, as ``loop.create_connection`` gives
        them; OSError when that fails."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:  # a kernel (or sandbox) without it: no stamp comes, every read keeps its read time
                pass
            await loop.sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        protocol = protocol_factory()
        return cls(sock, loop, protocol, stamps), protocol

    # -- reading -------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        stamps = self._stamps
        try:
            n, anc, _flags, _addr = self._recv(stamps.bufs, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = clock()
        if not n:
            self._protocol.eof_received()
            self._lost(None)
            return
        data = stamps.view[:n].tobytes()
        if anc:
            if now - stamps.at > OFFSET_EVERY_S:
                stamps.measure()
            sec, ns = _TIMESPEC(anc[0][2])
            t = (sec * 1_000_000_000 + ns - stamps.ns) * 1e-9
            if not self._last <= t <= now:
                t = now
        else:
            t = now
        self._last = t
        self._feed(data, t)

    # -- writing -------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self._closing:
            return
        self._last = clock()  # what answers this cannot have arrived before it was sent
        if self._out:
            self._out.append(memoryview(data))
            return
        try:
            n = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._lost(exc)
            return
        if n < len(data):
            self._out.append(memoryview(data)[n:])
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        out = self._out
        while out:
            chunk = out[0]
            try:
                n = self._sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(exc)
                return
            if n < len(chunk):
                out[0] = chunk[n:]
                return
            out.popleft()
        self._loop.remove_writer(self._fd)

    # -- the end -------------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing

    def abort(self) -> None:
        """Close now, unsent bytes dropped; the protocol's ``connection_lost(None)`` follows from the loop."""
        self._lost(None)

    def _lost(self, exc: BaseException | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._out.clear()
        loop = self._loop
        loop.remove_reader(self._fd)
        loop.remove_writer(self._fd)
        self._sock.close()
        self._feed = None  # the protocol holds this transport: no cycle left for the garbage collector
        loop.call_soon(self._call_lost, exc)

    def _call_lost(self, exc: BaseException | None) -> None:
        protocol, self._protocol = self._protocol, None
        protocol.connection_lost(exc)
