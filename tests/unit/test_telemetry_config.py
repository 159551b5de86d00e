"""What a scenario may say of server-side telemetry, and the GPU sampled with NVML: ``target.telemetry`` validated
with file, line and field; SLOs on server-side quantities (``server.queue_waiting.max < 50``) and ranges (``in
lo..hi``) parsed with clear errors and judged on summary.json's telemetry, not measurable when it has none; NVML
read through a stand-in module (no GPU here), and for real in a test marked ``gpu``."""

from __future__ import annotations

import sys
import time

import pytest

from loadgen.analysis.telemetry import Reading, read_samples, telemetry_slos
from loadgen.analysis.verdict import TargetOutcome, target_reasons
from loadgen.engine.gpu import GpuSampler, load_nvml
from loadgen.errors import ScenarioError
from loadgen.records.results import SloResult, Summary, TelemetryPhase, TelemetryStat, TelemetrySummary
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.slo import parse_slo
from tests.engine_metrics import FakeNvml
from tests.helpers import write_scenario


@pytest.mark.parametrize("line, metric, stat, op, lo, hi", [
    ("server.queue_waiting.max < 50", "server.queue_waiting", "max", "<", 50.0, None),
    ("gpu.utilization.mean in 70%..80%", "gpu.utilization", "mean", "in", 0.70, 0.80),
    ("burst: server.ttft.p99 < 200ms", "server.ttft", "p99", "<", 0.2, None),
    ("server.kv_cache_usage.max <= 0.9", "server.kv_cache_usage", "max", "<=", 0.9, None),
    ("latency.p99 in 10ms..300ms", "latency", "p99", "in", 0.01, 0.3),
    ("error_rate in 0%..1%", "error_rate", None, "in", 0.0, 0.01),
])
def test_server_side_objectives_and_ranges_parse(line, metric, stat, op, lo, hi):
    s = parse_slo(line)
    assert (s.metric, s.stat, s.op, s.threshold, s.upper) == (metric, stat, op, pytest.approx(lo),
                                                              None if hi is None else pytest.approx(hi))
    if op == "in":
        assert s.check(lo) and s.check(hi) and not s.check(hi * 1.01 + 1e-9) and not s.check(None)


@pytest.mark.parametrize("line, says", [
    ("server.queue_waiting.p99 < 5", "server.queue_waiting: unknown statistic 'p99'; expected one of mean, max"),
    ("server.nothing.max < 3", "unknown server-side quantity 'server.nothing'; expected one of server."),
    ("gpu.utilization.mean in 80%..70%", "the range is empty"),
    ("gpu.utilization.mean in 70%", "expected a range such as '70%..80%'"),
    ("server.queue_waiting.max < many", "server.queue_waiting.max: expected a number, got 'many'"),
    ("server.ttft.mean < fast", "expected a duration such as '300ms'"),
])
def test_bad_server_side_objectives_say_what_was_expected(line, says):
    with pytest.raises(ValueError) as e:
        parse_slo(line)
    assert says in str(e.value)


TARGET = """
name: t
target:
  url: http://127.0.0.1:9/v1
  telemetry: {telemetry}
load:
  phases: [{{name: main, duration: 1s, qps: 1}}]
"""


@pytest.mark.parametrize("telemetry, says", [
    ("{engine: vlm}", "target.telemetry.engine"),
    ("{names: {server.queue: q}}", "unknown quantity 'server.queue'"),
    ("{names: {server.queue_waiting: 'a b'}}", "expected a metric name without spaces"),
    ("{nvml: maybe}", "target.telemetry.nvml"),
])
def test_target_telemetry_mistakes_name_file_line_and_field(tmp_path, telemetry, says):
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_scenario(tmp_path, TARGET.format(telemetry=telemetry)))
    assert "s.yaml:5:" in str(e.value) and says in str(e.value)


