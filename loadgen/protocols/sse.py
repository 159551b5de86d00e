"""An incremental server-sent-events parser for the hot path of streaming responses.

Feed it the body bytes as the transport receives them, split anywhere (inside a field name, inside
a CRLF pair, inside a multi-byte UTF-8 character); it returns the ``data`` payload of every event
completed so far, as bytes, in order. It follows the WHATWG event-stream rules that matter to an
inference API:

- lines end with CRLF, LF or CR (a CRLF split across two reads is one line end, not two);
- a blank line dispatches the event; ``data:`` lines of one event are joined with ``\\n``;
  an event without data is not returned;
- one space after the colon is dropped (``data: x`` and ``data:x`` both give ``x``);
- comment lines (``: keep-alive``) and the ``id``/``retry`` fields are ignored, as is a leading BOM;
- ``event: error`` is remembered in :attr:`SSEParser.error` (its data, or ``b""``), since it is how
  some servers report a failure mid-stream;
- an event not terminated by a blank line when the stream ends is discarded (the spec says so, and
  such a stream is broken anyway: a complete OpenAI stream ends with ``data: [DONE]`` and a blank line).

``[DONE]`` is an ordinary payload here; the protocol handler decides what it means.

**Caps.** A line, and the data of one event, may hold at most ``max_bytes`` (default :data:`MAX_EVENT_BYTES`):
a server that sends ``data: `` and then 200 MB without a line end would otherwise grow memory by as much per
stream. Past the cap :attr:`SSEParser.overflow` turns True, nothing more is held or parsed, and the handler
records the stream as broken (``bad_stream``) and stops reading it.

The work per read is a few ``bytes.rfind``/``splitlines`` calls in C and one Python step per *line*,
never per byte; a large event arriving in many reads is joined once, not re-copied on every read. The
common read of an inference stream (whole ``data: {...}`` events ending in LF LF, nothing pending) takes a
shorter path: one ``split`` and one slice per event.
"""

from __future__ import annotations

from loadgen.scenario.model import MAX_EVENT_BYTES

__all__ = ["MAX_EVENT_BYTES", "SSEParser"]

_BOM = b"\xef\xbb\xbf"


class SSEParser:
    """Turns a byte stream into event payloads. One parser per response; not thread-safe."""

    __slots__ = ("_parts", "_held", "_skip_lf", "_first", "_data", "_data_bytes", "_event", "error", "max_bytes",
                 "overflow")

    def __init__(self, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_bytes = max_bytes  # cap of one line and of one event's data
        self.overflow = False  # a line or an event went past max_bytes: the stream is broken, nothing is parsed
        self._parts: list[bytes] = []  # bytes after the last line end, not yet a complete line
        self._held = 0  # bytes in _parts
        self._data_bytes = 0  # bytes in _data
        self._skip_lf = False  # the last read ended with CR: a leading LF of the next read belongs to it
        self._first = True  # nothing processed yet (a BOM may lead the stream)
        self._data: list[bytes] = []  # data lines of the event being read
        self._event = b""  # the `event:` field of the event being read
        #: data of the first ``event: error`` event (``b""`` when it had none); None when none was seen
        self.error: bytes | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """Consume the next bytes of the stream; return the data of each event they complete (nothing once
        :attr:`overflow` is set)."""
        if self.overflow:
            return []
        if data[-2:] == b"\n\n" and not (self._parts or self._data or self._event or self._skip_lf or self._first) \
                and b"\r" not in data:
            return self._whole_events(data)
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 10:  # b"\n"
                data = data[1:]
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if end < 0:
            if data:
                self._parts.append(data)
                self._held += len(data)
                if self._held > self.max_bytes:
                    self._overflow()
            return []
        if self._parts:
            self._parts.append(data[: end + 1])
            block = b"".join(self._parts)
            self._parts.clear()
            self._held = 0
        else:
            block = data[: end + 1] if end + 1 < len(data) else data
        if end + 1 < len(data):
            self._parts.append(data[end + 1 :])
            self._held = len(data) - end - 1
        elif data[end] == 13:  # ends with a bare CR so far: its LF may come next
            self._skip_lf = True
        if self._first:
            self._first = False
            if block.startswith(_BOM):
                block = block[3:]
        events = self._lines(block.splitlines())
        if self._held > self.max_bytes:
            self._overflow()
        return [] if self.overflow else events

    def _overflow(self) -> None:
        self.overflow = True
        self._parts.clear()
        self._data.clear()
        self._held = self._data_bytes = 0

    def _whole_events(self, data: bytes) -> list[bytes]:
        """The common read of a streaming API: whole events, LF line ends, nothing pending. An event that is one
        ``data: `` line is sliced out as it is; any other (comments, fields, several lines) goes through
        :meth:`_lines` with the blank line that ended it, so the result is the same as the general path's."""
        if data[:6] == b"data: " and data.find(b"\n") == len(data) - 2:  # one event of one line: the usual read
            if len(data) - 2 > self.max_bytes:
                self._overflow()
                return []
            return [data[6:-2]]
        events: list[bytes] = []
        for block in data[:-2].split(b"\n\n"):
            if block[:6] == b"data: " and b"\n" not in block:
                if len(block) > self.max_bytes:
                    self._overflow()
                    return []
                events.append(block[6:])
            else:
                lines = block.split(b"\n")
                lines.append(b"")
                events.extend(self._lines(lines))
                if self.overflow:
                    return []
        return events

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        buf = self._data
        cap = self.max_bytes
        for line in lines:
            if len(line) > cap:
                self._overflow()
                return []
            if not line:  # blank line: dispatch
                if self._event:
                    if self._event == b"error" and self.error is None:
                        self.error = b"\n".join(buf)
                    self._event = b""
                if buf:
                    events.append(buf[0] if len(buf) == 1 else b"\n".join(buf))
                    buf.clear()
                    self._data_bytes = 0
            elif line.startswith(b"data:"):
                buf.append(line[6:] if line[5:6] == b" " else line[5:])
                self._data_bytes += len(line)
                if self._data_bytes > cap:
                    self._overflow()
                    return []
            elif line[0] == 58:  # b":" comment / keep-alive
                continue
            else:
                name, colon, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if name == b"data":  # "data" without a colon: an empty data line
                    buf.append(value)
                    self._data_bytes += len(value)
                elif name == b"event":
                    self._event = value
                # id, retry and unknown fields carry nothing a latency measurement needs
        return events

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished line or event are held (the stream stopped mid-event)."""
        return bool(self._parts or self._data or self._event)
