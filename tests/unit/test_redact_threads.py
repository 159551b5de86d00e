"""A secret registered on one thread while another redacts (the Locust master's secret is registered while the
/metrics scraper writes): no redaction fails, and from the moment ``add`` returns, text shows the secret hidden."""

from __future__ import annotations

import sys
import threading

from loadgen.redact import Redactor


def test_secrets_added_while_another_thread_redacts():
    r = Redactor()
    for i in range(2000):  # a long dictionary to iterate while it grows (short values: cheap to rebuild)
        r.add(f"sv{i:07d}x")
    errors: list[BaseException] = []
    stop = threading.Event()

    def redact_forever():
        while not stop.is_set():
            try:
                r.text("a message quoting sv0000001x and the cut-off sv00")
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        readers = [threading.Thread(target=redact_forever) for _ in range(2)]
        for t in readers:
            t.start()
        for i in range(40):
            late = f"lt{i:07d}y"
            r.add(late)
            assert r.text(f"a log line with {late} in it") == "a log line with *** in it"
        stop.set()
        for t in readers:
            t.join(30)
    finally:
        sys.setswitchinterval(old)
        stop.set()
    assert errors == []
