"""``latbench alerts`` and ``latbench dashboards``: the files parse, every objective has its rule, promtool (Debian's
``prometheus`` package; skipped where absent) accepts the rules and fires them on the series they should, and the
dashboard's queries are valid PromQL; the GPU panel appears only where the server exports GPU utilization."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from click.testing import CliRunner

from loadgen.cli.main import main
from loadgen.run.targets import free_port
from tests.helpers import ROOT, start_reference

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: apt-get install "
                                                             "prometheus)")

SCENARIO = """\
name: prod
targets:
  - {name: api, url: "http://127.0.0.1:9/v1", stream: true}
  - {name: canary, url: "http://127.0.0.1:9/v1", stream: true}
load:
  phases:
    - {name: warmup, duration: 5s, qps: 5, record: false}
    - {name: steady, duration: 30s, qps: 10}
slo:
  - latency.p99 < 300ms
  - latency.mean < 120ms
  - ttft.max < 1s
  - error_rate < 1%
  - goodput >= 99%
  - steady: latency.p50 < 100ms
  - achieved_qps >= 9
"""


def invoke(*args: str):
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def rules(tmp_path):
    sc = tmp_path / "prod.yaml"
    sc.write_text(SCENARIO)
    out = invoke("alerts", str(sc), "--out", str(tmp_path / "out"), "--for", "1m", "--range", "1m")
    plain = tmp_path / "out" / "latbench-prod.rules.yml"
    k8s = tmp_path / "out" / "latbench-prod.prometheusrule.yaml"
    return out, plain, k8s


def test_every_watched_objective_has_a_rule_and_the_rest_are_named(rules):
    out, plain, k8s = rules
    doc = yaml.safe_load(plain.read_text())
    assert [g["name"] for g in doc["groups"]] == ["latbench-prod-api", "latbench-prod-canary"]
    for g in doc["groups"]:
        by_slo = {r["labels"]["slo"]: r for r in g["rules"]}
        assert set(by_slo) == {"latency.p99 < 300ms", "latency.mean < 120ms", "ttft.max < 1s", "error_rate < 1%",
                               "goodput >= 99%", "send_lag", "probe"}
        p99 = by_slo["latency.p99 < 300ms"]
        assert p99["expr"].startswith("histogram_quantile(0.99, sum by (le) (rate(latbench_latency_seconds_bucket{")
        assert p99["expr"].endswith("[1m]))) > 0.3") and p99["for"] == "1m"
        assert "interpolated" in p99["annotations"]["description"] and "exact" in p99["annotations"]["description"]
        assert by_slo["goodput >= 99%"]["expr"].startswith("latbench_slo_holding{")
        assert 'le="1.0"' in by_slo["ttft.max < 1s"]["expr"]
    assert "no rule for 'steady: latency.p50 < 100ms'" in out and "no rule for 'achieved_qps >= 9'" in out
    obj = yaml.safe_load(k8s.read_text())
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["name"] == "latbench-prod" and obj["spec"] == doc


@needs_promtool
def test_promtool_accepts_both_files(rules, tmp_path):
    _, plain, k8s = rules
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(k8s.read_text())["spec"]))
    for f in (plain, spec):
        res = promtool("check", "rules", str(f))
        assert res.returncode == 0 and "SUCCESS: 14 rules found" in res.stdout, res.stdout + res.stderr


def _series(target: str, le_counts: dict[str, int], total: int, ok: int, err: int) -> list[dict]:
    """Input series growing every 15 s by the given per-interval counts."""
    lab = f'scenario="prod",target="{target}",phase="watch"'
    out = [{"series": f'latbench_latency_seconds_bucket{{{lab},le="{le}"}}', "values": f"0+{n}x40"}
           for le, n in le_counts.items()]
    out += [{"series": f"latbench_latency_seconds_count{{{lab}}}", "values": f"0+{total}x40"},
            {"series": f"latbench_latency_seconds_sum{{{lab}}}", "values": f"0+{total * 0.1}x40"},
            {"series": f'latbench_requests_total{{{lab},outcome="ok",error="none"}}', "values": f"0+{ok}x40"},
            {"series": f'latbench_requests_total{{{lab},outcome="error",error="timeout"}}', "values": f"0+{err}x40"},
            {"series": f'latbench_slo_holding{{{lab},slo="goodput >= 99%"}}', "values": "1x40"},
            {"series": f"latbench_probe_qps{{{lab}}}", "values": "5x40"}]
    return out


@needs_promtool
def test_promtool_fires_exactly_the_breached_objectives(rules, tmp_path):
    """api: 2% of requests above 300 ms and 2% errors (p99 and error_rate breached); canary: 0.5% above, no error."""
    _, plain, _ = rules
    doc = yaml.safe_load(plain.read_text())
    series = (_series("api", {"0.25": 90, "0.3": 98, "1.0": 100, "+Inf": 100}, 100, 98, 2)
              + _series("canary", {"0.25": 190, "0.3": 199, "1.0": 200, "+Inf": 200}, 200, 200, 0))

    def expect(alert: str, target: str, fires: bool) -> dict:
        rule = next(r for g in doc["groups"] for r in g["rules"]
                    if r["alert"] == alert and r["labels"]["target"] == target)
        return {"eval_time": "5m", "alertname": alert,
                "exp_alerts": [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}] if fires
                else []}

    tests = [expect("LatbenchLatencyP99", "api", True), expect("LatbenchErrorRate", "api", True),
             expect("LatbenchLatencyMean", "api", False), expect("LatbenchTtftMax", "api", False),
             expect("LatbenchGoodput", "api", False), expect("LatbenchProbeSilent", "api", False)]
    # each alert name is one test case: both targets' expectations together
    canary = {"LatbenchLatencyP99": False, "LatbenchErrorRate": False}
    for t in tests:
        if t["alertname"] in canary:
            t["exp_alerts"] += expect(t["alertname"], "canary", canary[t["alertname"]])["exp_alerts"]
    unit = tmp_path / "unit.yml"
    unit.write_text(yaml.safe_dump({"rule_files": [str(plain)], "evaluation_interval": "15s", "tests": [
        {"interval": "15s", "input_series": series, "alert_rule_test": tests}]}, sort_keys=False))
    res = promtool("test", "rules", str(unit))
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr
    # and the check can fail: claim the canary breaches its p99 too
    tests[0]["exp_alerts"] += expect("LatbenchLatencyP99", "canary", True)["exp_alerts"]
    unit.write_text(yaml.safe_dump({"rule_files": [str(plain)], "evaluation_interval": "15s", "tests": [
        {"interval": "15s", "input_series": series, "alert_rule_test": tests}]}, sort_keys=False))
    assert promtool("test", "rules", str(unit)).returncode != 0


def _exprs(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    sc = tmp_path / "prod.yaml"
    sc.write_text(SCENARIO.replace('stream: true}', 'stream: true, metrics_url: "http://127.0.0.1:9/metrics"}', 1))
    out = invoke("dashboards", str(sc), "--out", str(tmp_path), "--gpu", "--server-selector", 'job="vllm"')
    board = json.loads((tmp_path / "latbench-prod.dashboard.json").read_text())
    assert "panels" in out
    exprs = _exprs(board)
    assert len(exprs) >= 12
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": e.replace("$__rate_interval", "5m").replace("$target", ".*")}
        for i, e in enumerate(exprs)]}]}
    f = tmp_path / "q.yml"
    f.write_text(yaml.safe_dump(rules))
    res = promtool("check", "rules", str(f))
    assert res.returncode == 0, res.stdout + res.stderr


def test_dashboard_panels_follow_the_scenario(tmp_path):
    sc = tmp_path / "prod.yaml"
    sc.write_text(SCENARIO)
    invoke("dashboards", str(sc), "--out", str(tmp_path))
    board = json.loads((tmp_path / "latbench-prod.dashboard.json").read_text())
    titles = [p["title"] for p in board["panels"]]
    assert "SLOs holding" in titles and any(t.startswith("Latency percentiles") for t in titles)
    assert "Time to first token" in titles and not any("GPU" in t or "Server" in t for t in titles)
    lat = next(p for p in board["panels"] if p["title"].startswith("Latency percentiles"))
    assert [s["value"] for s in lat["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 0.3]
    assert all('scenario="prod"' in e for e in _exprs(board))


def test_gpu_panel_only_where_the_server_exports_gpu_utilization(tmp_path):
    """A CPU reference server exports no GPU metric: no GPU panel by default, and the command says why; --gpu adds
    it beside latency, with the 70-80% band."""
    port = free_port()
    server = start_reference(port)
    try:
        sc = tmp_path / "ref.yaml"
        sc.write_text(SCENARIO.replace('stream: true}', f'stream: true, metrics_url: "http://127.0.0.1:{port}/metrics"}}',
                                       1))
        out = invoke("dashboards", str(sc), "--out", str(tmp_path / "auto"))
    finally:
        server.terminate()
        server.wait(30)
    assert "no GPU panel: its metrics_url exports no GPU utilization" in out
    auto = json.loads((tmp_path / "auto" / "latbench-prod.dashboard.json").read_text())
    titles = [p["title"] for p in auto["panels"]]
    assert "Server (its own /metrics)" in titles and not any("GPU" in t for t in titles)
    invoke("dashboards", str(sc), "--out", str(tmp_path / "gpu"), "--gpu")
    board = json.loads((tmp_path / "gpu" / "latbench-prod.dashboard.json").read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    i = next(k for k, p in enumerate(panels) if p["title"].startswith("GPU utilization"))
    assert panels[i - 1]["title"].startswith("Latency percentiles")  # beside latency, same row
    assert panels[i]["gridPos"]["y"] == panels[i - 1]["gridPos"]["y"]
    steps = panels[i]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 70.0, 80.0]
    assert panels[i]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "area"


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed (Debian: apt-get install "
                                                               "prometheus)")
def test_a_real_prometheus_scrapes_the_watch_and_fires_the_breached_rule_only(tmp_path):
    """The three pieces together, as a user runs them: the reference server made slow (every request +400 ms),
    `latbench alerts`, `latbench watch`, and Prometheus scraping the watch with the rules loaded."""
    port, metrics, prom_port = free_port(), free_port(), free_port()
    sc = tmp_path / "e2e.yaml"
    sc.write_text(f"""\
