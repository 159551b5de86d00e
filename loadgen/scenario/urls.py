"""Facts about target URLs that several layers need."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit


def on_loopback(url: str) -> bool:
    """True when the URL's host is this machine (``localhost`` or a loopback address)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def join_url(base: str, path: str) -> str:
    """``path`` appended to the path of ``base``, before its query, which is kept (and merged with one that
    ``path`` carries): ``join_url("http://h/v1?api-version=1", "/chat/completions")`` is
    ``http://h/v1/chat/completions?api-version=1``. Nothing is re-encoded; a fragment is dropped."""
    parts = urlsplit(base)
    extra, _, query = path.partition("?")
    joined = parts.path.rstrip("/") + ("/" + extra.lstrip("/") if extra.strip("/") else "")
    queries = [q for q in (parts.query, query) if q]
    return urlunsplit((parts.scheme, parts.netloc, joined, "&".join(queries), ""))


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a target's base URL (None when it can): it needs http://, https:// (or grpc://,
    grpcs:// for KServe v2 over gRPC), a host, and a port (when it gives one) from 1 to 65535. The message
    never quotes the URL (it may hold a password)."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "holds a space, a line break or another control character (percent-encode it)"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https", "grpc", "grpcs"):
        return ("expected an http:// or https:// URL (grpc:// for KServe v2 over gRPC)"
                + (f", got scheme {parts.scheme!r}" if parts.scheme else ""))
    if not parts.hostname:
        return "expected a host after the scheme (http://HOST[:PORT]/...)"
    try:
        port = parts.port  # a port past 65535 or not a number: every request would fail before it is sent
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        return "expected a port from 1 to 65535 after the host (http://HOST:PORT/...)"
    return None
