"""The transcription endpoint's pre-flight (the model list, then one tiny WAV uploaded, not recorded) against the
reference server, and ``workload.audio.urls``: passed as they are in chat (``audio_url`` parts), downloaded once
at the start for the transcription endpoint (its upload needs the bytes) from a loopback aiohttp server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

import numpy as np
import pytest
from aiohttp import web

from loadgen.errors import UsageError
from loadgen.protocols.workload import make_workload
from loadgen.scenario.audio import synthetic_wav
from loadgen.scenario.loader import load_scenario
from tests.helpers import run, write_scenario
from tests.integration.test_audio import server  # noqa: F401 (the module's reference server fixture)

CLIPS = {"/a.wav": 1.0, "/b.wav": 0.5}  # seconds of each clip served


class ClipServer:
    """Serves WAV clips over GET on 127.0.0.1 (404 for any other path) and counts each path's requests."""

    def __init__(self):
        rng = np.random.default_rng(7)
        self.files = {path: synthetic_wav(rng, s, 8000) for path, s in CLIPS.items()}
        self.gets: Counter = Counter()
        self._started, self._loop = threading.Event(), None

    async def clip(self, request: web.Request):
        self.gets[request.path] += 1
        data = self.files.get(request.path)
        return web.Response(body=data, content_type="audio/wav") if data else web.Response(status=404)

    def _serve(self):
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/{name}", self.clip)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    def __enter__(self) -> "ClipServer":
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _scenario(url: str, api: str, audio: str, model: str = "tiny") -> str:
    return f"""
        name: audio
        target: {{url: "{url}/v1", model: {model}, api: {api}, stream: false}}
        workload:
          prompts: {{input_tokens: 8, output_tokens: 3, distinct: 4}}
          audio: {audio}
        load:
          arrival: constant
          host_wait_limit: 1
          phases: [{{name: main, duration: 1s, qps: 4, max_requests: 4}}]
        """


def test_the_transcription_preflight_lists_models_and_uploads_one_clip_not_recorded(tmp_path, server):  # noqa: F811
    result, summary, frame = run(tmp_path, _scenario(server.url, "openai-transcriptions", "{duration: 1s}"))
    assert result.exit_code == 0, result.reasons
    pre = summary["preflight"]
    assert pre["ok"] and pre["generated"] and "tiny" in pre["models"] and not pre.get("notes"), pre
    assert len(frame) == 4  # the pre-flight's upload is not a record
    result, summary, _ = run(tmp_path / "wrong", _scenario(server.url, "openai-transcriptions", "{duration: 1s}",
                                                            model="whisper-9"))
    assert result.exit_code == 3 and summary is None  # stopped before any load
    assert "does not list model 'whisper-9'" in " ".join(result.reasons), result.reasons


def test_audio_urls_go_as_they_are_in_chat_and_are_downloaded_once_for_transcriptions(tmp_path, server):  # noqa: F811
    with ClipServer() as clips:
        urls = [clips.base + p for p in CLIPS]
        audio = "{urls: [" + ", ".join(f'"{u}"' for u in urls) + "]}"
        sc = load_scenario(write_scenario(tmp_path, _scenario(server.url, "openai-chat", audio)), env={}).scenario
        protocol, prompts = make_workload(sc.target_list()[0], sc.workload, "tiny", None, 0, tmp_path)
        req = protocol.build(0, prompts.get(0))
        (msg,) = json.loads(req.body)["messages"]
        assert msg["content"][1] == {"type": "audio_url", "audio_url": {"url": urls[0]}}
        assert (req.counts.audio, req.counts.audio_seconds) == (1, -1.0)  # not fetched: its length unknown
        assert not clips.gets  # validating and building a chat request fetch nothing

        result, _, frame = run(tmp_path / "t", _scenario(server.url, "openai-transcriptions", audio))
        assert result.exit_code == 0, result.reasons
        assert (frame["error"] == "").all() and len(frame) == 4
        assert sorted(frame["audio_seconds"]) == [0.5, 0.5, 1.0, 1.0]  # each clip's own length, read once fetched
        assert clips.gets == {p: 1 for p in CLIPS}  # once each, however many requests send it

        missing = "{urls: [" + f'"{clips.base}/nothing.wav"' + "]}"
        sc = load_scenario(write_scenario(tmp_path, _scenario(server.url, "openai-transcriptions", missing)),
                           env={}).scenario
        with pytest.raises(UsageError, match=r"workload.audio.urls: http://127.0.0.1:\d+/nothing.wav: cannot "
                                             r"download: HTTP 404"):
            make_workload(sc.target_list()[0], sc.workload, "tiny", None, 0, tmp_path)
