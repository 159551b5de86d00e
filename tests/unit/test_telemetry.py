"""Server-side telemetry read through each engine's adapter, against a real /metrics text of that engine:
tests/data/vllm_metrics.txt (captured from vLLM 0.32), and the rebuilt texts of SGLang, TGI, Triton and a DCGM
exporter (each labelled at its top with its version and source). Two scrapes 10 s apart: the first with every
counter and histogram at the text's values, the second at twice them (tests/engine_metrics.py's scaling), so the
phase between them saw the text's totals once."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from loadgen.analysis.telemetry import Reading, energy, telemetry_summary
from loadgen.engine.scrape import parse_samples
from loadgen.records.results import Scope, Summary
from loadgen.schedule.arrivals import PhasePlan
from loadgen.telemetry.promseries import bucket_quantile
from tests.engine_metrics import DATA, scaled_text


def frame(text: str, times=(0.0, 10.0), ramp=None) -> pd.DataFrame:
    rows = [(t, n, lab, v) for k, t in enumerate(times) for n, lab, v in parse_samples(scaled_text(text, k, ramp))]
    return pd.DataFrame(rows, columns=["time", "metric", "labels", "value"])


def text_value(text: str, name: str) -> float:
    """A sample's value in the text (summed over label sets)."""
    return sum(v for n, _, v in parse_samples(text) if n == name)


def hist_mean(text: str, base: str) -> float:
    return text_value(text, base + "_sum") / text_value(text, base + "_count")


#: engine -> quantity -> (source named, figure, expected from the text; a callable of the text)
CASES = {
    "vllm": {"server.queue_waiting": ("vllm:num_requests_waiting", "max",
                                      lambda t: text_value(t, "vllm:num_requests_waiting")),
             "server.ttft": ("vllm:time_to_first_token_seconds", "mean",
                             lambda t: hist_mean(t, "vllm:time_to_first_token_seconds")),
             "server.prefix_cache_hit_rate": ("vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total", "mean",
                                              lambda t: text_value(t, "vllm:prefix_cache_hits_total")
                                              / text_value(t, "vllm:prefix_cache_queries_total")),
             "server.kv_cache_usage": ("vllm:kv_cache_usage_perc", "max", lambda t: 0.0)},
    "sglang": {"server.queue_waiting": ("sglang:num_queue_reqs", "max", lambda t: 7.0),
               "server.requests_running": ("sglang:num_running_reqs", "max", lambda t: 12.0),
               "server.kv_cache_usage": ("sglang:token_usage", "max", lambda t: 0.42),
               "server.prefix_cache_hit_rate": ("sglang:cache_hit_rate", "mean", lambda t: 0.38),
               "server.spec_acceptance_length": ("sglang:spec_accept_length", "mean", lambda t: 2.6),
               "server.spec_acceptance_rate": ("sglang:spec_accept_rate", "mean", lambda t: 0.53),
               "server.preemptions": ("sglang:num_retracted_requests_total", "mean", lambda t: 3 / 10),
               "server.itl": ("sglang:inter_token_latency_seconds", "mean",
                              lambda t: hist_mean(t, "sglang:inter_token_latency_seconds")),
               "server.ttft": ("sglang:time_to_first_token_seconds", "mean",
                               lambda t: hist_mean(t, "sglang:time_to_first_token_seconds"))},
    "tgi": {"server.queue_waiting": ("tgi_queue_size", "max", lambda t: 9.0),
            "server.requests_running": ("tgi_batch_current_size", "max", lambda t: 16.0),
            "server.batch_size": ("tgi_batch_next_size", "mean", lambda t: hist_mean(t, "tgi_batch_next_size")),
            "server.e2e": ("tgi_request_duration", "mean", lambda t: hist_mean(t, "tgi_request_duration")),
            "server.queue_time": ("tgi_request_queue_duration", "mean",
                                  lambda t: hist_mean(t, "tgi_request_queue_duration"))},
    "triton": {"server.queue_waiting": ("nv_inference_pending_request_count", "max", lambda t: 4.0),
               "server.batch_size": ("nv_inference_count_total / nv_inference_exec_count_total", "mean",
                                     lambda t: 100 / 40),
               "server.e2e": ("nv_inference_request_duration_us_total / nv_inference_request_success_total", "mean",
                              lambda t: 1.0e6 / 100 * 1e-6),
               "server.queue_time": ("nv_inference_queue_duration_us_total / nv_inference_request_success_total",
                                     "mean", lambda t: 2.0e5 / 100 * 1e-6),
               "server.result_cache_hit_rate": ("nv_cache_num_hits_per_model_total / (nv_cache_num_hits_per_model_total"
                                                " + nv_cache_num_misses_per_model_total)", "mean", lambda t: 0.3),
               "server.ttft": ("nv_inference_first_response_histogram_ms", "mean",
                               lambda t: hist_mean(t, "nv_inference_first_response_histogram_ms") / 1e3),
               "gpu.utilization": ("nv_gpu_utilization", "max", lambda t: 0.74),
               "gpu.memory_share": ("nv_gpu_memory_used_bytes / (nv_gpu_memory_total_bytes)", "max",
                                    lambda t: 64424509440 / 85899345920)},
}


