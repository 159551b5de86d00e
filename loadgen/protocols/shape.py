"""What a non-streamed answer of each API must look like, checked at every size in bounded memory.

One path for one concern: the protocols' JSON handlers (:mod:`loadgen.protocols.openai`,
:mod:`loadgen.protocols.shared`) read a body through a :class:`BodyReader` and judge it with
:func:`shape_problem`; :func:`body_problem` does the same for a whole body in hand (a pre-flight check).

A body up to :data:`MAX_PARSED_BODY` bytes is kept and parsed whole. A longer one is never held: it is scanned
as it arrives (:class:`_Scan`): it must be one JSON object, its brackets balanced and its strings closed, with
nothing after it; each top-level value up to :data:`_CAPTURE` bytes is kept and parsed (``usage``, ``error``,
``object``...), a longer one is a :class:`Large` (its kind and first bytes). So a 2 MB HTML page, a 2 MB
``{"error": ...}`` or a body cut short is a problem however long it is, and a 10 MB answer with ``usage`` at its
end still has its usage read.
"""

from __future__ import annotations

import json
import re

__all__ = ["MAX_PARSED_BODY", "BodyReader", "Large", "body_problem", "brief", "shape_problem"]

#: A JSON body is kept and parsed whole up to this many bytes; a longer one is scanned (see the module doc).
MAX_PARSED_BODY = 1 << 20
_CAPTURE = 1 << 16  # a top-level value of a scanned body is kept and parsed when at most this long
_MAX_DEPTH = 1000  # nesting past this is refused (json.loads would hit the recursion limit near it)
DETAIL = 200  # characters of a body quoted in a problem, at most

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def brief(data: bytes | str, n: int = DETAIL) -> str:
    """The first ``n`` characters of ``data``, control characters escaped (a log line stays one line)."""
    text = data[: n * 4].decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text[:n]
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


class Large:
    """A top-level value of a scanned body too long to keep: its kind (``object``, ``list``, ``string``, ``other``)
    and its first bytes. Truthy, as a long value is."""

    __slots__ = ("kind", "head")

    def __init__(self, kind: str, head: bytes):
        self.kind, self.head = kind, head

    def __repr__(self) -> str:
        return f"Large({self.kind}, {brief(self.head, 60)!r})"


_KINDS = {ord("{"): "object", ord("["): "list", ord('"'): "string"}


def is_list(v) -> bool:
    """``v`` is a JSON list, parsed or too long to parse."""
    return isinstance(v, list) or (isinstance(v, Large) and v.kind == "list")


def _not_json(body: bytes) -> str:
    start = body.lstrip()
    if not start:
        return "an empty body" if not body else "a body of whitespace only"
    if start[:1] == b"[":
        return f"not a JSON object: starts '{brief(start, 60)}'"
    return f"not JSON: starts '{brief(start, 60)}'"


_OPEN = {ord("{"): ord("}"), ord("["): ord("]")}
_NESTED = re.compile(rb'[^"{}\[\]]*')  # below the top level: up to a string or a bracket
_TOP = re.compile(rb'[^"{}\[\],:]*')  # in the top-level object: up to a string, a bracket, a comma or a colon
_WS = re.compile(rb"[ \t\r\n]*")
_BEFORE, _IN, _AFTER = 0, 1, 2
_QUOTE, _BACKSLASH, _COLON, _COMMA, _CLOSE_OBJ = ord('"'), ord("\\"), ord(":"), ord(","), ord("}")


