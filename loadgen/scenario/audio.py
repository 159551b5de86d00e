"""The audio clips of ``workload.audio``: WAV made with the seed, or a folder's WAV files, attached to prompts.

**Synthetic clips**: clip ``j`` of ``distinct`` lasts a duration drawn from ``duration`` and holds a tone that
sweeps with a seeded start and rate, with noise on top, as 16-bit mono PCM at ``sample_rate``: real samples a
server must decode, the same bytes on every machine for a scenario and seed.

**Files**: a folder's ``.wav`` files in name order, each opened with Python's ``wave`` module before the run
(its duration read from its header), so a file that is not a WAV is an error naming it before anything is sent.

**URLs** (http(s)) are sent as they are where the API takes a URL (openai-chat: an ``audio_url`` part, as vLLM
reads it; seconds and bytes unknown, -1), and downloaded once at the start where it needs the bytes (the
transcription endpoint's upload), through :mod:`loadgen.fetch`, each checked as a file is.

**Per request** as images (:mod:`loadgen.scenario.images`): prompt ``i`` carries ``count_i`` clips, the pool's
next ones in turn. Sent as base64 in ``input_audio`` parts (openai-chat) or uploaded as the transcription
endpoint's ``file`` (:mod:`loadgen.protocols.transcriptions`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import wave
from dataclasses import dataclass
from pathlib import Path

from loadgen.fetch import FetchError, fetch, safe_url
from loadgen.scenario.files import UnreadableFile, read_capped
from loadgen.scenario.images import AttachedPrompts, ImageError
from loadgen.scenario.media_model import MAX_AUDIO_SECONDS, MAX_IMAGES, Audio
from loadgen.scenario.problems import Problems
from loadgen.scenario.prompts import PromptSource

__all__ = ["AudioItem", "audio_pool", "check_audio", "minimal_clip", "synthetic_wav", "with_audio"]

MAX_AUDIO_BYTES = 256 << 20  # one audio file at most


@dataclass(frozen=True, slots=True)
class AudioItem:
    """One clip as sent: its WAV bytes, base64 (``data``), its duration in seconds, bytes and SHA-256; or an
    http(s) ``url`` passed as it is (no bytes, its seconds and bytes -1: unknown)."""

    wav: bytes
    data: str
    seconds: float
    nbytes: int
    sha256: str
    url: str = ""


def _item(wav: bytes, seconds: float) -> AudioItem:
    return AudioItem(wav, base64.b64encode(wav).decode("ascii"), seconds, len(wav), hashlib.sha256(wav).hexdigest())


def synthetic_wav(rng, seconds: float, rate: int) -> bytes:
    """``seconds`` of a noisy tone sweep at ``rate`` samples a second, as a 16-bit mono WAV file."""
    import numpy as np

    n = max(1, int(round(seconds * rate)))
    t = np.arange(n) / rate
    f0, sweep = rng.uniform(150, 600), rng.uniform(-50, 50)
    x = 0.4 * np.sin(2 * np.pi * (f0 + sweep * t) * t) + rng.normal(0, 0.05, n)
    pcm = (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return buf.getvalue()


def minimal_clip() -> AudioItem:
    """A quarter second of tone at 16 kHz (8 kB): what a pre-flight uploads to a transcription endpoint."""
    import numpy as np

    return _item(synthetic_wav(np.random.default_rng(0), 0.25, 16_000), 0.25)


def read_wav(path: Path) -> AudioItem:
    """A WAV file as sent; ImageError (one message, without the path) when it cannot be read or is no WAV."""
    try:
        data = read_capped(path, MAX_AUDIO_BYTES)
    except UnreadableFile as exc:
        raise ImageError([f"cannot read: {exc}"]) from None
    return wav_of(data)


def wav_of(data: bytes) -> AudioItem:
    """The bytes of a WAV file as sent; ImageError (one message) when they are not a WAV of 0 to 1 h."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            frames, rate = w.getnframes(), w.getframerate()
    except (wave.Error, EOFError) as exc:
        raise ImageError([f"not a WAV file ({exc})"]) from None
    seconds = frames / rate if rate else 0.0
    if not 0 < seconds <= MAX_AUDIO_SECONDS:
        raise ImageError([f"{seconds:.3f} s of audio: a clip must last above 0 and at most 1 h"])
    return _item(data, seconds)