@pytest.mark.parametrize("engine", sorted(CASES))
def test_each_engine_is_recognised_and_read_by_its_own_names(engine):
    text = (DATA / f"{engine}_metrics.txt").read_text()
    if engine != "vllm":
        assert text.startswith("# Rebuilt, not captured:")  # says what it is, its version and source
    reading = Reading(frame(text), None)
    assert reading.engine.engine == engine
    for quantity, (source, stat, want) in CASES[engine].items():
        st = reading.stat(quantity, 0.0, 10.5)
        assert st is not None, quantity
        assert st.source == source
        assert getattr(st, stat) == pytest.approx(want(text), rel=1e-9, abs=1e-12), quantity


def test_a_histogram_gives_mean_and_bucket_interpolated_quantiles():
    text = (DATA / "sglang_metrics.txt").read_text()
    st = Reading(frame(text), None).stat("server.ttft", 0.0, 10.5)
    les = [float(le) if le != "+Inf" else math.inf for le in
           re.findall(r'sglang:time_to_first_token_seconds_bucket\{[^}]*le="([^"]+)"', text)]
    cum = [v for n, _, v in parse_samples(text) if n == "sglang:time_to_first_token_seconds_bucket"]
    assert st.count == 200 and st.p50 == pytest.approx(bucket_quantile(0.5, np.array(les), np.array(cum)))
    assert 0.1 < st.p50 < 0.25 and 0.25 < st.p99 <= 0.5  # the made-up TTFTs are uniform in 20-400 ms


@pytest.mark.parametrize("q, want", [(0.5, 2.25), (0.25, 1.625), (0.75, 2.875), (0.8, 3.0), (0.9, 3.0), (1.0, 3.0)])
def test_bucket_quantile_is_promql_histogram_quantile(q, want):
    # 4 observations in (1, 2], 4 in (2, 3], 2 above 3: the rank q * 10 falls in a bucket, linear within it (rank 5
    # is a quarter into (2, 3]); a rank in the +Inf bucket answers with the highest finite bound
    les, cum = np.array([1.0, 2.0, 3.0, math.inf]), np.array([0.0, 4.0, 8.0, 10.0])
    assert bucket_quantile(q, les, cum) == pytest.approx(want)


def test_no_observations_no_quantile():
    assert bucket_quantile(0.5, np.array([1.0, math.inf]), np.array([0.0, 0.0])) is None