def _summary(telemetry: TelemetrySummary | None, *lines: str) -> Summary:
    return Summary(slo=[SloResult(expr=x, applies=True, passed=False) for x in lines], telemetry=telemetry)


def test_server_side_objectives_are_judged_on_the_telemetry_and_unmeasurable_ones_fail():
    ph = TelemetryPhase(quantities={"server.queue_waiting": TelemetryStat(source="vllm:num_requests_waiting",
                                                                          max=140.0, mean=30.0)})
    t = TelemetrySummary(measured=True, phases={"burst": ph}, overall=ph)
    lines = ["server.queue_waiting.max < 50", "burst: server.queue_waiting.mean in 10..40",
             "gpu.utilization.mean in 70%..80%"]
    s = _summary(t, *lines)
    telemetry_slos(s, [parse_slo(x) for x in lines])
    r = {x.expr: x for x in s.slo}
    assert r[lines[0]].value == 140.0 and not r[lines[0]].passed
    assert r[lines[1]].value == 30.0 and r[lines[1]].passed and r[lines[1]].upper == 40.0
    assert r[lines[2]].value is None and not r[lines[2]].passed
    assert r[lines[2]].reason == "the target's telemetry gave no gpu.utilization"
    assert s.passed is False
    reasons = [x.text for x in target_reasons(TargetOutcome("t", s))]
    assert any("gpu.utilization.mean in 70%..80% (not measurable here; the target's telemetry gave no "
               "gpu.utilization)" in x for x in reasons)
    s = _summary(None, lines[0])  # a run without any telemetry: not measurable, never passed
    telemetry_slos(s, [parse_slo(lines[0])])
    assert s.slo[0].passed is False and s.slo[0].reason.startswith("no server telemetry")


def test_nvml_is_sampled_per_device_and_read_like_a_dcgm_exporter(tmp_path, monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    t0 = time.perf_counter()
    g = GpuSampler(interval=0.02).start()
    time.sleep(0.15)
    g.stop()
    assert g.note is None and g.devices == 2 and fake.shut
    g.write(tmp_path / "gpu_metrics.csv", t0)
    r = Reading(None, read_samples(tmp_path / "gpu_metrics.csv"))
    assert r.gpu == "nvml"
    st = {q: r.stat(q, 0.0, 1.0) for q in ("gpu.utilization", "gpu.memory_share", "gpu.power", "gpu.sm_clock")}
    assert st["gpu.utilization"].mean == pytest.approx(0.75) and st["gpu.utilization"].samples >= 5
    assert st["gpu.memory_share"].max == pytest.approx(100 / 160)
    assert st["gpu.power"].mean == pytest.approx(800.0) and st["gpu.sm_clock"].mean == pytest.approx(1600.0)
    assert st["gpu.power"].source == "nvml:power_watts"


def test_without_nvml_nothing_is_sampled_and_the_note_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    g = GpuSampler().start()
    g.stop()
    assert g.rows == [] and "latbench[gpu]" in g.note


@pytest.mark.gpu
def test_nvml_on_a_real_gpu(tmp_path):
    nvml = load_nvml()
    if nvml is None:
        pytest.skip("nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        nvml.nvmlShutdown()
    except Exception as exc:
        pytest.skip(f"no NVIDIA driver or device: {exc}")
    if not count:
        pytest.skip("NVML sees no device")
    t0 = time.perf_counter()
    g = GpuSampler(interval=0.1).start()
    time.sleep(0.5)
    g.stop()
    g.write(tmp_path / "gpu_metrics.csv", t0)
    r = Reading(None, read_samples(tmp_path / "gpu_metrics.csv"))
    util, share = r.stat("gpu.utilization", 0.0, 5.0), r.stat("gpu.memory_share", 0.0, 5.0)
    assert g.devices == count and 0.0 <= util.mean <= 1.0 and 0.0 < share.max <= 1.0
    assert r.stat("gpu.power", 0.0, 5.0).mean > 0 and r.stat("gpu.sm_clock", 0.0, 5.0).max > 0
