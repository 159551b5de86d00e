"""Secrets never leave: planted credentials are searched for in every file of the RunDir and in every byte
``latbench -v run`` prints (stdout and stderr), after runs against servers that echo requests back.

tests/integration/test_cli.py checks the basic case (an ${ENV} Authorization header and a literal x-api-key, a
well-behaved server, no -v). Here the servers are hostile: ``command:`` targets latbench starts itself log
every request's headers to their stdout (which latbench reads) and echo them in 401 error bodies and in 200
bodies that are not JSON (whose text reaches error details and the -v log); a metrics endpoint echoes its
URL's query into the labels of server_metrics.csv. Secrets sit in a header from ${ENV}, in literal
credential headers, in a URL path from ${ENV}, in a metrics URL's query from ${ENV}, as a URL password
written literally, as a literal ``?api_key=`` in a scenario URL, and in ``--target``'s userinfo and query.
They are looked for in the forms they leak in too: JSON-escaped (a secret holding a quote), as the ``Basic``
credentials a userinfo is sent as, and cut short where a server's message is kept to its first characters.

What a server sends never drives the terminal (issue 27, item 14): a server whose error body holds ESC and BEL
bytes is quoted by ``-v`` with them escaped. An ``${ENV}`` host is no secret (item 17): the URL that
``latbench watch`` prints is usable.

Redaction must also rewrite nothing but secrets (issue 13, item 4): a short ${ENV} value (``http``) expanded
into a URL leaves error classes such as ``http_5xx`` alone, and the URL is written as the scenario wrote it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.scenario.loader import load_scenario
from tests.bad_servers import BadServer
from tests.helpers import write_scenario

ROOT = Path(__file__).resolve().parents[2]
LATBENCH = [sys.executable, "-m", "loadgen.cli"]
SECRETS = {
    "LB_PLANT_HEADER": "sk-plantedHEADER-7f3a9c",
    "LB_PLANT_PATH": "plantedPATH-51de02",
    "LB_PLANT_QUERY": "plantedQUERY-a8b7c6",
    "LB_PLANT_QUOTED": 'pl"antedQUOTED-2e2e2e',  # echoed JSON-escaped, and cut short inside its escaped form
}
LITERAL = ["literalAUTH-0b1c2d", "literalGOOG-9e8d7c", "literalPASSWORD-4f4f4f", "literalAPIKEY-3e3e3e"]
TARGET_FLAG = ["flagPASSWORD-6a6a6a", "flagAPIKEY-5b5b5b"]  # in --target's userinfo and query
HOSTILE_FLAG = "flagBASIC-8c8c8c"  # the password of --target against the server that sends ESC bytes
ALL = list(SECRETS.values()) + LITERAL + TARGET_FLAG + [HOSTILE_FLAG]
#: the Basic credentials each userinfo is sent as
BASIC = [base64.b64encode(pair.encode()).decode() for pair in
         (f"user:{LITERAL[2]}", f"bob:{TARGET_FLAG[0]}", f"bob:{HOSTILE_FLAG}")]
CUT = 12  # a leak is found from this many first characters of a form on (a message cut inside a secret)


def _leak_forms(secret: str) -> set[str]:
    """How a secret may appear in text: as is, JSON-escaped, Python-quoted; each from its first CUT characters."""
    return {form[:CUT] for form in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1])}


def _scenario(metrics_port: int = 9) -> str:
    server = [sys.executable, "-m", "tests.bad_servers", "--mode", "{mode}", "--port", "{port}"]

    def target(name, mode, extra=""):
        argv = ", ".join(f'"{a}"' for a in server).replace("{mode}", mode)
        return f"""
      - name: {name}
        command: {{run: [{argv}], url: "http://127.0.0.1:{{port}}/${{LB_PLANT_PATH}}/v1",
                  ready_url: "http://127.0.0.1:{{port}}/health", startup_timeout: 30s}}
        model: m
        stream: false
        headers:
          Authorization: "Bearer ${{LB_PLANT_HEADER}}"
          x-api-key: {LITERAL[0]}
          X-Goog-Api-Key: {LITERAL[1]}
        {extra}"""

    metrics = f'metrics_url: "http://127.0.0.1:{metrics_port}/metrics_echo?token=${{LB_PLANT_QUERY}}"'
    return f"""
    name: secrets
    targets:{target("echo401", "echo")}{target("echo200", "echo_ok", metrics)}
      - name: userinfo
        url: "http://user:{LITERAL[2]}@127.0.0.1:9/${{LB_PLANT_PATH}}/v1"
        model: m
      - name: query
        url: "http://127.0.0.1:{metrics_port}/echo/v1?api_key={LITERAL[3]}&api-version=2024-02-01"
        model: m
        stream: false
      - name: quoted
        url: "http://127.0.0.1:{metrics_port}/echo/v1"
        model: m
        stream: false
        headers: {{Authorization: "Bearer ${{LB_PLANT_QUOTED}}"}}
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 1s, qps: 10}}
    slo: ["error_rate < 1%"]
    """


def _latbench(args: list[str], tmp: Path, extra_env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    env = {**os.environ, **SECRETS, **(extra_env or {})}
    r = subprocess.run(LATBENCH + args + ["--out", str(tmp / "runs")], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=180)
    (rd,) = list((tmp / "runs").iterdir())
    return r, rd


@pytest.fixture(scope="module")
def echo_server():
    with BadServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def verbose_run(tmp_path_factory, echo_server):
    tmp = tmp_path_factory.mktemp("secrets")
    path = write_scenario(tmp, _scenario(echo_server.port))
    # the load path against servers echoing every header back (the pre-flight would stop most targets before any
    # load: test_planted_secrets_never_leak_through_the_preflight runs it)
    return _latbench(["-v", "run", str(path), "--no-preflight"], tmp)


@pytest.fixture(scope="module")
def target_flag_run(tmp_path_factory, echo_server):
    """``--target`` with a password and an api_key, against a server that echoes every header back."""
    tmp = tmp_path_factory.mktemp("secrets-target")
    path = write_scenario(tmp, _scenario())
    url = (f"http://bob:{TARGET_FLAG[0]}@127.0.0.1:{echo_server.port}/echo/v1"
           f"?api_key={TARGET_FLAG[1]}&api-version=2024-02-01")
    return _latbench(["-v", "run", str(path), "--target", url, "--no-preflight"], tmp)


def _assert_nowhere(r: subprocess.CompletedProcess, rd: Path) -> None:
    files = [f for f in rd.rglob("*") if f.is_file()]
    forms = {f for s in ALL + BASIC for f in _leak_forms(s)}
    for f in files:
        data = f.read_bytes()
        for s in forms:
            assert s.encode() not in data, (s, f)
    for stream, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        leaked = [ln for ln in text.splitlines() if any(s in ln for s in forms)]
        assert not leaked, (stream, leaked[0][:300])


def test_planted_secrets_appear_in_no_file_of_the_rundir_nor_any_output(verbose_run, echo_server):
    r, rd = verbose_run
    assert r.returncode in (1, 3), r.stdout + r.stderr  # the echo targets answered errors; userinfo is unreachable
    assert "Traceback" not in r.stderr
    names = {f.name for f in rd.rglob("*") if f.is_file()}
    assert {"scenario.yaml", "meta.json", "summary.json", "requests.parquet", "report.html", "summary.md",
            "junit.xml", "metrics.json", "server_metrics.csv"} <= names, names
    assert echo_server.hits["metrics_echo"] > 0 and echo_server.hits["echo"] > 0
    _assert_nowhere(r, rd)
    text = (rd / "scenario.yaml").read_text()
    assert "${LB_PLANT_HEADER}" in text and "${LB_PLANT_PATH}" in text and "***" in text
    assert "api-version=2024-02-01" in text  # what is no credential is kept


def test_planted_secrets_never_leak_through_the_preflight(tmp_path, echo_server):
    """The pre-flight quotes what a server answered when it is not the API's shape, and names the headers it sent:
    with every target of the planted scenario (echoing servers among them), nothing of a secret is printed or
    written, by ``run`` (stopped before any load) nor by ``latbench check``."""
    path = write_scenario(tmp_path, _scenario(echo_server.port))
    r, rd = _latbench(["-v", "run", str(path)], tmp_path)
    assert r.returncode == 3 and "pre-flight" in r.stdout + r.stderr, r.stdout + r.stderr
    _assert_nowhere(r, rd)
    env = {**os.environ, **SECRETS}
    c = subprocess.run(LATBENCH + ["check", str(path)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert c.returncode == 3 and "FAILED" in c.stdout, c.stdout + c.stderr
    _assert_nowhere(c, tmp_path / "nothing-written")


def test_target_userinfo_and_query_never_written_nor_printed(target_flag_run):
    """Issue 13, item 2: --target "http://user:pass@HOST/v1?api_key=..." leaked into meta.json and report.html."""
    r, rd = target_flag_run
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    _assert_nowhere(r, rd)
    meta = json.loads((rd / "meta.json").read_text())
    (entry,) = meta["targets"]
    assert entry["url"].startswith("http://bob:***@127.0.0.1:") and "api_key=***" in entry["url"]
    assert "api-version=2024-02-01" in entry["url"]


def test_short_expanded_values_are_hidden_where_placed_and_rewrite_nothing_else(tmp_path):
    """Issue 13, item 4: RT_SCHEME=http turned summary.json's error class into ***_5xx and the URL into ***://."""
    with BadServer() as srv:
        path = write_scenario(tmp_path, f"""
        name: short
        target: {{url: "${{RT_SCHEME}}://127.0.0.1:{srv.port}/s500body/v1", model: m, stream: false}}
        load:
          arrival: constant
          phases: [{{name: main, duration: 500ms, qps: 10}}]
        """)
        r, rd = _latbench(["run", str(path)], tmp_path, {"RT_SCHEME": "http"})
    assert r.returncode == 1, r.stdout + r.stderr  # no SLO, but every request failed, the service's own way (5xx)
    (tdir,) = [p for p in rd.iterdir() if p.is_dir()]
    summary = json.loads((tdir / "summary.json").read_text())
    assert set(summary["overall"]["errors"]) == {"http_5xx"}
    assert "http_5xx" in summary["error_classes"]
    assert "***" not in (tdir / "summary.json").read_text()
    meta = json.loads((rd / "meta.json").read_text())
    assert meta["targets"][0]["url"] == f"${{RT_SCHEME}}://127.0.0.1:{srv.port}/s500body/v1"
    assert "http_5xx" in (rd / "report.html").read_text()


