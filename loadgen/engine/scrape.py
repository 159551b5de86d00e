"""Scrape a target's Prometheus /metrics during a run into ``server_metrics.csv``.

Columns: ``time`` (seconds since the run's t0 on ``time.perf_counter``, the records' clock), ``metric``
(the sample name as exposed, e.g. ``refserver:batch_size_sum``), ``labels`` (canonical
``k="v",k2="v2"`` sorted by key) and ``value``. Samples are stored raw, counters and histogram
``_count`` / ``_sum`` / ``_bucket`` cumulative as the server reports them; the report turns them into
per-interval rates and means. ``_created`` timestamps are left out.

Every sample's name and labels go through the run's :class:`~loadgen.redact.Redactor` before they are
written (a label may echo a URL and its token, a header, a user), as every byte of a RunDir does.

A scraper whose ``t0`` is a moment before the run's (:mod:`loadgen.engine.telemetry` starts it before any engine,
whose t0 it learns only afterwards) has its times moved onto the run's clock by :func:`rebase`; ``max_scrapes``
bounds its file for a watch that runs for days (older scrapes are thinned, as host.csv's samples are).

The scraper must never disturb the run: every failure is caught. A target without /metrics (404,
refused connection, not Prometheus text) is noted once and no longer scraped; a target that served
metrics and then stops answering is retried, and given up after a few failures in a row.
"""

from __future__ import annotations

import asyncio
import csv
import logging
import math
import time
from pathlib import Path

from loadgen.fetch import FetchError, afetch
from loadgen.redact import Redactor

log = logging.getLogger("latbench.scrape")

INTERVAL = 1.0
MAX_BODY = 16 << 20  # bytes of one /metrics answer, at most (a server that never stops would grow memory)
FINAL_SCRAPE_S = 0.25  # the most the last scrape, at the end of the run, may add to it
FRESH_S = 0.02  # a scrape this recent already shows the end of the run
GIVE_UP_AFTER = 5  # consecutive failures, once the target has answered at least once
HEADER = ("time", "metric", "labels", "value")


def canonical_labels(labels: dict) -> str:
    """``k="v",...`` sorted by key, with Prometheus escaping of backslash, quote and newline."""
    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))


