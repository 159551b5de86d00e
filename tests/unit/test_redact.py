"""Which values are secrets, and that scrubbing replaces them wherever they stand in what is written."""

import pytest

from loadgen.redact import REDACTED, is_secret_header, scrub, url_password


@pytest.mark.parametrize("name, secret", [
    ("Authorization", True), ("authorization", True), ("X-Api-Key", True), ("api-key", True), ("Cookie", True),
    ("X-Goog-Api-Key", True), ("X-Auth-Token", True), ("Ocp-Apim-Subscription-Key", True), ("X-Session-Id", True),
    ("Content-Type", False), ("X-Request-Id", False), ("Accept", False), ("User-Agent", False),
])
def test_secret_headers(name, secret):
    assert is_secret_header(name) is secret


@pytest.mark.parametrize("url, password", [
    ("http://user:pa55@127.0.0.1:8000/v1", "pa55"), ("http://user@127.0.0.1/v1", None),
    ("http://127.0.0.1/v1", None), (None, None), ("http://[bad", None),
])
def test_url_passwords(url, password):
    assert url_password(url) == password


@pytest.mark.parametrize("obj, secrets, scrubbed", [
    ("Bearer sk-123", ["sk-123"], f"Bearer {REDACTED}"),
    ({"k": ["a sk-123 b", 3]}, ["sk-123"], {"k": [f"a {REDACTED} b", 3]}),
    ({"sk-123": 1}, ["sk-123"], {REDACTED: 1}),
    ("http://u:sk-123@h/?k=sk-12", ["sk-12", "http://u:sk-123@h/"], f"{REDACTED}?k={REDACTED}"),  # longest first
    ("nothing here", [], "nothing here"),
    (1.5, ["1"], 1.5),
])
def test_scrub(obj, secrets, scrubbed):
    assert scrub(obj, secrets) == scrubbed
