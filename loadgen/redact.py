"""Secrets never reach a RunDir, a report, a log or the terminal: what counts as one, and the one way out.

**What is secret** is decided by where a value stands (its *placement*), never by what it looks like:

- a header value whose name says it is a credential (``Authorization``, ``X-Api-Key``, ``X-Goog-Api-Key``...);
- a URL's userinfo: its password (a user name standing alone too: API keys are sometimes sent that way);
- the value of a URL query parameter whose name says it carries a credential (``api_key``, ``key``, ``token``,
  ``sig``, ``signature``, ``access_token``, ``password``...);
- every value expanded from ``${ENV}`` into a scenario field that :data:`PLACEMENTS` lists (the URLs and the
  headers of a target), but one that only says where the requests go: a URL's host or port, from a variable
  whose name does not say it is a credential (:meth:`Placement.public`). ``http://${HOST}:${PORT}/v1`` is
  printed with the real host (the URL ``latbench watch`` prints is usable); ``http://[${KEY}]/`` is not.

Each secret is registered with the forms it takes on its way into text (:func:`secret_forms`: percent-encoded,
JSON-escaped with ``\\"`` or ``\\uXXXX``, ``repr()``-quoted), and a URL's userinfo with the ``Basic``
credentials it is sent as.

**The one way out.** A :class:`Redactor` holds what one run knows to be secret, and every byte latbench
writes or prints passes through it: the RunDir's files (:func:`loadgen.records.rundir.write_json` and
``write_text``, the scenario copy, ``server_metrics.csv``; reports are written with ``write_text`` too), every
log line (the CLI's logging filter) and everything printed (the CLI wraps stdout and stderr in a
:class:`RedactingStream`; so do the multi-process engine's children, and the Locust master's stderr is relayed
through the CLI's). A scenario's errors are redacted by the loader that found them (it knows the secrets; the
run does not yet).

**Control characters** a server sent (ESC, BEL) are escaped by :func:`escape_control` wherever its text is
printed or written into a format that cannot hold them: the log (``-v``'s failed requests and every log line),
the reasons and errors the CLI prints, junit.xml and summary.md.

**How a secret is hidden** depends on where it stands, so nothing else is rewritten:

- in the scenario copy, each placement redacts its own field (:attr:`Placement.redact`): ``${ENV}``
  references stay as written, literal credentials become ``***``;
- in any other text (a URL written to meta.json, a server's error message, a note, a log line), a whole
  field value that was expanded from ``${ENV}`` is written as it was in the scenario
  (``${RT_SCHEME}://127.0.0.1:8000/v1``), a secret value as its ``${NAME}`` (or ``***`` when it was
  written literally), and in every URL the userinfo and credential parameters become ``***``. Values are
  looked for in text only from :data:`MIN_SECRET_LEN` characters on: a short value (``http``, a port) is
  no credential, and replacing it wherever it occurs would rewrite error classes, words and numbers
  (``http_5xx``); it stays hidden where it was placed, since the field it was expanded into is.
- in JSON data, string values are text; keys and numbers are never touched.

**A new placement** (a scenario field where ``${ENV}`` is expanded and credentials may stand) is one call
beside the three below, e.g. for a JSON body merged into requests: ``register_placement("extra_body",
json_placement())`` (or ``Placement(collect=..., redact=...)`` for another shape). The loader then expands
``${ENV}`` in that target field (in every string of it, however nested), registers each expanded value (and
the whole expanded string, written back as the scenario wrote it), calls ``collect`` to register the
literal credentials the field holds, and writes the field to the scenario copy through ``redact``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, unquote, urlsplit

REDACTED = "***"
#: Secret values shorter than this are hidden where they were placed, not searched for in free text.
MIN_SECRET_LEN = 8
#: A text that ends with this many first characters of a secret, or more, was cut inside it: they are redacted.
MIN_CUT = 4
#: Header names whose values are secrets even when written literally.
SECRET_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key", "cookie")
#: ... and any header whose name says it carries a credential (X-Goog-Api-Key, X-Auth-Token, Ocp-Apim-Subscription-Key).
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|passw|credential|session|signature", re.I)
#: Query parameters (and JSON keys) whose values are credentials: api_key, key, token, sig, access_token, password...
_SECRET_PARAM = re.compile(r"key|token|sig|secret|passw|pwd|auth|credential|session", re.I)
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ONLY_REFS = re.compile(r"^\s*(?:[A-Za-z][A-Za-z0-9_-]*\s+)?(?:\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*)+$")
#: A URL inside text: scheme://authority[path][?query] up to a space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/?#@\s]*?)(?::(?P<pw>[^/?#@\s]*))?@")
_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#\s]+)=(?P<value>[^&;#\s]*)")


def is_secret_header(name: str) -> bool:
    """Whether a header's value must never be written out, even when the scenario writes it literally."""
    return name.lower() in SECRET_HEADERS or bool(_SECRET_NAME.search(name))


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter (or a JSON key) names a credential (``api_key``, ``sig``, ``token``...)."""
    return bool(_SECRET_PARAM.search(name))


def url_password(url) -> str | None:
    """The password of a ``scheme://user:password@host`` URL, if it has one."""
    if not isinstance(url, str) or "@" not in url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _is_ref(text: str) -> bool:
    return bool(text) and ENV_REF.sub("", text) == ""