#: downloaded clips by URL, once per process (a run's checks and its senders ask for the same ones)
_DOWNLOADED: dict[str, AudioItem] = {}
DOWNLOAD_DEADLINE_S = 60.0


def _download(urls: list[str]) -> list[AudioItem]:
    """Each URL's WAV file, fetched once through latbench's one non-load client (:mod:`loadgen.fetch`)."""
    problems = Problems("workload.audio.urls", ImageError)
    for u in urls:
        if u in _DOWNLOADED:
            continue
        try:
            resp = fetch("GET", u, deadline_s=DOWNLOAD_DEADLINE_S, max_bytes=MAX_AUDIO_BYTES)
        except FetchError as exc:
            problems.at(None, f"{exc.url}: cannot download: {exc.detail}")
            continue
        if resp.status != 200:
            problems.at(None, f"{safe_url(u)}: cannot download: HTTP {resp.status}")
            continue
        try:
            _DOWNLOADED[u] = wav_of(resp.body)
        except ImageError as exc:
            problems.at(None, f"{safe_url(u)}: {exc.errors[0]}")
    problems.raise_any()
    return [_DOWNLOADED[u] for u in urls]


def audio_pool(spec: Audio, base_dir: Path, seed: int, download: bool = False) -> list[AudioItem]:
    """The clips prompts take in turn: URLs as they are, or (``download``: the API needs the bytes) each
    downloaded once. Raises ImageError naming every file or URL that cannot be used."""
    import numpy as np

    if spec.urls is not None:
        return _download(spec.urls) if download else [AudioItem(b"", "", -1.0, -1, "", u) for u in spec.urls]
    if spec.synthetic:
        rng = np.random.default_rng([seed, 0xA0D1])
        d = spec.duration
        drawn = rng.normal(d.mean, d.stddev, spec.distinct) if d.stddev > 0 else np.full(spec.distinct, d.mean)
        return [_item(synthetic_wav(rng, float(s), spec.sample_rate), round(float(s) * spec.sample_rate)
                      / spec.sample_rate) for s in np.clip(drawn, d.min, d.max)]
    folder = Path(base_dir) / spec.folder
    problems = Problems(folder, ImageError)
    if not folder.is_dir():
        problems.at(None, "not a folder" if folder.exists() else "no such folder")
    files = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and not p.is_dir()) \
        if folder.is_dir() else []
    if folder.is_dir() and not files:
        problems.at(None, "holds no WAV file")
    pool = []
    for f in files:
        try:
            pool.append(read_wav(f))
        except ImageError as exc:
            problems.add(f"{f}: {exc.errors[0]}")
    problems.raise_any()
    return pool


def check_audio(spec: Audio | None, base_dir: Path) -> list[str]:
    """What is wrong with a scenario's audio folder (empty when nothing; synthetic clips are made at the run and
    URLs fetched, where the API needs their bytes, at its start: validating sends nothing)."""
    if spec is None or spec.folder is None:
        return []
    try:
        audio_pool(spec, base_dir, 0)
    except ImageError as exc:
        return exc.errors
    return []




def with_audio(base: PromptSource, spec: Audio | None, seed: int, base_dir: Path, one: bool = False) -> PromptSource:
    """``base`` with ``spec``'s clips attached (``base`` itself without audio); ``one``: exactly one clip a prompt,
    as bytes (the transcription endpoint takes one file: URLs are downloaded). Raises ImageError."""
    if spec is None:
        return base
    import numpy as np

    n = len(base)
    pool = audio_pool(spec, Path(base_dir), seed, download=one)
    c, rng = spec.count, np.random.default_rng([seed, 0xA0D2])
    if one:
        counts = np.ones(n, dtype=np.int64)
    else:
        drawn = rng.normal(c.mean, c.stddev, size=n) if c.stddev > 0 else np.full(n, float(c.mean))
        counts = np.clip(np.rint(drawn), c.min, c.max if c.max is not None else MAX_IMAGES).astype(np.int64)
    groups, at = [], 0
    for k in counts.tolist():
        groups.append(tuple(pool[(at + j) % len(pool)] for j in range(k)))
        at += k
    return AttachedPrompts(base, groups, "audio")
