"""Sample the host during a run: the CPU latbench and each managed target had, and how long they waited for one.

A thread reads, every ``INTERVAL`` seconds, for each watched process tree (latbench and its workers; a managed
target and everything it forked, vLLM's engine process included):

- every thread's ``/proc/<pid>/task/<tid>/schedstat``: CPU time and **run-queue delay** (the time the thread was
  runnable, its work ready, but another task held the CPU; a throttled cgroup's time counts here too);
- the CPUs it may use: its affinity, capped by its cgroup's quota (``cpu.max`` or ``cpu.cfs_quota_us``), and that
  cgroup's throttled time (``cpu.stat``) when a quota limits it;

and for the host: CPU steal (``/proc/stat``: time a hypervisor gave this machine's CPUs to someone else), the
1-minute load average and the runnable tasks (``/proc/loadavg``).

It writes ``<target>/host.csv``, one row a value: ``time`` (seconds since the run's t0 on ``time.perf_counter``,
the records' clock, as in ``server_metrics.csv``), ``source`` (``host`` or a watched tree: ``latbench``,
``server``), ``metric`` and ``value``. ``slices`` counts the times a tree's threads were put on a CPU (each one
ended a wait). Time counters are cumulative seconds since sampling began (``cpu_s``,
``wait_s``, ``throttled_s``, ``steal_s``, ``host_cpu_s``): a thread that ends between two samples keeps what it
had been counted, and a thread born between two samples is counted from its birth, so each counter only grows.
:mod:`loadgen.analysis.host` turns them into each phase's share of time spent waiting for a CPU.

Sampling never disturbs the run: every read that fails (a thread that just ended, a platform without /proc) is
skipped; without /proc nothing is measured and :attr:`HostSampler.note` says so.

One idea at several stages, the host's share of a run, so one file name: :mod:`loadgen.analysis.host` (judging it),
:mod:`reports.host` (drawing it).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.records.series_file import write_series

INTERVAL = 0.5  # seconds between samples: a 4 s phase gets 8 of them
PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Watched:
    """A process tree to watch: ``root`` and its descendants, less the trees of ``exclude`` (latbench's tree holds
    the managed server it started, which is watched on its own)."""

    source: str  # its name in host.csv: latbench | server
    root: int
    exclude: tuple[int, ...] = ()


def watch_run(server_pid: int | None) -> list[Watched]:
    """What a run watches: latbench (this process and its workers) and, when latbench started it, the server."""
    me = Watched("latbench", os.getpid(), (server_pid,) if server_pid else ())
    return [me] + ([Watched("server", server_pid)] if server_pid else [])


class Periodic:
    """The thread of a sampler (the host's, the GPUs'): :meth:`sample` every ``interval`` seconds on a fixed grid (a
    slow sample does not shift the next) from :meth:`_start_thread` until :meth:`stop`, which ends the thread and
    takes a last sample. A sample that raises ends the thread, not the run: ``note`` says ``"<what> sampling
    stopped: ..."``."""

    what = "host"
    interval: float
    note: str | None = None
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        raise NotImplementedError

    def _start_thread(self, name: str) -> None:
        """The first sample (the baseline every later one counts from), here; the rest on a thread ``name``."""
        self.sample()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()

    def _loop(self) -> None:
        interval = self.interval
        next_at = time.perf_counter() + interval
        while not self._stop.wait(max(0.0, next_at - time.perf_counter())):
            try:
                self.sample()
            except Exception as exc:  # a bug here must not end the run: sampling stops, the run goes on
                self.note = f"{self.what} sampling stopped: {type(exc).__name__}: {exc}"
                return
            next_at += interval


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):  # gone, not allowed, not there on this platform
        return None


