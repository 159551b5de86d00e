"""Audio: input_audio parts in chat and the transcription endpoint (multipart, streamed or not) against the
reference server, which charges tokens by a clip's duration; the records keep each request's clips and seconds;
a folder holding a file that is not a WAV is an error naming it, before anything is sent."""

from __future__ import annotations

import json

import pytest

from loadgen.errors import ScenarioError
from loadgen.scenario.audio import audio_pool
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.media_model import Audio
from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig
from tests.helpers import run, write_scenario


@pytest.fixture(scope="module")
def server(weights_dir):
    cfg = ServerConfig.from_preset("naive", model="tiny", backend="numpy", cache_dir=weights_dir, preload=True)
    with BackgroundServer(cfg) as srv:
        yield srv


def _scenario(url: str, api: str, audio: str, stream: bool = True) -> str:
    return f"""
        name: audio
        target: {{url: "{url}/v1", model: tiny, api: {api}, stream: {str(stream).lower()}}}
        workload:
          prompts: {{input_tokens: 8, output_tokens: 3, distinct: 4}}
          audio: {audio}
        load:
          arrival: constant
          phases: [{{name: main, duration: 1s, qps: 4, max_requests: 4}}]
        """


@pytest.mark.parametrize("api, stream", [("openai-chat", True), ("openai-transcriptions", True),
                                         ("openai-transcriptions", False)])
def test_audio_costs_tokens_by_its_duration_and_records_keep_its_seconds(tmp_path, server, api, stream):
    _, summary, frame = run(tmp_path, _scenario(server.url, api, "{duration: 2s, distinct: 2, sample_rate: 8000}",
                                                stream))
    assert (frame["error"] == "").all() and len(frame) == 4
    assert (frame["audio"] == 1).all() and (frame["audio_seconds"] == 2.0).all()
    # 2 s at 25 tokens a second: 50 prompt tokens of audio besides the text
    assert (frame["prompt_tokens"] > 50).all() and (frame["output_tokens"] > 0).all()
    if stream:
        assert frame["ttft"].notna().all()
    if api == "openai-transcriptions":  # the default transcript: 3 tokens a second of audio
        assert (frame["output_tokens"] == 6).all()


def test_synthetic_clips_are_the_seeds_and_a_non_wav_file_is_named(tmp_path):
    a = audio_pool(Audio(duration="1500ms", distinct=2, sample_rate=8000), tmp_path, 3)
    assert [c.seconds for c in a] == [1.5, 1.5] and a[0].sha256 != a[1].sha256
    assert [c.sha256 for c in audio_pool(Audio(duration="1500ms", distinct=2, sample_rate=8000), tmp_path, 3)] == \
        [c.sha256 for c in a]
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "a.wav").write_bytes(a[0].wav)
    (tmp_path / "clips" / "b.wav").write_text("not a wav")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write_scenario(tmp_path, _scenario("http://127.0.0.1:9", "openai-chat", "{folder: clips}")),
                      env={})
    (err,) = exc.value.errors
    assert err.startswith(f"{tmp_path}/s.yaml:6:19: workload.audio.folder: {tmp_path}/clips/b.wav: not a WAV file")
    with pytest.raises(ScenarioError, match="workload.audio: target 'target' speaks embeddings"):
        load_scenario(write_scenario(tmp_path, _scenario("http://127.0.0.1:9", "embeddings", "{duration: 0.5}")),
                      env={})
    with pytest.raises(ScenarioError, match="workload.audio.duration: expected a duration above 0 and at most 1h"):
        load_scenario(write_scenario(tmp_path, _scenario("http://127.0.0.1:9", "openai-chat", "{duration: 2h}")),
                      env={})


def test_a_bad_transcription_upload_is_a_400_naming_the_file(server):
    import urllib.request

    body = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nnot a wav\r\n--b--\r\n')
    req = urllib.request.Request(server.url + "/v1/audio/transcriptions", data=body, method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=b"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=30)
    err = json.loads(exc.value.read())["error"]
    assert exc.value.code == 400 and err["param"] == "file" and "not a WAV file" in err["message"]
