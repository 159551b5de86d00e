"""The live line of a real closed-loop run shows its achieved rate and its workers (issue 13, item 14)."""

from __future__ import annotations

import re
import threading

import pytest

from loadgen.cli.display import status_line
from tests.helpers import run
from tests.servers import KnownServer

pytestmark = pytest.mark.alone  # timing-sensitive: no other test runs beside it (conftest.py)


def test_a_closed_loop_live_line_shows_achieved_rate_and_concurrency(tmp_path):
    srv = KnownServer(delay=0.002).start()
    lines, engines, stop = [], [], threading.Event()

    def sample():
        while not stop.wait(0.25):
            if engines and engines[0].t0 and engines[0].now() > 1.5:
                lines.append(status_line(engines[0]))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        res, summary, frame = run(tmp_path, f"""
        name: closed
        target: {{url: "{srv.url}", stream: false}}
        load:
          phases: [{{name: closed, duration: 3s, concurrency: 8}}]
        """, on_engine=engines.append)
    finally:
        stop.set()
        t.join()
        srv.stop()
    during = [ln for ln in lines if "draining" not in ln]  # after the last phase the line says draining instead
    assert during, "no live line was sampled during the phase"
    line = during[-1]
    assert "(concurrency 8)" in line and "target" not in line, line
    live_qps = float(re.search(r"qps\s+([0-9.]+)", line).group(1))
    achieved = summary["overall"]["achieved_qps"]
    assert 0.5 * achieved < live_qps < 1.5 * achieved, (line, achieved)
