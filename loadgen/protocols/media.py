"""A prompt's images and audio as each API's content parts, and the counts of what a request sends (its record's).

The images go after the text of the prompt's last user message (a text prompt is one user message): OpenAI chat
``{"type": "image_url", "image_url": {"url", "detail"}}``, Responses ``{"type": "input_image", "image_url"}``
beside ``input_text``, Anthropic ``{"type": "image", "source": {"type": "base64", "media_type", "data"}}`` (or
``{"type": "url", "url"}`` for a URL). A ``data:`` URL is the image's bytes, base64, as every one of these APIs
takes them; an http(s) URL is passed as it is. An audio clip is an ``input_audio`` part (its WAV, base64), or an
``audio_url`` part for a clip given as a URL (vLLM's; OpenAI's chat takes audio as data only).
"""

from __future__ import annotations

from loadgen.records.schema import PromptCounts
from loadgen.scenario.images import image_stats
from loadgen.scenario.prompts import Prompt

__all__ = ["STYLES", "counts_of", "messages_with_images"]

STYLES = ("openai-chat", "openai-responses", "anthropic-messages")
_TEXT = {"openai-chat": "text", "openai-responses": "input_text", "anthropic-messages": "text"}


def _part(url: str, style: str, detail: str | None) -> dict:
    if style == "openai-chat":
        inner = {"url": url} if detail is None else {"url": url, "detail": detail}
        return {"type": "image_url", "image_url": inner}
    if style == "openai-responses":
        part = {"type": "input_image", "image_url": url}
        if detail is not None:
            part["detail"] = detail
        return part
    if url.startswith("data:"):  # anthropic: data:<mime>;base64,<data>
        head, _, data = url.partition(",")
        return {"type": "image", "source": {"type": "base64", "media_type": head[5:].split(";")[0], "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def messages_with_images(prompt: Prompt, style: str, detail: str | None = None) -> list:
    """The prompt's messages (a text prompt: one user message) with its images (and audio clips: openai-chat's
    ``input_audio`` parts) after the last user message's text, as content parts of ``style`` (one of
    :data:`STYLES`)."""
    messages = list(prompt.messages) if prompt.messages is not None else [{"role": "user", "content": prompt.text}]
    last = max((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), default=None)
    if last is None:
        messages.append({"role": "user", "content": []})
        last = len(messages) - 1
    m = messages[last]
    content = m.get("content")
    parts = list(content) if isinstance(content, list) else (
        [{"type": _TEXT[style], "text": content}] if isinstance(content, str) and content else [])
    parts += [_part(i.url, style, detail) for i in prompt.images]
    parts += [{"type": "audio_url", "audio_url": {"url": a.url}} if a.url else
              {"type": "input_audio", "input_audio": {"data": a.data, "format": "wav"}} for a in prompt.audio]
    messages[last] = {**m, "content": parts}
    return messages


def counts_of(prompt: Prompt, counted: bool = True, tools: int = 0) -> PromptCounts:
    """The prompt's counts as its request's record keeps them: tokens as latbench counted them (``counted``
    False: not counted, -1), the images (pixels, bytes, and their prompt tokens by latbench's count) and audio
    (seconds) it sends, and the ``tools`` it offers."""
    n, pixels, nbytes, image_tokens = image_stats(prompt.images) if prompt.images else (0, 0, 0, 0)
    audio = len(prompt.audio)
    seconds = sum(a.seconds for a in prompt.audio) if all(a.seconds >= 0 for a in prompt.audio) else -1.0
    media = bool(n or tools or audio)
    if counted:
        return PromptCounts(prompt.input_tokens, prompt.added_tokens, prompt.counted_by, n, pixels, nbytes, tools,
                            audio, seconds, media, image_tokens)
    return PromptCounts(images=n, image_pixels=pixels, image_bytes=nbytes, tools=tools, audio=audio,
                        audio_seconds=seconds, media=media, image_tokens_est=image_tokens)
