"""GPU utilization in reports: beside client latency with the article's 70-80% band, from the scraped samples of
the server's /metrics (server_metrics.csv as the scraper writes it); a server without a GPU gets no GPU panel."""

import csv

import numpy as np

from benchmarks.report_speed import synthetic_rundir
from reports import load_rundir, write_outputs
from reports.server import gpu_utilization
from tests.helpers import parse

GPU = [55.0, 72.0, 75.0, 78.0, 79.0, 80.0, 85.0, 90.0, 74.0, 71.0]  # 7 of 10 in 70-80, 1 below, 2 above; median 76.5


def write_server_metrics(tdir, gpu: bool) -> None:
    with open(tdir / "server_metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("time", "metric", "labels", "value"))
        for i, g in enumerate(GPU):
            t = f"{i + 0.5:.4f}"
            w.writerow((t, "refserver:num_requests_running", 'backend="torch-cuda"', repr(float(i % 4))))
            if gpu:
                w.writerow((t, "refserver:gpu_utilization_percent", 'backend="torch-cuda"', repr(g)))


def server_caption(path) -> str:
    page = parse(path / "report.html")
    text = " ".join(page.text)
    start = text.find("Scraped from the target's Prometheus /metrics")
    assert start >= 0, "no server figure"
    return text[start:start + 600]


def test_gpu_utilization_is_shown_against_the_band(tmp_path):
    path = synthetic_rundir(tmp_path / "gpu", 2000)
    write_server_metrics(path / "target", gpu=True)
    stats = gpu_utilization(load_rundir(path).targets[0].server_metrics())
    assert stats == {"median": float(np.median(GPU)), "below": 0.1, "within": 0.7, "above": 0.2, "scrapes": 10}
    write_outputs(path)
    cap = server_caption(path)
    assert "GPU utilization" in cap and "median 76%" in cap and "70% of scrapes within the article's 70-80% band" in cap


def test_a_cpu_server_gets_no_gpu_panel(tmp_path):
    path = synthetic_rundir(tmp_path / "cpu", 2000)
    write_server_metrics(path / "target", gpu=False)
    assert gpu_utilization(load_rundir(path).targets[0].server_metrics()) is None
    write_outputs(path)
    cap = server_caption(path)
    assert "GPU" not in cap and "requests running" in cap
