"""The server dies with the program that started it (``--parent-fd FD``), even when that one is SIGKILLed.

latbench starts the server with the read end of a pipe whose write end only latbench holds. A daemon thread
reads it; EOF means latbench is gone (or stopped the server and cut the pipe): the server's process group,
which latbench made for it, is killed at once. Nobody is left to wait for a clean stop, and a server left
running would hold its port and its memory. (latbench's own copy of this idea, for programs that do not
watch a pipe themselves, is ``loadgen.engine.lifeline``; this package imports nothing of loadgen.)
"""

from __future__ import annotations

import os
import signal
import threading


def _watch(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    if os.getpgrp() == os.getpid():  # our own group (latbench starts us in a new session): take it all
        try:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(fd: int) -> None:
    """Watch the lifeline ``fd`` in a daemon thread; end this process (and its group, when it leads one) at EOF."""
    threading.Thread(target=_watch, args=(fd,), name="parent-lifeline", daemon=True).start()
