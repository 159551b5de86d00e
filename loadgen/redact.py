"""Secrets never reach a RunDir, a report or a log: the one place where what counts as one is decided.

A secret is a header value whose name says it is a credential, a URL's password, or a ``${ENV}`` value
expanded into the scenario. :func:`scrub` replaces the known secret strings in anything about to be
written or printed.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

REDACTED = "***"
#: Header names whose values are secrets even when written literally.
SECRET_HEADERS = ("authorization", "proxy-authorization", "api-key", "x-api-key", "cookie")
#: ... and any header whose name says it carries a credential (X-Goog-Api-Key, X-Auth-Token, Ocp-Apim-Subscription-Key).
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|passw|credential|session|signature", re.I)


def is_secret_header(name: str) -> bool:
    """Whether a header's value must never be written out, even when the scenario writes it literally."""
    return name.lower() in SECRET_HEADERS or bool(_SECRET_NAME.search(name))


def url_password(url) -> str | None:
    """The password of a ``scheme://user:password@host`` URL, if it has one."""
    if not isinstance(url, str) or "@" not in url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def scrub(obj: Any, secrets: list[str]) -> Any:
    """``obj`` with every occurrence of a secret string replaced by '***' (recursively)."""
    if not secrets:
        return obj
    if isinstance(obj, str):
        # a token inside a longer secret (a URL) must not leave the rest
        for s in sorted(secrets, key=len, reverse=True):
            if s:
                obj = obj.replace(s, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, secrets) for v in obj]
    return obj
