"""The OS page cache of a file: how much of it is cached, and dropping it, so a start reads from the disk.

A cold start is a start whose model weights come from the disk, not from memory. A file that was just
written or read is in the page cache, and the next process to read it gets it at memory speed: five
"fresh starts" of one server would then all but the first be warm. :func:`evict` asks the kernel to drop
the file's cached pages (``posix_fadvise(POSIX_FADV_DONTNEED)``, after ``fsync`` so no dirty page is
kept back); :func:`resident_fraction` checks what is left (``mincore`` over a read-only mapping, which
reports residency without reading a byte). Both are Linux/POSIX facilities; where the platform lacks
them the answer is ``None``: unknown, never a guess.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

_PROT_READ, _MAP_SHARED = 0x1, 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Eviction:
    """What :func:`evict` did to one file. ``resident_after`` is the share (0..1) of its pages still in
    the page cache right after, ``None`` when the platform cannot tell."""

    path: str
    bytes: int
    evicted: bool  # posix_fadvise(DONTNEED) was called and returned without error
    resident_before: float | None
    resident_after: float | None
    method: str  # what was used, for the report: "posix_fadvise(POSIX_FADV_DONTNEED) + mincore"
    error: str | None = None


def _libc():
    name = ctypes.util.find_library("c")
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    if not hasattr(lib, "mincore"):
        return None
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    lib.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    return lib


def resident_fraction(path: str | os.PathLike) -> float | None:
    """Share (0..1) of the file's pages now in the page cache; ``None`` when the platform cannot tell.

    Maps the file read-only and asks ``mincore``: nothing is read, so asking does not warm the file.
    """
    lib = _libc()
    if lib is None:
        return None
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            return None
        try:
            vec = (ctypes.c_ubyte * pages)()
            if lib.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            return sum(b & 1 for b in bytes(vec)) / pages
        finally:
            lib.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def evict(path: str | os.PathLike) -> Eviction:
    """Drop ``path`` from the page cache (fsync first: dirty pages are not dropped) and report the result."""
    p = Path(path)
    size = p.stat().st_size
    before = resident_fraction(p)
    method = "posix_fadvise(POSIX_FADV_DONTNEED)" + (" + mincore" if before is not None else "")
    if not hasattr(os, "posix_fadvise"):
        return Eviction(str(p), size, False, before, before, method, "this platform has no posix_fadvise")
    try:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError as exc:
        return Eviction(str(p), size, False, before, resident_fraction(p), method, f"{type(exc).__name__}: {exc}")
    return Eviction(str(p), size, True, before, resident_fraction(p), method)
