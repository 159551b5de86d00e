"""Which values are secrets, and that redaction hides them where they stand and rewrites nothing else."""

import io
import json

import pytest

from loadgen.redact import (
    REDACTED,
    RedactingStream,
    Redactor,
    is_secret_header,
    is_secret_param,
    json_placement,
    redact_url,
    url_credentials,
    url_password,
)
from loadgen.scenario.loader import load_scenario
from tests.helpers import write_scenario


@pytest.mark.parametrize("name, secret", [
    ("Authorization", True), ("authorization", True), ("X-Api-Key", True), ("api-key", True), ("Cookie", True),
    ("X-Goog-Api-Key", True), ("X-Auth-Token", True), ("Ocp-Apim-Subscription-Key", True), ("X-Session-Id", True),
    ("Content-Type", False), ("X-Request-Id", False), ("Accept", False), ("User-Agent", False),
])
def test_secret_headers(name, secret):
    assert is_secret_header(name) is secret


@pytest.mark.parametrize("name, secret", [
    ("api_key", True), ("key", True), ("token", True), ("access_token", True), ("sig", True), ("signature", True),
    ("password", True), ("X-Amz-Signature", True), ("api-version", False), ("model", False), ("stream", False),
])
def test_secret_params(name, secret):
    assert is_secret_param(name) is secret


@pytest.mark.parametrize("url, password", [
    ("http://user:pa55@127.0.0.1:8000/v1", "pa55"), ("http://user@127.0.0.1/v1", None),
    ("http://127.0.0.1/v1", None), (None, None), ("http://[bad", None),
])
def test_url_passwords(url, password):
    assert url_password(url) == password


@pytest.mark.parametrize("url, redacted, creds", [
    ("http://user:pa55@h:1/v1?api_key=sk-1&api-version=2024-02-01",
     "http://user:***@h:1/v1?api_key=***&api-version=2024-02-01", ["pa55", "sk-1"]),
    ("https://sk-abc@h/v1", "https://***@h/v1", ["sk-abc"]),  # a key sent as the user name
    ("http://u:${PASS}@h/v1?token=${TOK}", "http://u:${PASS}@h/v1?token=${TOK}", []),  # references stay
    ("http://h/v1?sig=a%2Fb&se=2025#frag", "http://h/v1?sig=***&se=2025#frag", ["a%2Fb"]),
    ("http://h/a@b/v1", "http://h/a@b/v1", []),  # an @ in the path is no userinfo
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", []),
])
def test_urls_are_redacted_by_their_parts(url, redacted, creds):
    assert redact_url(url) == redacted
    assert url_credentials(url) == creds


def test_short_expanded_values_rewrite_nothing_but_their_own_field(tmp_path):
    """Issue 13, item 4: RT_SCHEME=http must not turn http_5xx into ***_5xx, nor any 'http' elsewhere."""
    path = write_scenario(tmp_path, """
    name: t
    target: {url: "${RT_SCHEME}://127.0.0.1:8000/v1", headers: {Authorization: "Bearer ${KEY}"}}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    loaded = load_scenario(path, env={"RT_SCHEME": "http", "KEY": "sk-0123456789"})
    r = loaded.redactor
    summary = {"errors": {"http_5xx": 3, "http_429": 1}, "error_classes": ["http_5xx", "connect"], "port": 8000,
               "url": "http://127.0.0.1:8000/v1", "note": "POST http://127.0.0.1:8000/v1/chat/completions: 500"}
    out = r.data(summary)
    assert out["errors"] == summary["errors"] and out["error_classes"] == summary["error_classes"]
    assert out["port"] == 8000
    assert out["url"] == "${RT_SCHEME}://127.0.0.1:8000/v1"  # written as the scenario wrote it
    assert out["note"] == "POST ${RT_SCHEME}://127.0.0.1:8000/v1/chat/completions: 500"
    assert r.text('{"Authorization": "Bearer sk-0123456789"}') == '{"Authorization": "Bearer ${KEY}"}'
    assert r.text("http is a word, and so is http_5xx") == "http is a word, and so is http_5xx"
    assert loaded.redacted()["target"] == {"url": "${RT_SCHEME}://127.0.0.1:8000/v1",
                                           "headers": {"Authorization": "Bearer ${KEY}"}}


def test_literal_credentials_are_redacted_in_their_placements_and_in_text(tmp_path):
    path = write_scenario(tmp_path, """
    name: t
    target:
      url: "http://bob:literal-PASSWORD-1@127.0.0.1:8000/v1?api_key=literal-KEY-000001&api-version=2024"
      headers: {x-api-key: literal-HEADER-0001, Authorization: "Bearer lit${X}", X-Trace: keep-me}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    loaded = load_scenario(path, env={"X": "tail-of-it"})
    t = loaded.redacted()["target"]
    assert t["url"] == "http://bob:***@127.0.0.1:8000/v1?api_key=***&api-version=2024"
    assert t["headers"] == {"x-api-key": REDACTED, "Authorization": REDACTED, "X-Trace": "keep-me"}
    text = loaded.redactor.text("echo: literal-HEADER-0001 literal-KEY-000001 literal-PASSWORD-1")
    assert "literal" not in text


def test_json_redaction_keeps_keys_and_numbers():
    r = Redactor()
    r.add("sk-0123456789", "${K}")
    obj = {"sk-0123456789": 1, "a": ["x sk-0123456789 y", 2.5, None, True], "b": {"c": "http://u:pw@h/?key=v"}}
    assert r.data(obj) == {"sk-0123456789": 1, "a": ["x ${K} y", 2.5, None, True],
                           "b": {"c": "http://u:***@h/?key=***"}}
    # the forms a value takes inside a URL or a JSON string are found too
    r.add('pa/ss"word-long')
    assert r.text(json.dumps({"v": 'pa/ss"word-long'})) == '{"v": "***"}'
    assert r.text("http://h/x?q=pa%2Fss%22word-long") == "http://h/x?q=***"


def test_a_json_placement_for_a_new_field():
    """How a new placement (a JSON body merged into requests, say) plugs in: collect and redact."""
    p = json_placement()
    r = Redactor()
    body = {"api_key": "literal-key-123456", "opts": {"temperature": 0, "token": "${TOK}"}, "user": "me"}
    p.collect(r, body)
    assert r.secrets == ["literal-key-123456"]
    assert p.redact(r, body) == {"api_key": REDACTED, "opts": {"temperature": 0, "token": "${TOK}"}, "user": "me"}


def test_the_stream_wrapper_redacts_every_write():
    r = Redactor()
    r.add("sk-0123456789")
    buf = io.StringIO()
    s = RedactingStream(buf, r)
    print("key sk-0123456789 at http://u:pw@h/v1?token=abc", file=s)
    assert buf.getvalue() == "key *** at http://u:***@h/v1?token=***\n"
    assert not hasattr(s, "buffer")  # nothing can write around it


def test_a_text_cut_inside_a_secret_hides_the_part_it_kept():
    """A server's message is kept to its first characters: the cut may fall inside an echoed secret."""
    r = Redactor()
    r.add("sk-planted-secret-456", "${KEY}")
    assert r.text('{"Authorization": "Bearer sk-planted-sec') == '{"Authorization": "Bearer ${KEY}'
    assert r.text("ends with sk-") == "ends with sk-"  # three characters: no claim it was the secret