def test_loader_collects_every_expanded_and_literal_credential(tmp_path):
    loaded = load_scenario(write_scenario(tmp_path, _scenario()), env=dict(SECRETS))
    assert set(loaded.secrets) >= set(ALL) - set(TARGET_FLAG) - {HOSTILE_FLAG}
    red = loaded.redacted()
    flat = repr(red)
    assert not any(s in flat for s in ALL)
    assert red["targets"][2]["url"] == "http://user:***@127.0.0.1:9/${LB_PLANT_PATH}/v1"
    assert red["targets"][3]["url"] == "http://127.0.0.1:9/echo/v1?api_key=***&api-version=2024-02-01"


def test_a_repeated_capacity_search_writes_and_prints_no_secret(tmp_path, echo_server):
    """`latbench capacity --repeat` (which came after the redaction path) writes through it too: secrets in
    --target and an ${ENV} header, a server echoing them back, two searches; a clean exit, nothing leaked."""
    path = write_scenario(tmp_path, """
    name: cap-secrets
    target:
      url: "http://127.0.0.1:9/v1"
      model: m
      stream: false
      headers: {Authorization: "Bearer ${LB_PLANT_HEADER}"}
    load: {phases: [{name: main, duration: 1s, qps: 5}]}
    slo: ["latency.p99 < 1s"]
    """)
    url = f"http://bob:{TARGET_FLAG[0]}@127.0.0.1:{echo_server.port}/echo/v1?api_key={TARGET_FLAG[1]}"
    r, rd = _latbench(["capacity", str(path), "--target", url, "--min", "5", "--max", "10", "--step-duration", "1s",
                       "--warmup", "0s", "--repeat", "2", "--no-preflight"], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr  # reachable, and no rate held: a failed search, not a crash
    assert "Traceback" not in r.stderr
    top = json.loads((rd / "capacity.json").read_text())
    assert top["repeats"] == 2 and top["unreachable"] is False
    _assert_nowhere(r, rd)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, echo_server):
    """``latbench -v run --target http://bob:PASSWORD@...`` against a server whose 500s start with terminal
    control sequences and echo every header back (the Basic credentials the userinfo is sent as among them)."""
    tmp = tmp_path_factory.mktemp("secrets-hostile")
    path = write_scenario(tmp, """
    name: hostile
    target: {url: "http://127.0.0.1:9/v1", model: m, stream: false}
    load:
      arrival: constant
      phases: [{name: main, duration: 600ms, qps: 10}]
    slo: ["error_rate < 1%"]
    """)
    url = f"http://bob:{HOSTILE_FLAG}@127.0.0.1:{echo_server.port}/echo_ansi/v1"
    return _latbench(["-v", "run", str(path), "--target", url], tmp)