def _tids(pid: int) -> list[str]:
    """The thread ids of ``pid`` (none when it is gone)."""
    try:
        return os.listdir(PROC / str(pid) / "task")
    except OSError:
        return []


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` (``/proc/<pid>/task/*/children``; a scan of ``/proc/*/stat`` where the kernel
    lacks those files)."""
    out: list[int] = []
    tasks = PROC / str(pid) / "task"
    for tid in _tids(pid):
        text = _read(tasks / tid / "children")
        if text is None:
            return _children_by_scan(pid)
        out += [int(c) for c in text.split()]
    return out


def _children_by_scan(pid: int) -> list[int]:
    out = []
    for name in os.listdir(PROC):
        if name.isdigit():
            stat = _read(PROC / name / "stat")
            if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:  # the name may hold spaces and ')'
                out.append(int(name))
    return out


def tree(w: Watched) -> list[int]:
    """The pids of a watched tree now."""
    out, todo, skip = [], [w.root], set(w.exclude)
    while todo and len(out) < 10_000:
        pid = todo.pop()
        if pid in skip:
            continue
        out.append(pid)
        todo += children(pid)
    return out


def thread_times(pid: int) -> dict[int, tuple[int, int, int]]:
    """{tid: (CPU ns, run-queue delay ns, times it was put on a CPU)} of every thread of ``pid``."""
    out = {}
    tasks = PROC / str(pid) / "task"
    for tid in _tids(pid):
        text = _read(tasks / tid / "schedstat")
        if text:
            f = text.split()
            out[int(tid)] = (int(f[0]), int(f[1]), int(f[2]))
    return out


def _cgroup_dir(pid: int) -> tuple[Path | None, bool]:
    """The cgroup folder that holds ``pid``'s CPU controller, and whether it is cgroup v2."""
    text = _read(PROC / str(pid) / "cgroup") or ""
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (CGROUP / "cgroup.controllers").exists():
            return CGROUP / path.lstrip("/"), True
        if "cpu" in controllers.split(","):
            return CGROUP / "cpu" / path.lstrip("/"), False
    return None, False


def cgroup_cpu(pid: int) -> tuple[float | None, float | None]:
    """(CPUs the cgroup's quota allows, cumulative throttled seconds) for ``pid``'s cgroup; (None, None) when no
    quota limits it (throttling cannot happen) or it cannot be read."""
    d, v2 = _cgroup_dir(pid)
    if d is None:
        return None, None
    if v2:
        quota, _, period = (_read(d / "cpu.max") or "max").partition(" ")
        if quota.strip() == "max" or not period.strip():
            return None, None
        cpus = int(quota) / int(period)
    else:
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if not quota or not period or int(quota) <= 0:
            return None, None
        cpus = int(quota) / int(period)
    stat = dict(line.split() for line in (_read(d / "cpu.stat") or "").splitlines() if len(line.split()) == 2)
    throttled = (int(stat["throttled_usec"]) * 1e-6 if "throttled_usec" in stat
                 else int(stat["throttled_time"]) * 1e-9 if "throttled_time" in stat else None)
    return cpus, throttled


def cpus_available(pid: int) -> float | None:
    """CPUs ``pid`` may run on: its affinity, capped by its cgroup's quota."""
    try:
        cpus: float = len(os.sched_getaffinity(pid))
    except (OSError, AttributeError):  # gone, or not Linux
        return None
    quota, _ = cgroup_cpu(pid)
    return min(cpus, quota) if quota is not None else cpus


def host_times() -> tuple[float, float] | None:
    """(steal seconds, all CPU seconds), summed over the host's CPUs, since boot (``/proc/stat``)."""
    text = _read(PROC / "stat")
    if not text:
        return None
    f = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (f[7] / hz if len(f) > 7 else 0.0), sum(f[:8]) / hz  # user..steal (guest is inside user)


def loadavg() -> tuple[float, int] | None:
    """(1-minute load average, tasks runnable now)."""
    text = _read(PROC / "loadavg")
    if not text:
        return None
    f = text.split()
    return float(f[0]), int(f[3].split("/")[0])


@dataclass
class _Tree:
    """What one watched tree has been counted so far."""

    w: Watched
    last: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # tid -> its schedstat at the last sample
    cpu_ns: int = 0
    wait_ns: int = 0
    slices: int = 0
    throttled0: float | None = None
    sampled: bool = False  # the first sample is the baseline: what ran before it is not counted


class HostSampler(Periodic):
    """A thread sampling the watched trees and the host every ``interval`` seconds, into memory.

    ``start()`` takes the first sample (the baseline every counter starts from) and returns; ``stop()`` takes a
    last one and ends the thread; ``write(path, t0)`` writes host.csv with times since ``t0`` (perf_counter).
    """

    def __init__(self, watched: list[Watched], interval: float = INTERVAL, max_samples: int | None = None):
        self.interval = interval
        self.max_samples = max_samples
        self.trees = [_Tree(w) for w in watched]
        self.samples: list[list[tuple[float, str, str, float]]] = []  # each: (perf_counter, source, metric, value)
        self.note: str | None = None if (PROC / "self" / "task").is_dir() else "host not measured: no /proc here"
        self._host0: tuple[float, float] | None = None

    def start(self) -> "HostSampler":
        if self.note is None:
            self._start_thread("latbench-host")
        return self

    def sample(self) -> None:
        """One sample of every tree and of the host, appended to :attr:`rows`."""
        t = time.perf_counter()
        rows = []
        for tr in self.trees:
            pids = tree(tr.w)
            now: dict[int, tuple[int, int, int]] = {}
            for pid in pids:
                now.update(thread_times(pid))
            for tid, (cpu, wait, n) in now.items():
                c0, w0, n0 = tr.last.get(tid, (0, 0, 0)) if tr.sampled else (cpu, wait, n)
                tr.cpu_ns += max(0, cpu - c0)  # a thread new since the last sample: counted from its birth
                tr.wait_ns += max(0, wait - w0)
                tr.slices += max(0, n - n0)
            tr.last, tr.sampled = now, True
            src = tr.w.source
            rows += [(t, src, "cpu_s", tr.cpu_ns * 1e-9), (t, src, "wait_s", tr.wait_ns * 1e-9),
                     (t, src, "slices", tr.slices), (t, src, "processes", len(pids)), (t, src, "threads", len(now))]
            cpus = cpus_available(tr.w.root)
            if cpus is not None:
                rows.append((t, src, "cpus", cpus))
            _, throttled = cgroup_cpu(tr.w.root)
            if throttled is not None:
                tr.throttled0 = throttled if tr.throttled0 is None else tr.throttled0
                rows.append((t, src, "throttled_s", throttled - tr.throttled0))
        ht = host_times()
        if ht is not None:
            self._host0 = self._host0 or ht
            rows += [(t, "host", "steal_s", ht[0] - self._host0[0]), (t, "host", "host_cpu_s", ht[1] - self._host0[1])]
        la = loadavg()
        if la is not None:
            rows += [(t, "host", "load1", la[0]), (t, "host", "runnable", la[1]),
                     (t, "host", "cpus", os.cpu_count() or 0)]
        self.samples.append(rows)
        if self.max_samples and len(self.samples) > self.max_samples:
            # every counter is cumulative, so dropping every other sample loses resolution, never a total:
            # the first (the baseline) and the newest stay
            self.samples = self.samples[:-1:2] + self.samples[-1:]

    @property
    def rows(self) -> list[tuple[float, str, str, float]]:
        """Every sample's rows, oldest first."""
        return [r for sample in self.samples for r in sample]

    def write(self, path: Path, t0: float) -> Path | None:
        """host.csv, times since ``t0`` (perf_counter); None when nothing was sampled."""
        if not self.samples:
            return None
        return write_series(path, ((t - t0, src, metric, v) for t, src, metric, v in self.rows))
