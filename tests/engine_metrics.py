"""A real aiohttp server on 127.0.0.1 that answers like an engine (tests/servers.py's KnownServer) and serves an
engine's own /metrics text (``tests/data/<engine>_metrics.txt``) whose values change with every scrape:

- counters and histograms (by the text's ``# TYPE`` lines) are the text's values times ``k + 1`` at the ``k``-th
  scrape (from 0), so every scrape interval adds the text's totals once: a histogram's mean over any interval is
  the text's ``_sum / _count``, its buckets keep their shape;
- the gauges named in ``ramp`` are ``k * step``: a queue that grows scrape after scrape; other gauges as written.

Bad behaviour on purpose: ``garbage`` (HTML instead of Prometheus text), ``die_after`` (HTTP 500 from that scrape
on: a /metrics that stops answering mid-run), ``reset_at`` (the counters start again from the text's values at
that scrape: an engine restart).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from aiohttp import web

from tests.servers import KnownServer

DATA = Path(__file__).resolve().parent / "data"
_SAMPLE = re.compile(r"^(?P<name>[^\s{#]+)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)$")
_SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def scaled_text(text: str, k: int, ramp: dict[str, float] | None = None) -> str:
    """``text`` at the ``k``-th scrape (see the module docstring)."""
    types, out = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(maxsplit=3)
            types[name] = typ
        m = _SAMPLE.match(line)
        if line.startswith("#") or not m:
            out.append(line)
            continue
        name, value = m.group("name"), float(m.group("value"))
        family = next((name[:-len(s)] for s in _SUFFIXES if name.endswith(s) and name[:-len(s)] in types), name)
        if types.get(family) in ("counter", "histogram"):
            value *= k + 1
        elif name in (ramp or {}):
            value = k * ramp[name]
        out.append(f"{name}{m.group('labels') or ''} {value!r}")
    return "\n".join(out) + "\n"


class EngineMetricsServer(KnownServer):
    """KnownServer with /metrics serving ``tests/data/<engine>_metrics.txt``, changing with each scrape."""

    def __init__(self, engine: str, ramp: dict[str, float] | None = None, garbage: bool = False,
                 die_after: int | None = None, reset_at: int | None = None, **kw):
        super().__init__(**kw)
        self.text = (DATA / f"{engine}_metrics.txt").read_text()
        self.ramp, self.garbage, self.die_after, self.reset_at = ramp or {}, garbage, die_after, reset_at
        self.scrapes = 0

    def get_routes(self) -> list:
        return [("/metrics", self.metrics)]

    async def metrics(self, request):
        k = self.scrapes
        self.scrapes += 1
        if self.garbage:
            return web.Response(text="<html><body>metrics are elsewhere</body></html>", content_type="text/html")
        if self.die_after is not None and k >= self.die_after:
            return web.Response(status=500, text="engine gone")
        if self.reset_at is not None and k >= self.reset_at:
            k -= self.reset_at
        return web.Response(text=scaled_text(self.text, k, self.ramp), content_type="text/plain")

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


class FakeNvml:
    """A stand-in for nvidia-ml-py's pynvml: two devices, fixed readings (NVML's units: percent, bytes, mW, MHz)."""

    NVML_CLOCK_SM = 1

    def __init__(self):
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=[60, 90][h], memory=10)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=[40, 60][h] * 2 ** 30, total=80 * 2 ** 30, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        return [300_000, 500_000][h]

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_SM
        return [1500, 1700][h]