def test_the_basic_credentials_of_a_target_userinfo_are_never_printed(hostile_run, echo_server):
    """Issue 27, item 3: --target with userinfo is sent as `Authorization: Basic base64(user:password)`; a
    server echoing it got that base64 printed by -v (the encoded form was no registered secret)."""
    r, rd = hostile_run
    assert r.returncode == 1, r.stdout + r.stderr  # every request answered 500: the SLO failed
    assert echo_server.hits["echo_ansi"] > 0
    assert "failed request" in r.stderr and '"Authorization": "Basic ***"' in r.stderr, r.stderr[-2000:]
    _assert_nowhere(r, rd)


def test_control_bytes_a_server_sends_never_reach_the_terminal_raw(hostile_run):
    """Issue 27, item 14: -v wrote a server's ESC and BEL bytes to the terminal: the window retitled, a line
    wiped and a fake "verdict: PASSED" printed. They are escaped, and the only verdict is latbench's."""
    r, _ = hostile_run
    for stream, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        assert "\x1b" not in text and "\x07" not in text, (stream, text[-2000:])
        assert not [ln for ln in text.splitlines() if ln.startswith("verdict: PASSED")], stream
    assert "\\x1b]0;pwned\\x07\\x1b[2K verdict: PASSED" in r.stderr, r.stderr[-2000:]  # shown, escaped (CR: a space)
    assert "verdict: FAILED" in r.stdout


