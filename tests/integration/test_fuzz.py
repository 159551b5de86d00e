"""Bad input, fuzzed: the scenario loader and the reference server's JSON API.

The loader, fed random YAML shapes and values, never raises anything but ScenarioError, whose every
line is ``file:line:col: ...``; the CLI turns that into exit 2 without a traceback; negative, NaN and
absurd rates and durations are refused naming the limit. The reference server, fed random JSON (and
random bytes), answers every bad request with a 4xx and an OpenAI-style error body, never a 500, and
stays alive; its body-size and max_tokens limits hold.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loadgen.errors import ScenarioError
from loadgen.scenario.loader import load_scenario

LATBENCH = [sys.executable, "-m", "loadgen.cli"]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# --- the scenario loader ------------------------------------------------------------------------------

VALID = {
    "name": "fuzz",
    "target": {"url": "http://127.0.0.1:9/v1", "stream": True, "headers": {"Authorization": "Bearer x"}},
    "workload": {"prompts": {"input_tokens": {"mean": 16, "stddev": 2}, "output_tokens": 8, "distinct": 10}},
    "load": {"expected_qps": 10, "arrival": "poisson",
             "phases": [{"name": "a", "duration": "1s", "qps": 5}, {"name": "b", "duration": "2s", "qps": "50%"},
                        {"name": "c", "duration": "1s", "concurrency": 2}]},
    "slo": ["latency.p99 < 300ms", "error_rate < 1%"],
}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["1e12", "-1", "nan", "inf", "1e12%", "-5%", "0", "0s", "-1s", "1e9h", "fast", "120%",
                     "${NOPE}", "${HOME}", "latency.p99 < 0ms", "p99 <", "100000000000"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)


def _paths(obj, prefix=()):
    """Every (path) inside a nested dict/list, for mutation."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(VALID) if p]


@st.composite
def mutated(draw):
    """The valid scenario with a few values replaced, keys added or removed."""
    data = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(values)
            elif action == "delete" and isinstance(parent, dict):
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=6))] = draw(values)
        except (KeyError, IndexError, TypeError):
            pass
    return data


LINE = re.compile(r"^.+\.yaml:\d+:\d+: \S")


def _check_load(tmp_path, text: str) -> None:
    path = tmp_path / "f.yaml"
    (path.write_text(text, encoding="utf-8", errors="surrogateescape") if isinstance(text, str)
     else path.write_bytes(text))
    try:
        load_scenario(path, env={"HOME": "/root"})
    except ScenarioError as exc:
        assert exc.errors, "an error without a message"
        for line in exc.errors:
            assert LINE.match(line), line
            assert not re.search(r"[\r\n\x1b\x00]", line), repr(line)  # one line per mistake, nothing raw
            assert "Traceback" not in line


@FUZZ
@given(data=mutated())
def test_loader_on_mutated_scenarios_only_raises_located_scenario_errors(tmp_path_factory, data):
    _check_load(tmp_path_factory.mktemp("m"), yaml.safe_dump(data, allow_unicode=True))


@FUZZ
@given(data=values)
def test_loader_on_random_yaml_shapes_only_raises_located_scenario_errors(tmp_path_factory, data):
    _check_load(tmp_path_factory.mktemp("r"), yaml.safe_dump(data, allow_unicode=True))


@FUZZ
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200),
                      st.sampled_from(["a: &x [*x]\n", "load: !!python/object:os.system x\n", "---\na: 1\n---\nb: 2\n",
                                       "\ufeffname: x\n", "name: [unclosed\n", "? [a, b]\n: c\n",
                                       "{1: 2, null: 3}\n"])))
def test_loader_on_random_text_only_raises_located_scenario_errors(tmp_path_factory, text):
    _check_load(tmp_path_factory.mktemp("t"), text)


def _one_phase(**phase) -> dict:
    data = json.loads(json.dumps(VALID))
    data["load"]["phases"] = [{"name": "p", "duration": "1s", **phase}]
    return data


def _load_errors(tmp_path, data) -> str:
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, env={})
    return "\n".join(info.value.errors)


