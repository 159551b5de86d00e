"""Secrets never leave: planted credentials are searched for in every file of the RunDir, the reports
and the output of ``latbench run -v``, after a run against servers that echo request headers back.

tests/test_cli.py checks the basic case (an ${ENV} Authorization header and a literal x-api-key, a
well-behaved server, no -v). Here the server is hostile: it is a ``command:`` target latbench starts
itself, it logs every request's headers to its stdout (which latbench reads), and it echoes them in
401 error bodies and in 200 bodies that are not JSON (whose text reaches error details). Secrets sit in
a header from ${ENV}, in literal credential headers, in a URL path from ${ENV}, in a metrics URL's
query from ${ENV}, and as a URL password written literally.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.scenario.loader import load_scenario
from tests.helpers import write_scenario

ROOT = Path(__file__).resolve().parents[2]
LATBENCH = [sys.executable, "-m", "loadgen.cli"]
SECRETS = {
    "LB_PLANT_HEADER": "sk-plantedHEADER-7f3a9c",
    "LB_PLANT_PATH": "plantedPATH-51de02",
    "LB_PLANT_QUERY": "plantedQUERY-a8b7c6",
}
LITERAL = ["literalAUTH-0b1c2d", "literalGOOG-9e8d7c", "literalPASSWORD-4f4f4f"]
ALL = list(SECRETS.values()) + LITERAL


def _scenario() -> str:
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

    return f"""
    name: secrets
    targets:{target("echo401", "echo")}{target("echo200", "echo_ok", 'metrics_url: "http://127.0.0.1:9/metrics?token=${LB_PLANT_QUERY}"')}
      - name: userinfo
        url: "http://user:{LITERAL[2]}@127.0.0.1:9/${{LB_PLANT_PATH}}/v1"
        model: m
    load:
      arrival: constant
      phases:
        - {{name: main, duration: 500ms, qps: 10}}
    slo: ["error_rate < 1%"]
    """


@pytest.fixture(scope="module")
def verbose_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    path = write_scenario(tmp, _scenario())
    env = {**os.environ, **SECRETS}
    r = subprocess.run(LATBENCH + ["-v", "run", str(path), "--out", str(tmp / "runs")], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=120)
    (rd,) = list((tmp / "runs").iterdir())
    return r, rd


def test_planted_secrets_appear_in_no_file_of_the_rundir_nor_stdout(verbose_run):
    r, rd = verbose_run
    assert r.returncode in (1, 3), r.stdout + r.stderr  # the echo targets answered errors; userinfo is unreachable
    assert "Traceback" not in r.stderr
    files = [f for f in rd.rglob("*") if f.is_file()]
    names = {f.name for f in files}
    assert {"scenario.yaml", "meta.json", "summary.json", "requests.parquet", "report.html", "summary.md",
            "junit.xml", "metrics.json"} <= names, names
    for f in files:
        data = f.read_bytes()
        for s in ALL:
            assert s.encode() not in data, (s, f)
    for s in ALL:
        assert s not in r.stdout, s
    text = (rd / "scenario.yaml").read_text()
    assert "${LB_PLANT_HEADER}" in text and "${LB_PLANT_PATH}" in text and "***" in text


def test_planted_secrets_appear_nowhere_in_the_verbose_log(verbose_run):
    r, rd = verbose_run
    leaked = [ln for ln in r.stderr.splitlines() if any(s in ln for s in ALL)]
    assert not leaked, leaked[0][:160]


def test_loader_collects_every_expanded_and_literal_credential(tmp_path):
    loaded = load_scenario(write_scenario(tmp_path, _scenario()), env=dict(SECRETS))
    assert set(loaded.secrets) >= set(ALL)
    red = loaded.redacted()
    flat = repr(red)
    assert not any(s in flat for s in ALL)
    assert red["targets"][2]["url"] == "http://user:***@127.0.0.1:9/${LB_PLANT_PATH}/v1"