def test_a_secret_in_a_validation_error_is_never_printed(tmp_path):
    """Issue 27, item 3: `metrics_url: "http://[${KEY}]/metrics"` printed the expanded key in the error."""
    path = write_scenario(tmp_path, """
    name: bad
    target: {url: "http://127.0.0.1:9/v1", metrics_url: "http://[${LB_PLANT_HEADER}]/metrics"}
    load: {phases: [{name: main, duration: 1s, qps: 1}]}
    """)
    r = subprocess.run(LATBENCH + ["validate", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={**os.environ, **SECRETS})
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"{path}:3:") and "target.metrics_url: not a URL" in line, line
    assert "${LB_PLANT_HEADER}" in line and SECRETS["LB_PLANT_HEADER"] not in r.stdout + r.stderr


def test_an_env_host_is_printed_as_it_is_by_watch(tmp_path, echo_server):
    """Issue 27, item 17: a target's host from ${ENV} was taken for a secret, so LATBENCH_METRICS_URL (and every
    127.0.0.1 printed) read `http://${LB_WATCH_HOST}:port/metrics`. A host is where requests go, no secret; a
    secret header beside it stays hidden."""
    path = write_scenario(tmp_path, f"""
    name: envhost
    target:
      url: "http://${{LB_WATCH_HOST}}:{echo_server.port}/ok/v1"
      model: m
      stream: false
      headers: {{Authorization: "Bearer ${{LB_PLANT_HEADER}}"}}
    load: {{phases: [{{name: main, duration: 1s, qps: 1}}]}}
    """)
    r = subprocess.run(LATBENCH + ["watch", str(path), "--metrics-port", "0", "--qps", "5", "--duration", "1s",
                                   "--status-every", "10s", "--out", str(tmp_path / "runs")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, **SECRETS, "LB_WATCH_HOST": "127.0.0.1"})
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("LATBENCH_METRICS_URL=")]
    assert line.startswith("LATBENCH_METRICS_URL=http://127.0.0.1:") and line.endswith("/metrics"), line
    (rd,) = list((tmp_path / "runs").iterdir())
    meta = json.loads((rd / "meta.json").read_text())
    assert meta["targets"][0]["url"] == f"http://127.0.0.1:{echo_server.port}/ok/v1"
    assert "${LB_WATCH_HOST}" in (rd / "scenario.yaml").read_text()  # the scenario copy, as written
    assert SECRETS["LB_PLANT_HEADER"] not in r.stdout + r.stderr