class _Scan:
    """The top-level structure of one JSON object, read as it arrives, holding at most ``_CAPTURE`` bytes of it.

    Checked: one object, brackets balanced and nested at most ``_MAX_DEPTH`` deep, strings closed, nothing but
    whitespace after it, and each top-level key and short value valid JSON. ``values``: top-level key -> parsed
    value, or :class:`Large`. ``problem``: the first thing wrong (nothing more is read after it)."""

    __slots__ = ("values", "problem", "_state", "_stack", "_in_str", "_esc", "_key", "_cap", "_over", "_head")

    def __init__(self):
        self.values: dict = {}
        self.problem: str | None = None
        self._state = _BEFORE
        self._stack = bytearray()  # the closing bracket of every open container
        self._in_str = False  # inside a string at the end of the last chunk
        self._esc = False  # ... right after a backslash
        self._key: str | None = None  # the top-level key whose value is being read; None: reading a key
        self._cap = bytearray()  # the bytes of the top-level key or value being read (up to _CAPTURE)
        self._over = False  # ... which ran past _CAPTURE
        self._head = b""  # the first bytes of the body (for a problem's quote)

    def _keep(self, data: bytes, a: int, b: int) -> None:
        if b > a and len(self._stack) >= 1 and not self._over:
            room = _CAPTURE - len(self._cap)
            if b - a > room:
                self._cap += data[a : a + room]
                self._over = True
            else:
                self._cap += data[a:b]

    def _string(self, data: bytes, i: int) -> int:
        """From inside a string at ``i``: the index after its closing quote, or ``len(data)`` (still inside)."""
        n = len(data)
        if self._esc:
            self._esc = False
            i += 1
        start = i
        while True:
            q = data.find(b'"', i)
            if q < 0:
                k = n
                while k > start and data[k - 1] == _BACKSLASH:
                    k -= 1
                self._esc = (n - k) % 2 == 1
                self._in_str = True
                return n
            k = q
            while k > start and data[k - 1] == _BACKSLASH:
                k -= 1
            if (q - k) % 2 == 0:  # not escaped
                self._in_str = False
                return q + 1
            i = q + 1

    def feed(self, data: bytes) -> None:
        if self.problem is not None:
            return
        if not self._head:
            self._head = data[:DETAIL]
        i, n = 0, len(data)
        stack = self._stack
        while i < n:
            if self._in_str:
                j = self._string(data, i)
                self._keep(data, i, j)
                i = j
                continue
            if self._state != _IN:
                i = _WS.match(data, i).end()
                if i >= n:
                    break
                if self._state == _AFTER:
                    self.problem = f"not JSON: more after the object ('{brief(data[i:], 60)}')"
                    return
                if data[i] != ord("{"):
                    self.problem = _not_json(self._head if self._head.strip() else data[i:])
                    return
                self._state = _IN
                stack.append(_CLOSE_OBJ)
                i += 1
                continue
            j = (_NESTED if len(stack) > 1 else _TOP).match(data, i).end()
            self._keep(data, i, j)
            if j >= n:
                break
            c = data[j]
            if c == _QUOTE:
                self._in_str, self._esc = True, False
                self._keep(data, j, j + 1)
                i = j + 1
                continue
            if c in _OPEN:
                if len(stack) >= _MAX_DEPTH:
                    self.problem = f"JSON nested deeper than {_MAX_DEPTH}"
                    return
                self._keep(data, j, j + 1)
                stack.append(_OPEN[c])
            elif c in (_COLON, _COMMA) or (c == _CLOSE_OBJ and len(stack) == 1):  # at the top level
                if not self._top(c):
                    return
            else:  # a closing bracket below the top level
                if stack[-1] != c:
                    self.problem = f"not JSON: '{chr(c)}' closes '{chr(stack[-1])}'"
                    return
                stack.pop()
                self._keep(data, j, j + 1)
            i = j + 1

    def _top(self, c: int) -> bool:
        """A colon, comma or the closing brace of the top-level object: a key or a value ends."""
        raw = bytes(self._cap).strip()
        self._cap.clear()
        over, self._over = self._over, False
        if self._key is None:  # a key ends: at a colon, or at the end of an empty object
            if c == _COLON:
                try:
                    key = json.loads(raw) if not over else None
                except ValueError:
                    key = None
                if not isinstance(key, str):
                    self.problem = f"not JSON: a key that is not a string ('{brief(raw, 60)}')"
                    return False
                self._key = key
                return True
            if c == _CLOSE_OBJ and not raw and not self.values:
                self._close()
                return True
            self.problem = f"not JSON: '{chr(c)}' where a key was expected"
            return False
        if c == _COLON:
            self.problem = f"not JSON: ':' after the value of {self._key!r}"
            return False
        if over:
            value = Large(_KINDS.get(raw[0], "other"), raw[:DETAIL])
        else:
            try:
                value = json.loads(raw)
            except ValueError:
                self.problem = f"not JSON: the value of {self._key!r} starts '{brief(raw, 60)}'"
                return False
        self.values[self._key] = value
        self._key = None
        if c == _CLOSE_OBJ:
            self._close()
        return True

    def _close(self) -> None:
        self._stack.clear()
        self._state = _AFTER

    def finish(self) -> str | None:
        """The problem of the whole body, once it ended."""
        if self.problem is None and self._state != _AFTER:
            self.problem = "not JSON: the body ended inside the object (cut short?)"
        return self.problem


