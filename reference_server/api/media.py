"""Images and audio in chat requests: OpenAI ``image_url`` and ``input_audio`` content parts read, checked and
turned into prompt tokens (an ``input_audio`` clip, a WAV file, takes ``ceil(seconds x audio_tokens_per_s)``
tokens, encoded by :mod:`reference_server.models.audio`; it is marked and spliced as an image is).

An image part's URL must be a base64 ``data:image/...`` URL (this server fetches nothing: an http(s) URL is
refused with a 400 naming the part). Its bytes are hashed (SHA-256: the image cache's key, and what a test
compares with what it sent) and its header read for its size; the pixels are decoded later, by the engine, only
when the image cache does not hold the image's tokens. The image becomes ``patches_of(width, height, patch,
merge)`` prompt tokens at its place in the message (:data:`IMAGE_MARK` holds that place in the rendered text until
:func:`splice` replaces it), so usage's ``prompt_tokens`` counts them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import dataclass
from typing import ClassVar

from ..models.audio import audio_tokens, wav_seconds
from ..models.tokenizer import encode
from ..models.vision import patches_of

IMAGE_MARK = "\x00"  # an image's place in a rendered prompt (a NUL in a text part is sent as U+FFFD instead)
MAX_IMAGE_PIXELS = 64 * 1024 * 1024  # pixels of one image at most (Pillow's own bomb guard is 89M)


@dataclass(frozen=True)
class ImageInput:
    """One image of a request: the SHA-256 of its bytes, the bytes, its size, and the prompt tokens it takes."""

    sha256: str
    data: bytes
    width: int
    height: int
    tokens: int
    kind: ClassVar[str] = "image"  # what the engine encodes it with


@dataclass(frozen=True)
class AudioInput:
    """One audio clip of a request: the SHA-256 of its bytes, the bytes (a WAV file), its seconds, and the prompt
    tokens it takes."""

    sha256: str
    data: bytes
    seconds: float
    tokens: int
    kind: ClassVar[str] = "audio"


class MediaError(ValueError):
    """An image part that cannot be used; ``param`` names it (``messages[0].content[1]``)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def read_image_part(part: dict, param: str, patch: int, merge: int = 1) -> ImageInput:
    """The image of an ``image_url`` content part; MediaError naming ``param`` when it cannot be used."""
    inner = part.get("image_url")
    url = inner.get("url") if isinstance(inner, dict) else inner
    if not isinstance(url, str):
        raise MediaError(f"{param}.image_url.url must be a string", param)
    if not url.startswith("data:"):
        raise MediaError(f"{param}: this server does not fetch image URLs; send the image as a base64 data: URL",
                         param)
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64") or not head[5:].startswith("image/"):
        raise MediaError(f"{param}: expected a data:image/<format>;base64,<data> URL", param)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{param}: the data URL is not valid base64", param) from None
    from PIL import Image  # only for requests with images

    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
    except Exception:  # UnidentifiedImageError, a truncated header...
        raise MediaError(f"{param}: not an image this server can read", param) from None
    if width < 1 or height < 1 or width * height > MAX_IMAGE_PIXELS:
        raise MediaError(f"{param}: {width}x{height} pixels; at most {MAX_IMAGE_PIXELS} pixels an image", param)
    return ImageInput(hashlib.sha256(data).hexdigest(), data, width, height, patches_of(width, height, patch, merge))


def read_audio(data: bytes, param: str, tokens_per_s: int) -> AudioInput:
    """An audio clip from its WAV bytes; MediaError naming ``param`` when it is not a WAV file."""
    try:
        seconds = wav_seconds(data)
    except ValueError as exc:
        raise MediaError(f"{param}: {exc}", param) from None
    if not 0 < seconds <= 3600:
        raise MediaError(f"{param}: {seconds:.3f} s of audio; a clip lasts above 0 and at most an hour", param)
    return AudioInput(hashlib.sha256(data).hexdigest(), data, seconds, audio_tokens(seconds, tokens_per_s))


def read_audio_part(part: dict, param: str, tokens_per_s: int) -> AudioInput:
    """The clip of an ``input_audio`` content part (``{"data": base64, "format": "wav"}``)."""
    inner = part.get("input_audio")
    if not isinstance(inner, dict) or not isinstance(inner.get("data"), str):
        raise MediaError(f"{param}.input_audio must be {{\"data\": base64, \"format\": \"wav\"}}", param)
    if inner.get("format", "wav") != "wav":
        raise MediaError(f"{param}: only wav audio is read by this server", param)
    try:
        data = base64.b64decode(inner["data"], validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{param}: input_audio.data is not valid base64", param) from None
    return read_audio(data, param, tokens_per_s)


def splice(text: str, images: list) -> tuple[list[int], list[tuple[int, int]]]:
    """The prompt ids of a rendered prompt whose images (and audio clips) are marked with :data:`IMAGE_MARK`: each
    mark replaced by its tokens (placeholders, filled in by the engine's encoders), and each one's (start,
    length)."""
    pieces = text.split(IMAGE_MARK)
    ids: list[int] = encode(pieces[0])
    spans = []
    for image, piece in zip(images, pieces[1:]):
        spans.append((len(ids), image.tokens))
        ids += [0] * image.tokens
        ids += encode(piece)
    return ids, spans
