"""``receive_stamps: auto`` gives the kernel's receive stamps to a target whose answers are token streams, on the
lean transport: a streaming chat target. Any other target is read-stamped: an ``api: http`` target (whose
``stream`` is true by default, though the API streams no tokens), embeddings, a chat target asked for no stream.
The choice is the summary's ``generator.receive_stamps``; the transport a run used is built from the same one."""

from __future__ import annotations

import pytest

from loadgen.scenario.model import Target
from loadgen.transports.factory import receive_stamps
from loadgen.transports.lean_socket import available as kernel_stamps_available
from tests.helpers import run


def _scenario(target: str) -> str:
    return f"""
    name: stamps
    target: {target}
    workload: {{prompts: {{input_tokens: 8, output_tokens: 4, distinct: 4}}}}
    load:
      mode: closed
      phases: [{{name: main, duration: 2s, concurrency: 2, max_requests: 8}}]
    """


@pytest.mark.skipif(not kernel_stamps_available(), reason="the kernel's receive stamps are Linux's")
@pytest.mark.parametrize("target, stamps", [
    ('{{url: "{base}/v1", stream: true, transport: lean}}', "kernel"),
    ('{{url: "{base}/sleep?ms=1", api: http}}', "read"),  # stream: true (the default) asks nothing of api: http
    ('{{url: "{base}/sleep?ms=1", api: http, stream: false}}', "read"),
    ('{{url: "{base}/v1", stream: false}}', "read"),
], ids=["chat-stream", "http", "http-stream-false", "chat-no-stream"])
def test_auto_receive_stamps_are_the_kernels_for_token_streams_only(tmp_path, known_server, target, stamps):
    srv = known_server(delay=0.001, ttft=0.002, gap=0.001, tokens=4)
    _, summary, df = run(tmp_path, _scenario(target.format(base=f"http://127.0.0.1:{srv.port}")))
    assert len(df) == 8 and (df["error"] == "").all()  # (the verdict may blame a busy host: not what is asked here)
    assert summary["generator"]["receive_stamps"] == stamps


@pytest.mark.parametrize("api, stamps", [("openai-chat", "kernel"), ("http", "read"), ("embeddings", "read"),
                                         ("rerank", "read"), ("anthropic-messages", "kernel")])
def test_whether_an_api_streams_tokens_decides_auto(api, stamps):
    """Without a run: every API whose protocol streams tokens is kernel-stamped under ``auto`` (where Linux has the
    stamps), the others are read-stamped, whatever ``stream`` says."""
    target = Target(url="http://127.0.0.1:9/v1", api=api, stream=True)
    assert receive_stamps(target) == (stamps if kernel_stamps_available() else "read")
