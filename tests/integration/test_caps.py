"""Hard caps on what a hostile server can make latbench hold (issue 13, item 3).

A server that sends ``data: `` and then megabytes without a line end, an event whose data lines never end,
or a header block that never ends: each transport records the request as broken (``bad_stream`` /
``bad_response``), closes the connection at the cap, and holds no more than the cap meanwhile. The memory
bound is measured with tracemalloc (Python allocations: where the unbounded growth was), while a
64 MB flood goes through.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from loadgen.protocols.registry import make_protocol
from loadgen.records.schema import Outcome
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt
from loadgen.transports.factory import make_transport
from loadgen.transports.inflate import MAX_INFLATED_BYTES
from tests.bad_servers import FLOOD_MB, LONG_BYTES, BadServer, gzip_bomb
from tests.helpers import run

CAP = 256 * 1024


@pytest.fixture(scope="module")
def server():
    with BadServer() as srv:
        yield srv


async def _one(target: Target) -> tuple[Outcome, float, int]:
    protocol = make_protocol(target, Workload(), "m")
    transport = make_transport(target)
    await transport.start()
    try:
        out = Outcome()
        req = protocol.build(0, Prompt("hi", None, 1, 3))
        tracemalloc.start()
        t = time.perf_counter()
        await asyncio.wait_for(transport.send(req, protocol.handler(), out), 60)
        took = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        await transport.close()
    return out, took, peak


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
@pytest.mark.parametrize("mode, stream, error", [
    ("sse_noline", True, "bad_stream"), ("sse_noevent", True, "bad_stream"), ("headers_forever", False, "bad_response"),
])
def test_a_flood_is_cut_at_the_cap_and_never_held(server, transport, mode, stream, error):
    target = Target(url=server.url(mode), stream=stream, transport=transport, max_event_bytes=CAP,
                    max_header_bytes=64 * 1024)
    out, took, peak = asyncio.run(_one(target))
    assert out.error == error, (out.error, out.error_detail)
    assert peak < 16 * (1 << 20), f"{peak / 2**20:.0f} MB held while a {FLOOD_MB} MB flood came"
    if mode != "headers_forever":
        assert "max_event_bytes" in out.error_detail and out.bytes_in < 16 * (1 << 20)  # read no further


def test_a_run_against_endless_headers_is_not_generator_limited(tmp_path, server):
    """Parsing an endless header block once burnt the generator's CPU: the run was judged generator-limited."""
    res, summary, frame = run(tmp_path, f"""
    name: caps
    target: {{url: "{server.url('headers_forever')}", model: m, stream: false, timeout: 30s}}
    load:
      arrival: constant
      phases: [{{name: main, duration: 1s, qps: 4}}]
    """, preflight=False)  # the load path's parse (the pre-flight would refuse the target before any load)
    assert set(frame["error"]) == {"bad_response"} and len(frame) == 4
    assert not summary["generator_limited"], summary["generator"]


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "anthropic-messages", "openai-responses",
                                 "triton-generate"])
def test_every_streaming_api_cuts_an_unterminated_line_at_the_cap(server, api):
    """The streaming APIs that came after the caps (Anthropic, Responses, Triton) read through the same capped
    parser: an unterminated `data:` line is bad_stream at target.max_event_bytes, not 64 MB held."""
    target = Target(url=server.url("sse_noline"), api=api, stream=True, transport="lean", max_event_bytes=CAP,
                    model="m")
    out, took, peak = asyncio.run(_one(target))
    assert out.error == "bad_stream" and "max_event_bytes" in out.error_detail, (out.error, out.error_detail)
    assert peak < 16 * (1 << 20) and out.bytes_in < 16 * (1 << 20)


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
def test_a_long_body_is_judged_by_its_shape_not_its_status(server, transport):
    """Issue 27, item 6: a 2 MB HTML page or a 2 MB `{"error": ...}` with status 200 was a success (a body past
    1 MiB was trusted on its status). Both are bad_response, read in bounded memory."""
    for mode, detail in (("html_long", "not JSON: starts '<!DOCTYPE html>\\n<html>"),
                         ("error_long", 'an error object: {"message": "overloaded xxx')):
        target = Target(url=server.url(mode), stream=False, transport=transport)
        out, took, peak = asyncio.run(_one(target))
        assert (out.status, out.error) == (200, "bad_response") and out.error_detail.startswith(detail), out
        assert out.bytes_in > LONG_BYTES and peak < 16 * (1 << 20), peak


@pytest.mark.parametrize("transport", ["lean", "aiohttp", "httpx"])
def test_a_gzip_bomb_is_cut_at_the_inflate_cap(server, transport):
    """Issue 27, item 6: 1 MB of gzip inflating to 1 GiB (a valid-looking answer) was a success, inflated whole
    (aiohttp) or in 64 MiB reads (httpx), or trusted raw (lean). Every transport inflates with one cap: past it the
    request is bad_response and no more is read; a small gzip answer still reads as one."""
    gzip_bomb()  # made before the memory is measured (the server runs in this process)
    ok, _, _ = asyncio.run(_one(Target(url=server.url("gzip_ok"), stream=False, transport=transport)))
    assert (ok.error, ok.prompt_tokens, ok.output_tokens) == ("", 5, 3), ok
    out, took, peak = asyncio.run(_one(Target(url=server.url("gzip_bomb"), stream=False, transport=transport)))
    assert (out.status, out.error) == (200, "bad_response"), out
    assert "gzip body inflates past 64 MiB" in out.error_detail, out.error_detail
    assert out.bytes_in <= MAX_INFLATED_BYTES and peak < 16 * (1 << 20), peak
    assert took < 20  # the whole GiB was never inflated
