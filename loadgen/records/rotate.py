"""A record writer for runs without an end (``latbench watch``): a new file every so often, old ones deleted.

The segment being written is always ``<target>/requests.parquet`` (with its ``.partial`` stream), so every
reader of a RunDir finds the newest records where a run's are. Every ``every_s`` seconds (checked when a
batch arrives) it is closed, renamed ``requests-000001.parquet``, ``-000002``, ... (oldest lowest) and a new
``requests.parquet`` is started; past ``keep`` closed segments the oldest is deleted. So the disk a target
uses is bounded: at most ``keep`` closed segments plus the open one (parquet and its Arrow stream), each
holding ``every_s`` seconds of records; at a probe rate of ``q`` req/s that is about
``(keep + 2) * every_s * q * B`` bytes, B the bytes of one record (~100 in parquet, ~200 in the stream,
more with long token-time lists; ``benchmarks/watch_soak.py`` measures it).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pyarrow as pa

from loadgen.errors import RunDirWriteError
from loadgen.records.schema import SCHEMA, RecordWriter, partial_path, read_records

CURRENT = "requests.parquet"
_SEGMENT = re.compile(r"^requests-(\d{6})\.parquet$")


def segment_name(k: int) -> str:
    return f"requests-{k:06d}.parquet"


def segments(tdir: str | os.PathLike) -> list[Path]:
    """The closed segments of a target folder, oldest first (the open one, ``requests.parquet``, not included)."""
    tdir = Path(tdir)
    found = sorted((int(m.group(1)), p) for p in tdir.iterdir() if (m := _SEGMENT.match(p.name)))
    return [p for _, p in found]


def read_segments(tdir: str | os.PathLike) -> pa.Table:
    """Every record still on disk in a target folder: the closed segments, oldest first, then the open one."""
    tdir = Path(tdir)
    parts = [read_records(p) for p in segments(tdir)]
    current = tdir / CURRENT
    if current.exists() or os.path.exists(partial_path(current)):
        parts.append(read_records(current))
    return pa.concat_tables(parts) if parts else SCHEMA.empty_table()


def disk_bytes(tdir: str | os.PathLike) -> int:
    """Bytes of the record files in a target folder (segments, the open file and its partial stream)."""
    tdir = Path(tdir)
    return sum(p.stat().st_size for p in tdir.iterdir()
               if p.name.startswith("requests") and p.is_file())


class RotatingRecordWriter:
    """A :class:`~loadgen.records.schema.RecordSink` that starts a new segment every ``every_s`` seconds and
    keeps the newest ``keep`` closed ones (see the module's docstring). ``clock`` is monotonic seconds.

    ``rows`` counts every row written, ``deleted_rows`` those in segments deleted since (their records are gone
    from disk; the metrics a watch serves counted them before)."""

    def __init__(self, tdir: str | os.PathLike, every_s: float, keep: int, clock=time.monotonic):
        if every_s <= 0 or keep < 0:
            raise ValueError(f"rotation: expected every_s > 0 and keep >= 0, got {every_s}, {keep}")
        self.tdir = Path(tdir)
        self.every_s, self.keep, self._clock = every_s, keep, clock
        self.rows = 0
        self.deleted_rows = 0
        self.deleted_segments = 0
        self.rotations = 0
        self._seg_rows: dict[Path, int] = {}
        existing = segments(self.tdir) if self.tdir.exists() else []
        self._next = (int(_SEGMENT.match(existing[-1].name).group(1)) + 1) if existing else 1
        self._lock = threading.Lock()
        self._writer = RecordWriter(self.tdir / CURRENT)
        self._opened = clock()
        self.closed = False

    @property
    def path(self) -> str:
        return self._writer.path

    def write(self, batch: pa.RecordBatch | None) -> None:
        """Append a batch to the open segment, first rotating when it is ``every_s`` old."""
        if batch is None or batch.num_rows == 0:
            return
        with self._lock:
            if self._clock() - self._opened >= self.every_s:
                self._rotate()
            self._writer.write(batch)
            self.rows += batch.num_rows

    def _rotate(self) -> None:
        w = self._writer
        w.close()
        if w.error is not None:
            raise w.error
        seg = self.tdir / segment_name(self._next)
        try:
            os.replace(w.path, seg)
        except OSError as exc:
            raise RunDirWriteError(exc.errno, f"cannot rotate {w.path}: {exc.strerror or exc}") from exc
        self._seg_rows[seg] = w.rows
        self._next += 1
        self.rotations += 1
        closed = segments(self.tdir)
        for old in closed[: max(0, len(closed) - self.keep)]:
            self.deleted_rows += self._seg_rows.pop(old, 0)
            self.deleted_segments += 1
            old.unlink(missing_ok=True)
        self._writer = RecordWriter(self.tdir / CURRENT)
        self._opened = self._clock()

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self._writer.close()
