"""Facts about target URLs that several layers need."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


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