def url_credentials(url: str) -> list[str]:
    """The credentials a URL holds as written: its password (or a user name standing alone) and the values of its
    credential query parameters; ``${ENV}`` references are not credentials."""
    out = []
    m = _USERINFO.match(url)
    if m:
        secret = m.group("pw") if m.group("pw") is not None else m.group("user")
        if secret and not _is_ref(secret):
            out.append(secret)
    for p in _PARAM.finditer(url.split("#", 1)[0]):
        if is_secret_param(p.group("name")) and p.group("value") and not _is_ref(p.group("value")):
            out.append(p.group("value"))
    return out


def redact_url(url: str) -> str:
    """``url`` with its userinfo and credential parameters as ``***`` (``${ENV}`` references kept), nothing else
    changed (no re-encoding: the rest is byte for byte as given)."""
    def userinfo(m: re.Match) -> str:
        user, pw = m.group("user"), m.group("pw")
        if pw is not None:
            return f"{m.group('scheme')}{user}:{pw if _is_ref(pw) else REDACTED}@"
        return f"{m.group('scheme')}{user if _is_ref(user) or not user else REDACTED}@"

    def param(m: re.Match) -> str:
        value = m.group("value")
        if not is_secret_param(m.group("name")) or not value or _is_ref(value):
            return m.group(0)
        return f"{m.group('lead')}{m.group('name')}={REDACTED}"

    url = _USERINFO.sub(userinfo, url, count=1)
    if "?" in url:
        head, _, rest = url.partition("?")
        url = head + _PARAM.sub(param, "?" + rest)
    return url


