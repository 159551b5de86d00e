"""Cold starts, the parts that need no server: dropping a file from the page cache, one start's numbers."""

from __future__ import annotations

import os

import pytest

from loadgen.analysis.coldstart import start_stats
from loadgen.run.pagecache import evict, resident_fraction

LINUX = resident_fraction(__file__) is not None  # mincore available


@pytest.mark.skipif(not LINUX, reason="needs mincore (Linux)")
def test_evict_drops_a_cached_file_from_the_page_cache(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(os.urandom(4 << 20))
    f.read_bytes()
    assert resident_fraction(f) > 0.9  # just written and read: cached
    ev = evict(f)
    assert ev.evicted and ev.resident_before > 0.9 and ev.resident_after <= 0.01 and ev.bytes == 4 << 20
    assert resident_fraction(f) <= 0.01  # asking does not read it back in


def test_start_stats_first_request_steady_and_warm_index():
    s = start_stats([1.0, 0.5, 0.12, 0.1, 0.1, 0.11], 0.9)
    assert s["steady_latency_s"] == pytest.approx(0.1)  # median of the second half
    assert s["penalty_s"] == pytest.approx(0.9) and s["first_steady_request"] == 4  # 0.12 > 10% over 0.1
    assert start_stats([], None)["first_latency_s"] is None
    one = start_stats([2.0], 1.5)  # one request: no steady state to measure a penalty against
    assert one["first_latency_s"] == 2.0 and one["steady_latency_s"] is None and one["penalty_s"] is None
    assert start_stats([2.0, 0.1], None)["steady_latency_s"] == pytest.approx(0.1)  # never the first request
