"""The OpenAI transcription endpoint: ``api: openai-transcriptions``, ``POST {base}/audio/transcriptions``.

Each request uploads one clip of ``workload.audio`` as multipart/form-data (``file``, ``model``,
``response_format=json``, and ``stream=true`` for a streaming target), built once per prompt. A stream's text
arrives as OpenAI's ``transcript.text.delta`` events (each a token chunk) ending with ``transcript.text.done``
(its ``usage``: input and output tokens), or as vLLM sends it, chat-style chunks (``choices[].delta.content``)
ending with ``[DONE]``; a stream without either end is ``bad_stream``. A whole answer is ``{"text": ...}`` with
an optional ``usage``. The record keeps the clip's seconds (``audio_seconds``).
"""

from __future__ import annotations

from loadgen.protocols.base import Request, ResponseHandler
from loadgen.protocols.media import counts_of
from loadgen.protocols.shared import (
    EventStreamHandler,
    JsonApiProtocol,
    JsonBodyHandler,
    as_int,
    media_cache_from_usage,
    output_from_usage,
)
from loadgen.records.schema import Outcome
from loadgen.scenario.prompts import Prompt

__all__ = ["TranscriptionsProtocol"]

BOUNDARY = "latbench-form-7f3a9c1e5d"


def _usage(out: Outcome, usage) -> None:
    if not isinstance(usage, dict):
        return
    it, ot = as_int(usage.get("input_tokens", usage.get("prompt_tokens"))), as_int(
        usage.get("output_tokens", usage.get("completion_tokens")))
    if it is not None:
        out.prompt_tokens = it
    media_cache_from_usage(out, usage)
    if ot is not None:
        output_from_usage(out, ot)


class TranscriptionStream(EventStreamHandler):
    __slots__ = ()
    end_name = "transcript.text.done or [DONE]"

    def on_event(self, obj: dict, now: float, out: Outcome) -> str | None:
        kind = obj.get("type")
        if kind == "transcript.text.delta":
            if obj.get("delta"):
                self.token(out, now, True)
        elif kind == "transcript.text.done":
            _usage(out, obj.get("usage"))
            self.done = True
        elif kind == "error" or obj.get("error"):
            return "error in stream: " + str(obj.get("error", obj))[:200]
        else:  # vLLM: chat-style chunks, a usage chunk, then [DONE]
            choices = obj.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                delta = choices[0].get("delta")
                if isinstance(delta, dict) and delta.get("content"):
                    self.token(out, now, True)
            _usage(out, obj.get("usage"))
        return None


class TranscriptionJson(JsonBodyHandler):
    __slots__ = ()
    api = "openai-transcriptions"

    def read(self, obj: dict, out: Outcome) -> str | None:
        _usage(out, obj.get("usage"))
        return None


class TranscriptionsProtocol(JsonApiProtocol):
    """``POST {base}/audio/transcriptions``, one clip a request as multipart/form-data."""

    name = "openai-transcriptions"
    endpoint = "/audio/transcriptions"

    def __init__(self, target, workload, model, base_url=None):
        super().__init__(target, workload, model, base_url)
        self.headers = tuple((k, v) if k.lower() != "content-type" else
                             (k, f"multipart/form-data; boundary={BOUNDARY}") for k, v in self.headers)

    def build(self, seq: int, prompt: Prompt) -> Request:
        (clip,) = prompt.audio
        fields = [("model", self.model)] if self.model is not None else []
        fields += [("response_format", "json")] + ([("stream", "true")] if self.stream else [])
        parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                 for k, v in fields]
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="audio.wav"\r\n'
                     "Content-Type: audio/wav\r\n\r\n".encode() + clip.wav + b"\r\n")
        body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
        return Request("POST", self.url, self.path, self.headers, body, self.stream, counts_of(prompt, counted=False))

    def handler(self) -> ResponseHandler:
        return TranscriptionStream(self.target.max_event_bytes) if self.stream else TranscriptionJson()
