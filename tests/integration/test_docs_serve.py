"""``latbench docs --serve`` serves the documentation site on the address given, built from this checkout."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_docs_serve_serves_the_site():
    port = _free_port()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.cli", "docs", "--serve", "--addr", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline, page = time.monotonic() + 60, None
        while page is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/reference/metrics/", timeout=5) as r:
                    page = r.read().decode()
            except OSError:
                time.sleep(0.3)
        assert page is not None, proc.stdout.read1().decode() if proc.poll() is not None else "no answer in 60 s"
        assert "latbench_ttft_seconds" in page and 'id="ttft"' in page
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