class Redactor:
    """What one run knows to be secret, and the one way anything is redacted before it is written or printed.

    Register with :meth:`add` (a value, and what to write in its place), :meth:`add_expansion` (a whole field
    value expanded from ``${ENV}``, and the field as the scenario wrote it), :meth:`add_url` and
    :meth:`add_headers` (the literal credentials of a URL or of headers). Redact with :meth:`text` (any text: a
    URL in it is redacted by its parts) and :meth:`data` (JSON-like values: strings as text, keys and numbers
    kept). A scenario field is redacted by its :class:`Placement`.
    A Redactor with nothing registered still redacts the userinfo and credential parameters of every URL.
    """

    def __init__(self) -> None:
        self._subs: dict[str, str] = {}  # a secret (or a whole expanded field value) -> what is written instead
        self._secrets: dict[str, list[str]] = {}  # the secret values, as registered -> the forms text shows them in
        self._pattern: re.Pattern | None = None
        # each first part of a form of a secret -> what stands instead, and the longest such part
        self._heads: tuple[dict[str, str], int] | None = None
        # registering and building the pattern hold it: a secret may be registered (the Locust master's) while
        # another thread redacts (the /metrics scraper's rows, a log line); redacting itself takes no lock
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # sent to a spawned child process (the multi-process engine): no lock
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def secrets(self) -> list[str]:
        """The secret values registered (expanded ``${ENV}`` values, literal credentials and the ``Basic``
        credentials a URL's userinfo becomes), in order."""
        return list(self._secrets)

    def add(self, value: str, ref: str = REDACTED) -> None:
        """``value`` is secret; text shows ``ref`` in its place (``${NAME}`` for an expanded value). The forms a
        value takes on its way into text are registered too (:func:`secret_forms`: percent-encoded in a URL,
        escaped in JSON, quoted by Python)."""
        if not isinstance(value, str) or not value:
            return
        forms = secret_forms(value)
        with self._lock:
            forms = self._secrets.setdefault(value, forms)
            for form in forms:
                self._subs.setdefault(form, ref)
            self._pattern = self._heads = None

    def add_basic(self, user: str, password: str) -> None:
        """``user:password`` is sent as ``Authorization: Basic <base64>`` (as every HTTP client does with a URL's
        userinfo): that base64, UTF-8 or Latin-1 encoded, is a secret too."""
        pair = f"{user}:{password}"
        for encoding in ("utf-8", "latin-1"):
            try:
                self.add(base64.b64encode(pair.encode(encoding)).decode("ascii"))
            except UnicodeEncodeError:
                pass

    def add_expansion(self, expanded: str, written: str) -> None:
        """A whole field value that was expanded from ``${ENV}``: text shows it as the scenario wrote it."""
        if isinstance(expanded, str) and expanded and expanded != written:
            with self._lock:
                self._subs[expanded] = written
                self._pattern = None

    def add_url(self, url: str | None) -> None:
        """Register the literal credentials of ``url`` (a ``--target`` URL, a scenario's URL), and the ``Basic``
        credentials its userinfo is sent as."""
        if isinstance(url, str):
            for secret in url_credentials(url):
                self.add(secret)
            self.add_userinfo(url)

    def add_userinfo(self, url: str | None) -> None:
        """Register the ``Basic`` credentials that ``url``'s userinfo is sent as (once its ``${ENV}`` references
        are expanded: none is left in it)."""
        m = _USERINFO.match(url) if isinstance(url, str) else None
        if m and (m.group("user") or m.group("pw")) and not ENV_REF.search(m.group(0)):
            self.add_basic(unquote(m.group("user")), unquote(m.group("pw") or ""))

    def add_headers(self, headers: dict | None) -> None:
        """Register the literal values of credential headers (``${ENV}`` references are registered on expansion)."""
        for k, v in (headers or {}).items():
            if isinstance(k, str) and is_secret_header(k) and isinstance(v, str) and not ENV_REF.search(v):
                self.add(v)

    def _compiled(self) -> re.Pattern:
        pattern = self._pattern
        if pattern is None:
            with self._lock:  # built from every secret registered before it: none is added meanwhile
                keys = sorted((k for k in self._subs if len(k) >= MIN_SECRET_LEN), key=len, reverse=True)
                pattern = re.compile("|".join(map(re.escape, keys))) if keys else re.compile(r"(?!)")
                self._pattern = pattern
        return pattern

    def text(self, text: str) -> str:
        """``text`` with every registered value (of :data:`MIN_SECRET_LEN` characters or more) replaced by what
        stands in its place, in one pass (longest first), and every URL in it redacted (:func:`redact_url`)."""
        if not isinstance(text, str) or not text:
            return text
        if self._subs:
            text = self._compiled().sub(lambda m: self._subs[m.group(0)], text)
            text = self._cut_tail(text)
        if "://" in text:
            text = _redact_urls_in(text)
        return text

    def _cut_tail(self, text: str) -> str:
        """A text cut short in the middle of a secret (a server's message kept to its first 200 characters) ends
        with the secret's beginning, in any of its forms (escaped in JSON, say): that beginning is redacted too
        (from :data:`MIN_CUT` characters on; the longest such beginning)."""
        built = self._heads
        if built is None:  # built whole under the lock, then shared (a log line may be redacted from another thread)
            with self._lock:
                heads: dict[str, str] = {}
                for value, forms in self._secrets.items():
                    if len(value) >= MIN_SECRET_LEN:
                        for form in forms:
                            for k in range(MIN_CUT, len(form)):
                                heads.setdefault(form[:k], self._subs.get(value, REDACTED))
                built = self._heads = (heads, max(map(len, heads), default=0))
        heads, longest = built
        for k in range(min(longest, len(text)), MIN_CUT - 1, -1):  # one look-up per length
            ref = heads.get(text[-k:])
            if ref is not None:
                return text[:-k] + ref
        return text

    def data(self, obj: Any) -> Any:
        """A JSON-like value as it may be written: every string value as :meth:`text`; keys, numbers and
        booleans untouched (a field name or an error class is never rewritten)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {k: self.data(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.data(v) for v in obj]
        return obj


def _redact_urls_in(text: str) -> str:
    """Every ``scheme://...`` in ``text`` through :func:`redact_url` (linear: found from each ``://``, so a
    megabyte of base64 in a report costs one scan)."""
    out, pos = [], 0
    i = text.find("://")
    while i >= 0:
        start = i
        while start > pos and (text[start - 1].isalnum() or text[start - 1] in "+.-") and text[start - 1].isascii():
            start -= 1
        m = _URL.match(text, start) if start < i and text[start].isalpha() else None
        if m is None or m.end() <= i:
            i = text.find("://", i + 3)
            continue
        out.append(text[pos:start])
        out.append(redact_url(m.group(0)))
        pos = m.end()
        i = text.find("://", pos)
    out.append(text[pos:])
    return "".join(out)


def _json_escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


_GO_JSON = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def secret_forms(value: str) -> list[str]:
    """The forms a secret takes on its way into text, itself first: percent-encoded (in a URL), escaped in a
    JSON string (``\\"``, ``\\\\``, and ``\\uXXXX`` for what is not ASCII or, as Go servers write, for ``<>&``;
    twice over, when a JSON text is quoted inside another), and quoted by Python's ``repr()`` and ``ascii()``
    (an exception's message)."""
    as_json = json.dumps(value)[1:-1]
    forms = [value, quote(value, safe=""), quote(value, safe="/:@"), _json_escaped(value), as_json,
             json.dumps(value, ensure_ascii=False)[1:-1], "".join(_GO_JSON.get(c, c) for c in as_json),
             as_json.replace("/", "\\/"), json.dumps(as_json)[1:-1], repr(value)[1:-1], ascii(value)[1:-1]]
    return list(dict.fromkeys(forms))


# --- control characters: what no terminal, XML file or Markdown table gets raw ----------------------------

#: C0 controls (ESC, BEL, CR...), DEL, C1 controls (0x9b starts an escape sequence on some terminals), lone
#: surrogates and the noncharacters U+FFFE and U+FFFF (XML 1.0 forbids them all but tab, line feed and CR).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_NAMED_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`escape_control` escapes."""
    return isinstance(text, str) and bool(_CONTROL.search(text))


def escape_control(text: str, keep: str = "") -> str:
    """``text`` with every control character but those in ``keep`` (``"\\n"`` for a message of several lines)
    written as a visible escape (``\\x1b``, ``\\x07``, ``\\n``; ``\\ufffe`` above 0xff), all else unchanged.

    The one function for text a server (or a scenario) controls on its way to a terminal or a file: bytes a server
    sent then cannot retitle the window, ring the bell or rewrite the line into a fake verdict, nor break
    junit.xml or a Markdown table. The CLI's log filter passes every log line through it (``-v``'s failed
    requests, a managed server's last words), as the CLI does with the reasons and errors it prints; the junit
    and Markdown writers with what they write."""
    if not isinstance(text, str) or not _CONTROL.search(text):
        return text

    def one(m: re.Match) -> str:
        c = m.group(0)
        if c in keep:
            return c
        return _NAMED_CONTROL.get(c) or (f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}")

    return _CONTROL.sub(one, text)


# --- placements: scenario fields where ${ENV} is expanded and credentials may stand -----------------------


@dataclass(frozen=True)
class Placement:
    """How one kind of target field holds secrets.

    ``collect(redactor, raw)`` registers the literal credentials of the field as written (``${ENV}`` unexpanded);
    ``redact(redactor, raw)`` is the field as written in the scenario (``${ENV}`` unexpanded, or expanded where
    :meth:`public`), as it may be written to the RunDir's copy of the scenario.
    """

    collect: Callable[[Redactor, Any], None]
    redact: Callable[[Redactor, Any], Any]
    #: ``implied(redactor, expanded)`` registers what the field implies once expanded (the ``Basic`` credentials a
    #: URL's userinfo is sent as)
    implied: Callable[[Redactor, Any], None] = lambda r, value: None
    #: ``names_place(raw, start, end, value)``: whether ``value``, expanded at ``raw[start:end]`` (a string of the
    #: field as written), only says where the requests go (a URL's host or port)
    names_place: Callable[[str, int, int, str], bool] = lambda raw, start, end, value: False

    def public(self, raw: str, ref: re.Match, value: str) -> bool:
        """Whether the ``${ENV}`` reference ``ref`` in ``raw`` (a string of this field, as written) expands to no
        secret: its value only says where the requests go (:attr:`names_place`) and its name does not say it is a
        credential (``KEY``, ``TOKEN``...). Such a value is written and printed as it is; every other expanded
        value is a secret (and so is this one wherever it is registered as one)."""
        name = ref.group(1)
        return (not (_SECRET_NAME.search(name) or _SECRET_PARAM.search(name))
                and self.names_place(raw, ref.start(), ref.end(), value))


#: A value that can only name where requests go: a host name, an IP address (IPv6 in brackets), a port.
_HOST_VALUE = re.compile(r"^[A-Za-z0-9._\-:\[\]%]+$")
_AUTHORITY = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^/?#@]*@)?(?P<host>[^/?#@]*)(?=[/?#]|$)")


def url_host_span(url: str) -> tuple[int, int] | None:
    """Where ``url`` (as written) names its host and port, as (start, end); None when it names none."""
    m = _AUTHORITY.match(url) if isinstance(url, str) else None
    return m.span("host") if m else None


def _url_place(raw: str, start: int, end: int, value: str) -> bool:
    """A value expanded into a URL's host or port that leaves the URL valid (``http://[${KEY}]/`` does not)."""
    span = url_host_span(raw)
    if span is None or not (span[0] <= start and end <= span[1]) or not _HOST_VALUE.match(value):
        return False
    try:
        parts = urlsplit(ENV_REF.sub("0", raw[:start]) + value + ENV_REF.sub("0", raw[end:]))  # others: a port
        parts.port  # noqa: B018 (raises ValueError for a port that is no number)
    except ValueError:
        return False
    return True


def _collect_url(r: Redactor, value: Any) -> None:
    r.add_url(value if isinstance(value, str) else None)


def _userinfo(r: Redactor, value: Any) -> None:
    r.add_userinfo(value if isinstance(value, str) else None)


def _redact_url_field(r: Redactor, raw: Any) -> Any:
    return r.text(redact_url(raw)) if isinstance(raw, str) else raw


def _collect_headers(r: Redactor, value: Any) -> None:
    if isinstance(value, dict):
        r.add_headers(value)


def _redact_headers_field(r: Redactor, raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    out = {}
    for k, v in raw.items():
        if isinstance(k, str) and is_secret_header(k) and isinstance(v, str):
            out[k] = v if _ONLY_REFS.match(v) else REDACTED  # "Bearer ${KEY}" says what, never the value
        else:
            out[k] = r.text(v) if isinstance(v, str) else v
    return out


def json_placement() -> Placement:
    """The placement of a JSON field (a request body to merge, say): values under credential-named keys are
    secret, and written as ``***`` unless they are ``${ENV}`` references."""
    def walk(obj: Any, on_secret: Callable[[str], Any]) -> Any:
        if isinstance(obj, dict):
            return {k: (on_secret(v) if isinstance(k, str) and is_secret_param(k) and isinstance(v, str)
                        else walk(v, on_secret)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v, on_secret) for v in obj]
        return obj

    def collect(r: Redactor, value: Any) -> None:
        walk(value, lambda v: r.add(v) if not ENV_REF.search(v) else None)

    def redact(r: Redactor, raw: Any) -> Any:
        return r.data(walk(raw, lambda v: v if _ONLY_REFS.match(v) else REDACTED))

    return Placement(collect, redact)


#: target field -> how it holds secrets. ``${ENV}`` is expanded in these fields only.
PLACEMENTS: dict[str, Placement] = {}


def register_placement(field: str, placement: Placement) -> None:
    """Make a target field a placement: ``${ENV}`` is expanded in it and its secrets never written."""
    PLACEMENTS[field] = placement


register_placement("url", Placement(_collect_url, _redact_url_field, _userinfo, _url_place))
register_placement("metrics_url", Placement(_collect_url, _redact_url_field, _userinfo, _url_place))
register_placement("gpu_metrics_url", Placement(_collect_url, _redact_url_field, _userinfo, _url_place))
register_placement("headers", Placement(_collect_headers, _redact_headers_field))
register_placement("extra_body", json_placement())  # request options merged into every body (workloads)


class RedactingStream(io.TextIOBase):
    """A text stream that writes everything through a :class:`Redactor` into the stream it wraps (stdout,
    stderr). It exposes no binary ``buffer``, so nothing can write around it."""

    def __init__(self, stream, redactor: Redactor):
        self.stream = stream
        self.redactor = redactor

    def write(self, s: str) -> int:
        self.stream.write(self.redactor.text(s))
        return len(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:
        return getattr(self.stream, "errors", None) or "strict"
