"""Reading the files a scenario names (the scenario itself, its dataset, its trace): regular files only, each up
to a size cap, so that ``/dev/zero``, a pipe or a runaway file is a clear error, not a read without end."""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["MAX_DATA_BYTES", "MAX_SCENARIO_BYTES", "UnreadableFile", "read_capped"]

MAX_SCENARIO_BYTES = 8 << 20  # a scenario file at most (8 MiB): written by hand, a few KiB
MAX_DATA_BYTES = 4 << 30  # a dataset or trace file at most (4 GiB; ShareGPT_V3's file is 0.6 GiB)


class UnreadableFile(ValueError):
    """A file that cannot be read as given; the message says why and never names the file (the caller does)."""


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


def read_capped(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them. Raises UnreadableFile when it cannot be
    opened, is not a regular file (a folder, a device such as /dev/zero, a pipe), or holds more than ``limit``
    bytes (also when it grows past them while read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO without a writer must not block
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnreadableFile(os.strerror(errno.EISDIR))
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile("not a regular file (a device, a pipe or a socket); give a file")
        if st.st_size > limit:
            raise UnreadableFile(f"{st.st_size:,} bytes, more than the {_size(limit)} a file may hold")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise UnreadableFile(f"more than the {_size(limit)} a file may hold")
        return b"".join(chunks)
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