def parse_samples(text: str) -> list[tuple[str, str, float]]:
    """(sample name, canonical labels, value) of every sample in Prometheus text, ``_created`` excluded."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append((s.name, canonical_labels(s.labels), float(s.value)))
    return out


class MetricsScraper:
    """Polls a Prometheus endpoint every ``interval`` seconds and appends its samples to a CSV file.

    ``await start(url, csv_path, t0)`` returns at once; ``await stop()`` ends the polling, closes the
    file and is safe to call at any time (also when start never found metrics). ``note`` says why
    scraping stopped early, if it did.

    ``t0`` is the run's start on ``time.perf_counter``, or a callable returning it (``lambda: engine.t0``),
    read at every scrape, so the scraper may start before the engine fixes its t0: while the callable
    returns 0 or None, scrapes are not stored.
    """

    def __init__(self, interval: float = INTERVAL, timeout: float = 2.0, redactor: Redactor | None = None,
                 max_scrapes: int | None = None):
        self.redactor = redactor or Redactor()
        self.max_scrapes = max_scrapes
        self._kept: list[str] = []  # the time of each scrape in the file, oldest first
        self.interval = interval
        self.timeout = timeout
        self.note: str | None = None
        self._last_at = -math.inf  # perf_counter() of the last stored scrape
        self.scrapes = 0
        self._task: asyncio.Task | None = None
        self._file = None
        self._writer = None

    async def start(self, url: str, csv_path: Path, t0) -> None:
        self.url, self.csv_path, self.t0 = url, Path(csv_path), t0
        try:
            self._task = asyncio.get_running_loop().create_task(self._loop())
        except Exception as exc:  # the run goes on without server metrics
            self._give_up(f"server metrics not scraped: {type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        """Stop polling, after one last scrape: the state at the end of the run (a run shorter than the interval
        has a sample from its end, not only the one from its start), unless the target had stopped answering or
        was scraped in the last ``FRESH_S``."""
        task, self._task = self._task, None
        if task is not None:
            running = not task.done()
            task.cancel()
            try:
                await task
            except BaseException:  # cancelled, or a bug in the loop: never the run's problem
                pass
            stale = time.perf_counter() - self._last_at >= FRESH_S
            if running and stale and self.note is None:
                try:  # briefly: a slow endpoint must not hold up the end of the run
                    final = min(self.timeout, FINAL_SCRAPE_S)  # the fetch's own deadline: its thread ends too
                    await asyncio.wait_for(self._scrape_once(final), final + 0.05)
                except Exception:  # the target went away at the end, or is slow: what was scraped stands
                    pass
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def _give_up(self, why: str) -> None:
        if self.note is None:
            self.note = why
            log.info("%s", why)

    async def _loop(self) -> None:
        failures = 0
        next_at = time.perf_counter()
        while True:
            try:
                ok = await self._scrape_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                ok = f"{type(exc).__name__}: {exc}"
            if ok is True:
                failures = 0
            else:
                failures += 1
                if self.scrapes == 0 or failures >= GIVE_UP_AFTER:
                    self._give_up(f"server metrics not scraped from {self.url}: {ok}")
                    return
            next_at += self.interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    async def _scrape_once(self, deadline_s: float | None = None):
        """True when a scrape was stored, else the reason it was not."""
        try:  # latbench's one non-load client, in a worker thread: a deadline, a size cap, no redirect elsewhere
            resp = await afetch("GET", self.url, deadline_s=deadline_s or self.timeout, max_bytes=MAX_BODY)
        except FetchError as exc:
            return exc.detail
        if resp.status != 200:
            return f"HTTP {resp.status}"
        text = resp.body.decode("utf-8", "replace")  # the Prometheus text format is UTF-8
        t0 = self.t0() if callable(self.t0) else self.t0
        if not t0:
            return True  # the run has not started its clock yet
        t = time.perf_counter() - t0  # when the answer arrived, on the records' clock
        try:
            samples = parse_samples(text)
        except Exception as exc:
            return f"not Prometheus text ({type(exc).__name__})"
        if not samples:
            return "no samples"
        self._write(t, samples)
        self.scrapes += 1
        self._last_at = time.perf_counter()
        return True

    def _write(self, t: float, samples) -> None:
        if self._file is None:
            self.csv_path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.csv_path, "w", newline="", encoding="utf-8")
            self._writer = csv.writer(self._file)
            self._writer.writerow(HEADER)
        tt = f"{t:.4f}"
        text = self.redactor.text
        self._writer.writerows((tt, text(name), text(labels), repr(value)) for name, labels, value in samples)
        self._file.flush()
        self._kept.append(tt)
        if self.max_scrapes and len(self._kept) > self.max_scrapes:
            self._thin()

    def _thin(self) -> None:
        """Every other scrape dropped, the first (the counters' baseline) and the newest kept: counters and
        histograms are cumulative, so a rate over a longer interval loses resolution, never a total."""
        self._file.close()
        keep = set(self._kept[:-1:2] + self._kept[-1:])
        self._kept = [t for t in self._kept if t in keep]
        _rewrite(self.csv_path, lambda rows: (r for r in rows if r[0] in keep))
        self._file = open(self.csv_path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(self._file)


def _rewrite(path: Path, change) -> None:
    """``path``'s rows (header kept) replaced by ``change(rows)``, through a file beside it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(path, newline="", encoding="utf-8") as src, open(tmp, "w", newline="", encoding="utf-8") as dst:
        rows = csv.reader(src)
        w = csv.writer(dst)
        w.writerow(next(rows, HEADER))
        w.writerows(change(rows))
    tmp.replace(path)


def rebase(path: Path, shift: float) -> Path | None:
    """A scrape file's times moved by ``-shift`` seconds (from the scraper's origin onto the run's t0); of the
    scrapes before the new zero only the last is kept, the counters' value as the run began. None when there is
    no such file. Read twice, never whole: a watch's file may be large."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        next(rows, None)
        start = max((t for t in (float(r[0]) - shift for r in rows) if t < 0), default=0.0)
    _rewrite(path, lambda rows: ([f"{t:.4f}", *r[1:]] for r in rows if (t := float(r[0]) - shift) >= start))
    return path
