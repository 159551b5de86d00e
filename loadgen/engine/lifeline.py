"""Every process latbench starts dies with it, even when latbench is killed with SIGKILL.

A *lifeline* is a pipe whose write end only latbench holds (``os.pipe`` fds are not inherited by other
children). The child side watches the read end: EOF means latbench is gone, however it ended, and the
watcher ends the child's whole process group. ``PR_SET_PDEATHSIG`` would fire when the creating *thread*
exits, and ``preexec_fn`` is unsafe in a threaded parent: a watchdog in the child is what works.

- A program we do not control (a ``command:`` target such as vLLM, which forks an engine process; the Locust
  master and its workers) runs under ``python -m loadgen.engine.lifeline FD -- ARGV...``: this module's
  :func:`main` starts ARGV in its own process group, forwards SIGTERM/SIGINT to it, exits with its status, and
  SIGKILLs the group when the lifeline breaks.
- The reference server watches its lifeline itself (``--parent-fd``; ``reference_server`` imports nothing of
  ours, so its watchdog is its own, :mod:`reference_server.serving.lifeline`).
- The multi-process engine's children see their control pipe close and stop (:mod:`loadgen.engine.multiproc`).

Cutting the lifeline (:meth:`Lifeline.cut`) is also how latbench ends a group at the end of a run: whatever
is left of it is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

__all__ = ["Lifeline", "kill_group", "main"]


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to every process of group ``pgid``; nothing when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Lifeline:
    """The parent's side: a pipe; the child gets :attr:`child_fd` (``pass_fds``), the parent keeps the write end.

    Start the child with ``pass_fds=lifeline.pass_fds`` and ``start_new_session=True``, then call
    :meth:`started` (the parent's copy of the read end is closed). :meth:`cut` closes the write end: the child's
    watcher kills its group. An unused Lifeline is cut when garbage-collected, or when the parent dies.
    """

    def __init__(self) -> None:
        self.child_fd, self._write = os.pipe()  # neither is inherited by anything but what pass_fds names

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.child_fd,) if self.child_fd >= 0 else ()

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run under this module's watchdog (for a program that does not watch a lifeline itself)."""
        return [sys.executable, "-m", "loadgen.engine.lifeline", str(self.child_fd), "--", *argv]

    def started(self) -> None:
        """The child holds its end now: the parent's copy of it is closed."""
        if self.child_fd >= 0:
            os.close(self.child_fd)
            self.child_fd = -1

    def cut(self) -> None:
        """Break the lifeline: the child's watcher kills what is left of its process group."""
        self.started()
        if self._write >= 0:
            os.close(self._write)
            self._write = -1

    def __del__(self) -> None:
        try:
            self.cut()
        except OSError:
            pass


def _watch(fd: int) -> None:
    """Read ``fd`` until EOF (the parent is gone, or cut the lifeline), then SIGKILL this process group."""
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    kill_group(os.getpgrp())
    os._exit(137)


def main(argv: list[str] | None = None) -> int:
    """``FD -- ARGV...``: run ARGV in this process group until it exits (its status is ours; 127 when it cannot be
    started), forwarding SIGTERM/SIGINT/SIGHUP to it; SIGKILL the group when FD reaches EOF."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        print("usage: python -m loadgen.engine.lifeline FD -- ARGV...", file=sys.stderr)
        return 2
    fd, cmd = int(args[0]), args[2:]
    if os.getpgrp() != os.getpid():
        os.setsid()  # the group we end is ours alone, never the parent's
    threading.Thread(target=_watch, args=(fd,), name="latbench-lifeline", daemon=True).start()
    try:
        child = subprocess.Popen(cmd)  # same group; stdio inherited (the parent's pipes)
    except OSError as exc:
        print(f"cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    rc = child.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