class BodyReader:
    """A non-streamed body, fed as it arrives; :meth:`result` once it ended. Holds at most
    :data:`MAX_PARSED_BODY` bytes (plus ``_CAPTURE`` of a scanned body's top-level value)."""

    __slots__ = ("_parts", "size", "_scan")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.size = 0
        self._scan: _Scan | None = None

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        if self._scan is not None:
            self._scan.feed(data)
        elif self.size <= MAX_PARSED_BODY:
            self._parts.append(data)
        else:  # too long to keep: scanned from its start, in bounded memory
            self._scan = _Scan()
            for part in self._parts:
                self._scan.feed(part)
            self._parts = []
            self._scan.feed(data)

    def result(self) -> tuple[object, str | None]:
        """``(the parsed body, None)``, or ``(None, what is wrong)`` when it is not JSON. A scanned body's value is
        the dict of its top-level keys, a long value as a :class:`Large`."""
        if self._scan is not None:
            problem = self._scan.finish()
            return (None, problem) if problem else (self._scan.values, None)
        body = b"".join(self._parts)
        try:
            return json.loads(body), None
        except (ValueError, RecursionError):
            return None, _not_json(body)


# --- what each API answers ----------------------------------------------------------------------------


def _error_text(v) -> str:
    return brief(v.head) if isinstance(v, Large) else brief(json.dumps(v, ensure_ascii=False))


#: api -> the top-level list a successful answer holds (None: a key that must be present, any kind)
_LISTS = {
    "openai-chat": "choices",
    "openai-completions": "choices",
    "embeddings": "data",
    "anthropic-messages": "content",
    "openai-responses": "output",
    "rerank": "results",
    "kserve-v2": "outputs",
}
_PRESENT = {"triton-generate": "text_output",  # its answer tensor, named by target.kserve.text_output
            "openai-transcriptions": "text"}
APIS = ("http", *_LISTS, *_PRESENT)


def shape_problem(api: str, obj, key: str | None = None) -> str | None:
    """What is wrong with ``obj`` (a parsed body, or a scanned one's top-level dict) as an answer of ``api``;
    None when it is one. ``key`` replaces the API's answer key (triton-generate's tensor name)."""
    if api == "http":
        return None
    if not isinstance(obj, dict):
        return f"not a JSON object: a {type(obj).__name__}"
    err = obj.get("error")
    if err:
        return "an error object: " + _error_text(err)
    if api == "anthropic-messages" and obj.get("type") == "error":
        return "an error object: " + _error_text(err)
    if api == "openai-responses" and obj.get("status") == "failed":
        return "status failed: " + _error_text(err)
    if api in _LISTS:
        name = key or _LISTS[api]
        if not is_list(obj.get(name)):
            return f"no {name!r} list in the response"
    elif api in _PRESENT:
        name = key or _PRESENT[api]
        if name not in obj:
            return f"no {name!r} in the response"
    else:
        raise ValueError(f"unknown api {api!r}; expected one of {', '.join(APIS)}")
    return None


def body_problem(api: str, body: bytes, content_type: str | None = None) -> str | None:
    """None when ``body`` is a valid non-streamed answer of ``api`` (``http``: any body), else a short sentence of
    what is wrong, quoting at most ~200 characters of the body with control characters escaped. The same rules
    as the protocols' handlers apply to a response (one path: :class:`BodyReader` and :func:`shape_problem`).
    ``content_type``, when given, is named in the sentence of a body that is not JSON."""
    if api == "http":
        return None
    reader = BodyReader()
    reader.feed(body)
    obj, problem = reader.result()
    if problem is None:
        problem = shape_problem(api, obj)
    elif content_type:
        problem = f"{problem} (Content-Type {brief(content_type, 60)})"
    return problem