@pytest.mark.parametrize("mode", ["steady", "trace"])
def test_the_model_lookup_follows_no_redirect_to_another_origin_with_the_key(tmp_path, mode):
    """Issue 27, item 1: the model lookup (and a trace replay's max_model_len lookup) used urllib, which followed a
    302 to another port with every header: the listener there got ``authorization: Bearer <key>``. Now every
    request latbench makes besides load goes through loadgen.fetch: a redirect to another origin is not followed,
    and the run says why it stopped."""
    key = "sk-redirected-key-5be1"
    heard: list[str] = []
    with BadServer(log=heard.append) as listener, BadServer() as srv:
        load = "  phases: [{name: main, duration: 300ms, qps: 10}]\n"
        if mode == "trace":
            rows = "\n".join(json.dumps({"timestamp": i * 100, "input_length": 16, "output_length": 2,
                                         "hash_ids": [i]}) for i in range(3))
            (tmp_path / "t.jsonl").write_text(rows + "\n")
            load = "  mode: trace\n  file: t.jsonl\n"
        path = write_scenario(tmp_path, f"""
name: lookup
target: {{url: "{srv.url('redirect_away')}?to={listener.port}", stream: false,
         headers: {{Authorization: "Bearer ${{LB_REDIRECT_KEY}}", X-Api-Key: "${{LB_REDIRECT_KEY}}"}}}}
load:
{load}""")
        res = subprocess.run([*LATBENCH, "-v", "run", str(path), "--out", str(tmp_path / "runs"), "--quiet",
                              "--no-report"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "LB_REDIRECT_KEY": key})
    assert not heard and sum(listener.hits.values()) == 0, heard  # nothing reached the other origin
    assert res.returncode == 3, res.stdout + res.stderr
    assert "to another origin" in res.stdout + res.stderr
    assert key not in res.stdout + res.stderr


def test_a_model_list_that_never_ends_holds_the_run_seconds_not_minutes(tmp_path):
    """Issue 27, item 1: a slowloris /v1/models held the run 120 s; the lookup has an overall deadline now."""
    import time

    with BadServer() as srv:
        path = write_scenario(tmp_path, f"""
name: slowloris
target: {{url: "{srv.url('stall')}", stream: false}}
load: {{phases: [{{name: main, duration: 300ms, qps: 10}}]}}
""")
        t0 = time.monotonic()
        res = subprocess.run([*LATBENCH, "run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--no-report"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    assert res.returncode == 3, res.stdout + res.stderr
    assert "no answer within the deadline" in res.stdout and took < 25, (took, res.stdout)