name: e2e
target: {{url: "http://127.0.0.1:{port}/v1", model: tiny, stream: true}}
workload: {{prompts: {{input_tokens: 8, output_tokens: 4, distinct: 20}}}}
load: {{phases: [{{name: steady, duration: 10s, qps: 5}}]}}
slo: ["latency.p99 < 300ms", "error_rate < 1%"]
""")
    invoke("alerts", str(sc), "--out", str(tmp_path / "mon"), "--for", "5s", "--range", "15s")
    (tmp_path / "prom.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "mon" / "latbench-e2e.rules.yml")],
        "scrape_configs": [{"job_name": "latbench", "static_configs": [{"targets": [f"127.0.0.1:{metrics}"]}]}]}))
    server = start_reference(port, "--slow-rate", "1.0", "--slow-ms", "400")
    procs = [server]
    try:
        procs.append(subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prom.yml'}",
                                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address=127.0.0.1:{prom_port}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        watch = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "watch", str(sc), "--qps", "10",
                                  "--metrics-port", str(metrics), "--window", "15s", "--duration", "90s",
                                  "--out", str(tmp_path / "runs")], cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        procs.append(watch)
        firing: set = set()
        deadline = time.monotonic() + 80
        while time.monotonic() < deadline and "LatbenchLatencyP99" not in firing:
            time.sleep(2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alerts", timeout=5) as resp:
                    alerts = json.loads(resp.read())["data"]["alerts"]
            except OSError:
                continue
            firing = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
        assert firing == {"LatbenchLatencyP99"}, firing
        q = urllib.parse.quote("histogram_quantile(0.99, sum by (le) (rate(latbench_latency_seconds_bucket[15s])))")
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/query?query={q}", timeout=5) as resp:
            (result,) = json.loads(resp.read())["data"]["result"]
        assert 0.4 <= float(result["value"][1]) <= 120.0  # interpolated, but past the 400 ms every request waited
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(30)
