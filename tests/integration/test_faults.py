"""The fault matrix: one run against every misbehaviour of tests/bad_servers.py, one target per fault.

For each fault the run completes, every request has exactly one record with the right error class, the
counts add up (ok + every error class = requests sent = requests scheduled), the server saw what was
sent, and the report renders. One multi-target run serves every case (cheaper than a run per fault);
each fault still gets its own test id.
"""

from __future__ import annotations

import json
import resource
import socket
from html.parser import HTMLParser
from xml.etree import ElementTree

import pytest

import reports
from loadgen.records.schema import ERROR_CLASSES, read_records
from loadgen.run.runner import run_scenario
from loadgen.scenario.loader import load_scenario
from tests.bad_servers import BIG_BYTES, BadServer, self_signed_cert
from tests.helpers import write_scenario

N = 3  # requests per target: constant arrivals at 0, 0.1, 0.2 s

# name -> (url kind, mode, stream, timeout, verify, expected error class, expected status)
FAULTS = {
    "control": ("http", "ok", True, "5s", True, "", 200),
    "refused": ("refused", "", False, "5s", True, "connect", 0),
    "dns": ("dns", "", False, "5s", True, "dns", 0),
    "close_before_answer": ("http", "close", False, "5s", True, "reset", 0),
    "reset_mid_stream": ("http", "reset", True, "5s", True, "reset", 200),
    "stall_after_headers": ("http", "stall", True, "500ms", True, "timeout", 200),
    "s500_with_body": ("http", "s500body", False, "5s", True, "http_5xx", 500),
    "s500_without_body": ("http", "s500empty", False, "5s", True, "http_5xx", 500),
    "s503_body_until_close": ("http", "s503close", False, "5s", True, "http_5xx", 503),
    "s500_body_cut": ("http", "s500cut", False, "5s", True, "http_5xx", 500),
    "s429_with_body": ("http", "s429body", True, "5s", True, "http_429", 429),
    "s429_without_body": ("http", "s429empty", False, "5s", True, "http_429", 429),
    "invalid_json": ("http", "badjson", False, "5s", True, "bad_response", 200),
    "json_without_choices": ("http", "nochoices", False, "5s", True, "bad_response", 200),
    "sse_garbage": ("http", "sse_garbage", True, "5s", True, "bad_stream", 200),
    "sse_without_done": ("http", "sse_nodone", True, "5s", True, "bad_stream", 200),
    "sse_error_object": ("http", "sse_error", True, "5s", True, "bad_stream", 200),
    "sse_event_error": ("http", "sse_event_error", True, "5s", True, "bad_stream", 200),
    "sse_asked_json_came": ("http", "sse_json", True, "5s", True, "bad_stream", 200),
    "big_100mb": ("http", "big", False, "60s", True, "", 200),
    "slow_drip": ("http", "drip", True, "20s", True, "", 200),
    "slow_drip_past_timeout": ("http", "slowdrip", True, "500ms", True, "timeout", 200),
    "sse_unterminated_line": ("http", "sse_noline", True, "30s", True, "bad_stream", 200),
    "sse_endless_event": ("http", "sse_noevent", True, "30s", True, "bad_stream", 200),
    "headers_never_end": ("http", "headers_forever", False, "30s", True, "bad_response", 0),
    "redirect_same_origin": ("http", "redirect", False, "5s", True, "http_3xx", 301),
    "tls_self_signed": ("https", "ok", False, "5s", True, "tls", 0),
    "tls_verify_false": ("https", "ok", False, "5s", False, "", 200),
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: nothing listens there


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    cert = self_signed_cert(tmp)
    with BadServer() as plain, BadServer(cert=cert) as tls:
        urls = {"http": plain.url, "https": tls.url, "refused": lambda m: f"http://127.0.0.1:{_closed_port()}/v1",
                "dns": lambda m: "http://latbench-no-such-host.invalid/v1"}
        targets = []
        for name, (kind, mode, stream, timeout, verify, *_rest) in FAULTS.items():
            line = (f'  - {{name: {name}, url: "{urls[kind](mode)}", model: m, stream: {str(stream).lower()}, '
                    f"timeout: {timeout}" + ("" if verify else ", verify: false") + "}")
            targets.append(line)
        text = ("name: faults\ntargets:\n" + "\n".join(targets) + "\n"
                "workload: {prompts: {input_tokens: 8, output_tokens: 3, distinct: 2}}\n"
                "load:\n  arrival: constant\n  grace: 10s\n  phases:\n    - {name: main, duration: 300ms, qps: 10}\n")
        path = write_scenario(tmp, text, "faults.yaml")
        # a run of one plain request first: what any run loads once per process (pyarrow's pandas, the writer, the
        # engine) is in the baseline, so the growth measured is the fault run's bodies alone
        with BadServer() as other:  # not plain: its hits are the fault run's alone
            warm = write_scenario(tmp, f'name: warm\ntarget: {{url: "{other.url("ok")}", model: m, stream: false}}\n'
                                       "load: {phases: [{name: w, duration: 100ms, qps: 10}]}\n", "warm.yaml")
            run_scenario(load_scenario(warm), out=str(tmp / "warm"), preflight=False)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # the load path's own record of each fault: the pre-flight would stop most of these before any load
        result = run_scenario(load_scenario(path), out=str(tmp / "runs"), preflight=False)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        hits = {"http": dict(plain.hits), "https": dict(tls.hits)}
    written = reports.write_outputs(result.rundir.path)
    return {"result": result, "hits": hits, "rss_growth_kb": rss1 - rss0, "written": written}


def _target(fault_run, name):
    (tr,) = [t for t in fault_run["result"].targets if t.name == name]
    rd = fault_run["result"].rundir.path
    table = read_records(rd / tr.dir / "requests.parquet").to_pandas()
    summary = json.loads((rd / tr.dir / "summary.json").read_text())
    return tr, table, summary


@pytest.mark.parametrize("name", list(FAULTS))
def test_every_request_has_one_record_with_the_right_class(fault_run, name):
    kind, mode, stream, timeout, verify, error, status = FAULTS[name]
    tr, table, summary = _target(fault_run, name)
    assert sorted(table["seq"]) == list(range(N)), "exactly one record per scheduled request"
    assert list(table["error"]) == [error] * N, (name, table[["error", "status"]].to_dict("records"))
    assert list(table["status"]) == [status] * N
    assert (table["done"] >= table["sent"]).all() and table["done"].notna().all()
    ov = summary["overall"]
    assert set(ov["errors"]) <= set(ERROR_CLASSES)
    assert ov["ok"] + sum(ov["errors"].values()) == ov["count"] == len(table) == N
    assert ov["ok"] == (N if error == "" else 0)
    if kind in ("http", "https") and error != "tls":
        assert fault_run["hits"][kind].get(mode, 0) >= N  # the server read every request that was sent
    meta = json.loads((fault_run["result"].rundir.path / "meta.json").read_text())
    (entry,) = [t for t in meta["targets"] if t["name"] == name]
    assert entry["requests"] == N  # sent by the engine = recorded


def test_server_read_exactly_what_was_sent(fault_run):
    expected: dict = {}
    for kind, mode, *_ , error, _status in FAULTS.values():
        if kind in ("http", "https") and error != "tls":
            expected.setdefault(kind, {}).setdefault(mode, 0)
            expected[kind][mode] += N
    assert fault_run["hits"] == expected


def test_big_response_is_counted_not_buffered_and_drip_is_measured(fault_run):
    _, big, _ = _target(fault_run, "big_100mb")
    assert (big["bytes_in"] == BIG_BYTES).all() and (big["output_tokens"] == 7).all()
    assert (big["output_tokens_source"] == "usage").all()
    # three 100 MB bodies went through, and 64 MB floods of an unterminated SSE line, an endless event and an
    # endless header block, three each at once: none was kept whole (issue 13, item 3: +200 MB a stream)
    assert fault_run["rss_growth_kb"] < 80 * 1024
    _, drip, _ = _target(fault_run, "slow_drip")
    assert (drip["output_tokens"] == 3).all()
    assert drip["token_times"].map(len).tolist() == [3] * N
    # the drip takes ~0.3 s per request; its first token arrives well after the first byte
    assert ((drip["done"] - drip["sent"]) > 0.2).all() and (drip["first_token"] > drip["first_byte"]).all()


def test_run_completes_and_says_which_targets_were_unreachable(fault_run):
    result = fault_run["result"]
    meta = json.loads((result.rundir.path / "meta.json").read_text())
    assert meta["complete"] is True and len(meta["targets"]) == len(FAULTS)
    assert result.exit_code == 3  # some targets were unreachable on every request
    unreachable = {r.split(":")[0] for r in result.reasons if "unreachable" in r}
    assert unreachable == {"refused", "dns", "tls_self_signed"}


class _Html(HTMLParser):
    def __init__(self):
        super().__init__()
        self.text = []

    def handle_data(self, data):
        self.text.append(data)


def test_report_renders_every_fault(fault_run):
    paths = {p.name: p for p in fault_run["written"]}
    assert set(paths) == {"report.html", "summary.md", "junit.xml"}
    page = _Html()
    page.feed(paths["report.html"].read_text())
    text = " ".join(page.text)
    md = paths["summary.md"].read_text()
    for name in FAULTS:
        assert name in text and name in md
    for cls in ("connect", "dns", "reset", "timeout", "http_5xx", "http_429", "bad_stream", "bad_response", "tls"):
        assert cls in text
    ElementTree.parse(paths["junit.xml"])
