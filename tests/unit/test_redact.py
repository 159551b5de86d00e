"""Which values are secrets, and that redaction hides them where they stand and rewrites nothing else."""

import base64
import io
import json

import pytest

from loadgen.errors import ScenarioError
from loadgen.redact import (
    REDACTED,
    RedactingStream,
    Redactor,
    escape_control,
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



def test_every_form_a_secret_is_quoted_in_is_redacted():
    """Issue 27, item 3: a secret holding a quote or a non-ASCII letter, echoed JSON-escaped (``\\uXXXX``, as Python
    and Go servers write it), or quoted by Python (an exception's repr), leaked: only the raw and ``\\"``-escaped
    forms were registered."""
    secret = 'pä"ss\'w<LEAK>&\\ord-long'
    r = Redactor()
    r.add(secret, "${K}")
    go = json.dumps(secret).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    for text in (json.dumps({"v": secret}), json.dumps({"v": secret}, ensure_ascii=False), repr({"v": secret}),
                 ascii(secret), json.dumps(json.dumps({"v": secret})), go, json.dumps(secret).replace("/", "\\/")):
        out = r.text(text)
        assert "LEAK" not in out and "${K}" in out, (text, out)


def test_a_message_cut_inside_an_escaped_secret_hides_the_part_it_kept():
    """The cut of a server's message (its first 200 characters) fell inside the JSON-escaped form of a secret
    holding a quote: ``Bearer pl\\"anted-se`` was printed."""
    r = Redactor()
    r.add('pl"anted-secret-456', "${KEY}")
    assert r.text('{"Authorization": "Bearer pl\\"anted-se') == '{"Authorization": "Bearer ${KEY}'


def test_a_userinfo_is_secret_as_the_basic_credentials_it_is_sent_as_too(tmp_path):
    """Issue 27, item 3: `--target http://bob:pw@host` is sent as `Authorization: Basic base64(bob:pw)`; a server
    echoing it had the base64 printed by -v."""
    def basic(pair: str, encoding: str = "utf-8") -> str:
        return base64.b64encode(pair.encode(encoding)).decode()

    r = Redactor()
    r.add_url("http://bob:pa%40ss-wörd-1@127.0.0.1/v1")  # percent-encoded in the URL, decoded when sent
    r.add_url("https://sk-alone-123456@127.0.0.1/v1")  # a key sent as the user name: `sk-...:`
    for b in (basic("bob:pa@ss-wörd-1"), basic("bob:pa@ss-wörd-1", "latin-1"), basic("sk-alone-123456:")):
        assert r.text(f'"Authorization": "Basic {b}"') == '"Authorization": "Basic ***"'
        assert r.text(f"Basic {b[:-6]}") == "Basic ***"  # cut short inside it
    loaded = load_scenario(write_scenario(tmp_path, """
    name: t
    target: {url: "http://bob:${LB_PW}@127.0.0.1:8000/v1"}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """), env={"LB_PW": "from-env-pw-42"})
    assert loaded.redactor.text("Basic " + basic("bob:from-env-pw-42")) == "Basic ***"


def test_a_host_from_env_is_no_secret_and_is_printed_as_it_is(tmp_path):
    """Issue 27, item 17: every ${ENV} value of a URL was a secret, so `latbench watch` printed
    LATBENCH_METRICS_URL=http://${LB_HOST}:9464/metrics. Where a value only says where requests go (a host, a
    port) it is printed as it is; a credential-named one there, and any in the path, stay secret."""
    path = write_scenario(tmp_path, """
    name: t
    targets:
      - {name: a, url: "http://${LB_HOST}:${LB_PORT}/v1", metrics_url: "http://${LB_HOST}:9100/metrics",
         headers: {Authorization: "Bearer ${LB_KEY}"}}
      - {name: b, url: "http://${LB_HOST}/${LB_PATH}/v1"}
      - {name: c, url: "https://${LB_API_KEY}.example.com/v1"}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    env = {"LB_HOST": "127.0.0.1", "LB_PORT": "8000", "LB_KEY": "sk-0123456789", "LB_PATH": "path-secret-9",
           "LB_API_KEY": "keyinhost-123"}
    loaded = load_scenario(path, env=env)
    r = loaded.redactor
    assert sorted(loaded.secrets) == ["keyinhost-123", "path-secret-9", "sk-0123456789"]
    assert r.text("LATBENCH_METRICS_URL=http://127.0.0.1:9464/metrics") == (
        "LATBENCH_METRICS_URL=http://127.0.0.1:9464/metrics")
    a, b, c = loaded.scenario.targets
    assert r.data([a.url, a.metrics_url, b.url, c.url]) == [
        "http://127.0.0.1:8000/v1", "http://127.0.0.1:9100/metrics", "http://127.0.0.1/${LB_PATH}/v1",
        "https://${LB_API_KEY}.example.com/v1"]
    assert loaded.redacted()["targets"][0]["url"] == "http://${LB_HOST}:${LB_PORT}/v1"  # the copy, as written


def test_a_secret_quoted_by_a_validation_error_is_redacted(tmp_path):
    """Issue 27, item 3: `metrics_url: "http://[${KEY}]/metrics"` printed the expanded key in its error."""
    path = write_scenario(tmp_path, """
    name: t
    target: {url: "http://127.0.0.1:9/v1", metrics_url: "http://[${KEY}]/metrics"}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={"KEY": "sk-secret-0123456789"})
    (err,) = e.value.errors
    assert err.startswith(f"{path}:3:") and "target.metrics_url: not a URL" in err, err
    assert "${KEY}" in err and "sk-secret" not in err


@pytest.mark.parametrize("text, keep, shown", [
    ("\x1b]0;pwned\x07", "", "\\x1b]0;pwned\\x07"),
    ("a\r\nb\tc", "", "a\\r\\nb\\tc"),
    ("a\nb\tc\x00", "\n\t", "a\nb\tc\\x00"),
    ("\x7f\x9b\ufffe\ud800", "", "\\x7f\\x9b\\ufffe\\ud800"),
    ("plain text, ünïcode and \\x1b as written", "", "plain text, ünïcode and \\x1b as written"),
])
def test_control_characters_are_shown_escaped(text, keep, shown):
    """Issue 27, items 13 and 14: the one function for what a server or a scenario controls on its way to a
    terminal, junit.xml or summary.md."""
    assert escape_control(text, keep) == shown