def test_dcgm_exporter_gives_gpu_utilization_memory_power_and_energy_per_token():
    text = (DATA / "dcgm_metrics.txt").read_text()
    gpu = frame(text, times=np.arange(0.0, 11.0))  # 11 samples, a second apart
    summary = Summary(phases={"main": Scope(output_tokens_per_s=50.0, duration_s=10.0)},
                      overall=Scope(output_tokens_per_s=50.0, duration_s=10.0))
    t, rows = telemetry_summary(None, gpu, [PhasePlan(0, "main", 0.0, 10.0, 1.0, 1.0)], 10.0, summary)
    ph = t.phases["main"]
    assert t.gpu == "dcgm" and t.engine is None
    q = ph.quantities
    assert q["gpu.utilization"].mean == pytest.approx(0.80) and q["gpu.utilization"].source == "DCGM_FI_DEV_GPU_UTIL"
    assert q["gpu.memory_share"].max == pytest.approx((65536 + 73728) / (65536 + 73728 + 16384 + 8192))
    assert q["gpu.memory_used"].max == (65536 + 73728) * 2 ** 20
    assert q["gpu.power"].mean == pytest.approx(412.5 + 587.5) and q["gpu.sm_clock"].mean == pytest.approx(1867.5)
    assert ph.energy_j == pytest.approx(1000.0 * 10) and ph.energy_per_token_j == pytest.approx(10000 / 500)
    by = {c.name: c for c in t.checklist}
    assert by["gpu_utilization"].status == "met" and by["gpu_utilization"].figure == pytest.approx(0.80)
    assert by["gpu_memory"].status == "not_met" and by["gpu_memory"].figure == pytest.approx(0.85)
    assert by["result_cache_hit_rate"].status == by["batch_timeout"].status == "not_measurable"
    assert {(r[1], r[2]) for r in rows} >= {("DCGM_FI_DEV_GPU_UTIL", "gpu.utilization"),
                                            ("DCGM_FI_DEV_POWER_USAGE", "gpu.power")}


def test_energy_needs_two_power_samples_in_the_phase():
    power = pd.Series([100.0, 100.0], index=[0.0, 20.0])
    assert energy(power, 5.0, 6.0) is None
    assert energy(pd.Series([100.0, 300.0, 100.0], index=[0.0, 1.0, 2.0]), 0.0, 2.0) == pytest.approx(400.0)


def test_a_counter_that_resets_is_counted_from_zero_and_noted():
    text = (DATA / "sglang_metrics.txt").read_text()
    scrapes = [scaled_text(text, k) for k in (0, 1, 2)] + [scaled_text(text, 0)]  # the engine restarted before 30 s
    rows = [(10.0 * i, n, lab, v) for i, s in enumerate(scrapes) for n, lab, v in parse_samples(s)]
    df = pd.DataFrame(rows, columns=["time", "metric", "labels", "value"])
    plans = [PhasePlan(0, "main", 0.0, 30.0, 1.0, 1.0)]
    t, _ = telemetry_summary(df, None, plans, 30.0, Summary(), interval=10.0)
    retracted = t.phases["main"].quantities["server.preemptions"]
    assert retracted.mean == pytest.approx((3 + 3 + 3) / 30)  # after the reset, its 3 count from zero
    assert t.phases["main"].quantities["server.ttft"].mean == pytest.approx(
        hist_mean(text, "sglang:time_to_first_token_seconds"))  # never a negative interval
    assert any("sglang:num_retracted_requests_total went down at 30.0 s" in n for n in t.notes)


def test_a_metrics_endpoint_that_stopped_answering_is_noted():
    text = (DATA / "tgi_metrics.txt").read_text()
    t, _ = telemetry_summary(frame(text, times=(0.0, 1.0)), None, [PhasePlan(0, "main", 0.0, 20.0, 1.0, 1.0)],
                             20.0, Summary())
    assert any("stopped answering: its last scrape was 1.0 s into the 20.0 s run" in n for n in t.notes)


def test_names_no_engine_knows_are_said_and_nothing_is_made_up():
    df = pd.DataFrame([(0.0, "my_queue", "", 3.0), (1.0, "my_queue", "", 5.0)],
                      columns=["time", "metric", "labels", "value"])
    t, rows = telemetry_summary(df, None, [PhasePlan(0, "main", 0.0, 2.0, 1.0, 1.0)], 2.0, Summary())
    assert t.measured is False and rows == [] and "names no engine latbench knows" in t.notes[0]
    assert {c.status for c in t.checklist} == {"not_measurable"}
    t, _ = telemetry_summary(df, None, [PhasePlan(0, "main", 0.0, 2.0, 1.0, 1.0)], 2.0, Summary(),
                             names={"server.queue_waiting": "my_queue"})  # target.telemetry.names
    assert t.phases["main"].quantities["server.queue_waiting"].max == 5.0
    assert t.phases["main"].quantities["server.queue_waiting"].source == "my_queue"