LIMITS = [
    # (what, mutation, words the message must hold: the field and the limit)
    ("negative qps", lambda: _one_phase(qps=-5), ["phases[0].qps", "non-negative"]),
    ("NaN qps", lambda: _one_phase(qps=float("nan")), ["phases[0].qps", "finite"]),
    ("1e12 qps", lambda: _one_phase(qps=1e12), ["phases[0].qps", "1,000,000"]),
    ("1e12 qps as text", lambda: _one_phase(qps="1e12"), ["phases[0].qps", "1,000,000"]),
    ("1e12 qps as percentage", lambda: _one_phase(qps="1e12%"), ["phases[0].qps", "1,000,000"]),
    ("ramp to 1e12", lambda: _one_phase(qps={"from": 1, "to": 1e12}), ["phases[0].qps", "1,000,000"]),
    ("infinite qps", lambda: _one_phase(qps=float("inf")), ["phases[0].qps", "finite"]),
    ("zero qps", lambda: _one_phase(qps=0), ["phases[0].qps", "above 0"]),
    ("negative duration", lambda: _one_phase(qps=1, duration=-1), ["phases[0].duration", "non-negative"]),
    ("NaN duration", lambda: _one_phase(qps=1, duration=float("nan")), ["phases[0].duration", "finite"]),
    ("absurd duration", lambda: _one_phase(qps=1, duration="1e9h"), ["phases[0].duration", "7 days"]),
    ("absurd concurrency", lambda: _one_phase(concurrency=10**12), ["phases[0].concurrency", "100000"]),
    ("negative concurrency", lambda: _one_phase(concurrency=-3), ["phases[0].concurrency", "1"]),
    ("absurd expected_qps", lambda: {**VALID, "load": {**VALID["load"], "expected_qps": 1e12}},
     ["load.expected_qps", "1000000"]),
    ("NaN expected_qps", lambda: {**VALID, "load": {**VALID["load"], "expected_qps": float("nan")}},
     ["load.expected_qps"]),
    ("absurd grace", lambda: {**VALID, "load": {**VALID["load"], "grace": 1e12}}, ["load.grace", "7 days"]),
    ("absurd timeout", lambda: {**VALID, "target": {**VALID["target"], "timeout": "1e9h"}},
     ["target.timeout", "7 days"]),
    ("NaN send lag threshold", lambda: {**VALID, "load": {**VALID["load"], "send_lag_threshold": float("nan")}},
     ["load.send_lag_threshold", "finite"]),
    ("negative seed", lambda: {**VALID, "load": {**VALID["load"], "seed": -1}}, ["load.seed", "0"]),
    ("infinite stddev",
     lambda: {**VALID, "workload": {"prompts": {"input_tokens": {"mean": 5, "stddev": float("inf")}}}},
     ["workload.prompts.input_tokens.stddev", "finite"]),
    ("absurd max_in_flight", lambda: {**VALID, "load": {**VALID["load"], "max_in_flight": 10**12}},
     ["load.max_in_flight", "1000000"]),
]


@pytest.mark.parametrize("what,make,words", LIMITS, ids=[x[0] for x in LIMITS])
def test_negative_nan_and_absurd_values_are_refused_naming_the_limit(tmp_path, what, make, words):
    msg = _load_errors(tmp_path, make())
    for w in words:
        assert w in msg, (what, msg)


def test_a_phase_without_a_rate_is_refused(tmp_path):
    """No default rate exists: every phase states qps or concurrency, so no command can aim an unstated rate
    anywhere."""
    msg = _load_errors(tmp_path, _one_phase())
    assert "phases[0]" in msg and "qps" in msg and "concurrency" in msg
    data = json.loads(json.dumps(VALID))
    del data["load"]["phases"]
    assert "load.phases" in _load_errors(tmp_path, data)


def test_cli_exits_2_without_a_traceback_on_bad_files(tmp_path):
    bad = {
        "shape.yaml": "- just\n- a list\n",
        "yaml.yaml": "name: [unclosed\n",
        "alias.yaml": "a: &x [*x]\nname: *x\n",
        "limits.yaml": yaml.safe_dump(_one_phase(qps=1e12)),
        "nan.yaml": yaml.safe_dump(_one_phase(qps=1, duration=float("nan"))),
        "binary.yaml": b"\xff\xfe\x00garbage",
        "types.yaml": yaml.safe_dump({**VALID, "load": 5, "target": [1, 2], "slo": {"x": None}}),
    }
    for name, text in bad.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    files = [str(tmp_path / n) for n in bad]
    env = {**os.environ, "LATBENCH_NO_NETWORK": "1"}
    r = subprocess.run(LATBENCH + ["validate", *files], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout, r.stderr
    for name in bad:
        assert any(line.startswith(str(tmp_path / name) + ":") for line in r.stderr.splitlines()), (name, r.stderr)
    r = subprocess.run(LATBENCH + ["run", files[3], "--out", str(tmp_path / "runs")], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "1,000,000" in r.stderr
    assert not (tmp_path / "runs").exists()  # nothing was sent, nothing written


# --- the reference server's JSON API ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def refserver():
    from reference_server.background import BackgroundServer
    from reference_server.config import ServerConfig

    with BackgroundServer(ServerConfig.from_preset("naive", model="tiny", backend="numpy",
                                                   max_body_bytes=64 * 1024)) as srv:
        host, port = srv.url.split("//")[1].split(":")
        yield srv, host, int(port), srv.resolved["served_model_name"]


class Client:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=30)

    def post(self, path: str, raw: bytes, ctype="application/json") -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request("POST", path, body=raw, headers={"Content-Type": ctype})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def health(self) -> int:
        c = http.client.HTTPConnection(self.host, self.port, timeout=10)
        c.request("GET", "/health")
        status = c.getresponse().status
        c.close()
        return status


def _assert_openai_answer(status: int, data: bytes, sent) -> None:
    assert status != 500 and status < 500, (status, data[:300], sent)
    if status >= 400:
        err = json.loads(data)["error"]
        assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)
        assert set(err) >= {"message", "type", "param", "code"}


FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
          "stop", "stream", "stream_options", "n", "echo", "ignore_eos", "min_tokens", "logprobs", "user"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10),
                         st.integers(min_value=-2, max_value=6))
json_values = st.recursive(json_scalars,
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=8)
message = st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "x"]),
                                                   json_scalars),
                                 "content": st.one_of(st.text(max_size=20), json_values)})


FIELD_VALUES = {
    "max_tokens": st.one_of(st.integers(-2, 4), st.sampled_from([0, 10**30, 2048, 5000, "3", 1.5, True, None])),
    "temperature": st.one_of(st.floats(-1, 3), st.sampled_from([0, 2, "hot", None, 1e308])),
    "top_p": st.one_of(st.floats(-1, 2), st.sampled_from([0, 1, "x"])),
    "seed": st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([-1, 0, "1", 1.0])),
    "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=6), json_scalars),
    "stream": st.one_of(st.booleans(), json_scalars),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_scalars}), json_scalars),
    "messages": st.one_of(st.lists(message, max_size=3), json_values),
    "prompt": st.one_of(st.text(max_size=20), st.lists(st.integers(-3, 300), max_size=5), json_values),
}


@st.composite
def request_bodies(draw, model: str):
    """A valid body with a few fields replaced, added or removed: deep enough to pass the first checks."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "prompt": "hi", "max_tokens": 2}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        if draw(st.integers(0, 4)) == 0:
            body.pop(name, None)
        else:
            body[name] = draw(FIELD_VALUES.get(name, json_values))
    return body


def test_reference_api_fuzzed_json_never_500(refserver):
    srv, host, port, model = refserver
    client = Client(host, port)
    seen = []

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=request_bodies(model), path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
           stream_ok=st.booleans())
    def check(body, path, stream_ok):
        if isinstance(body.get("max_tokens"), int) and not isinstance(body["max_tokens"], bool):
            assume(body["max_tokens"] <= 8 or body["max_tokens"] > 2040)  # valid but long generations: slow, not new
        mct = body.get("max_completion_tokens")
        assume(not (isinstance(mct, int) and 8 < mct <= 2040))
        status, data = client.post(path, json.dumps(body, allow_nan=False).encode())
        seen.append(status)
        _assert_openai_answer(status, data, body)

    check()
    assert client.health() == 200
    assert any(s == 200 for s in seen) and any(400 <= s < 500 for s in seen)  # the fuzz reached both sides


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(raw=st.one_of(st.binary(max_size=300), st.text(max_size=100).map(str.encode),
                     st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"NaN", b'{"model": NaN}', b"\xff\xfe",
                                      (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
                                       b'"max_tokens": Infinity}'),
                                      (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], '
                                       b'"seed": -1, "max_tokens": 1}'),
                                      b'{"model": "tiny", "prompt": "x", "temperature": NaN, "max_tokens": 1}'])),
       ctype=st.sampled_from(["application/json", "text/plain", "", "multipart/form-data"]))
def test_reference_api_fuzzed_bytes_never_500(refserver, raw, ctype):
    srv, host, port, model = refserver
    status, data = Client(host, port).post("/v1/chat/completions", raw, ctype)
    _assert_openai_answer(status, data, raw[:100])


def test_reference_api_body_size_and_max_tokens_limits(refserver):
    srv, host, port, model = refserver
    c = Client(host, port)
    limit = srv.config.max_body_bytes
    big = json.dumps({"model": model, "prompt": "x" * limit, "max_tokens": 1}).encode()
    status, data = c.post("/v1/completions", big)
    assert status == 413 and str(limit) in json.loads(data)["error"]["message"]
    ctx = srv.resolved["model_spec"]["max_model_len"]

    def chat(**kw):
        return c.post("/v1/chat/completions",
                      json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], **kw}).encode())

    for mt, param, words in [(0, "max_tokens", "at least 1"), (-1, "max_tokens", "at least 1"),
                             (ctx, "max_tokens", str(ctx)), (10**30, "max_tokens", str(ctx)),
                             ("5", "max_tokens", "integer"), (True, "max_tokens", "integer"),
                             (2.5, "max_tokens", "integer")]:
        status, data = chat(max_tokens=mt)
        err = json.loads(data)["error"]
        assert status == 400 and err["param"] == param and words in err["message"], (mt, err)
    status, data = chat(max_completion_tokens=0)
    assert status == 400
    status, data = chat(max_tokens=3)
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] <= 3
    assert c.health() == 200
