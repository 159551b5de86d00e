"""The audio clips of ``workload.audio``: WAV made with the seed, or a folder's WAV files, attached to prompts.

**Synthetic clips**: clip ``j`` of ``distinct`` lasts a duration drawn from ``duration`` and holds a tone that
sweeps with a seeded start and rate, with noise on top, as 16-bit mono PCM at ``sample_rate``: real samples a
server must decode, the same bytes on every machine for a scenario and seed.

**Files**: a folder's ``.wav`` files in name order, each opened with Python's ``wave`` module before the run
(its duration read from its header), so a file that is not a WAV is an error naming it before anything is sent.

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

from loadgen.scenario.files import UnreadableFile, read_capped
from loadgen.scenario.images import AttachedPrompts, ImageError
from loadgen.scenario.media_model import MAX_AUDIO_SECONDS, MAX_IMAGES, Audio
from loadgen.scenario.problems import Problems
from loadgen.scenario.prompts import PromptSource

__all__ = ["AudioItem", "audio_pool", "check_audio", "synthetic_wav", "with_audio"]

MAX_AUDIO_BYTES = 256 << 20  # one audio file at most


@dataclass(frozen=True, slots=True)
class AudioItem:
    """One clip as sent: its WAV bytes, base64 (``data``), its duration in seconds, bytes and SHA-256."""

    wav: bytes
    data: str
    seconds: float
    nbytes: int
    sha256: str


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


def read_wav(path: Path) -> AudioItem:
    """A WAV file as sent; ImageError (one message, without the path) when it cannot be read or is no WAV."""
    try:
        data = read_capped(path, MAX_AUDIO_BYTES)
    except UnreadableFile as exc:
        raise ImageError([f"cannot read: {exc}"]) from None
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            frames, rate = w.getnframes(), w.getframerate()
    except (wave.Error, EOFError) as exc:
        raise ImageError([f"not a WAV file ({exc})"]) from None
    seconds = frames / rate if rate else 0.0
    if not 0 < seconds <= MAX_AUDIO_SECONDS:
        raise ImageError([f"{seconds:.3f} s of audio: a clip must last above 0 and at most 1 h"])
    return _item(data, seconds)


def audio_pool(spec: Audio, base_dir: Path, seed: int) -> list[AudioItem]:
    """The clips prompts take in turn. Raises ImageError naming every file that cannot be used."""
    import numpy as np

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
    """What is wrong with a scenario's audio folder (empty when nothing; synthetic clips are made at the run)."""
    if spec is None or spec.synthetic:
        return []
    try:
        audio_pool(spec, base_dir, 0)
    except ImageError as exc:
        return exc.errors
    return []




def with_audio(base: PromptSource, spec: Audio | None, seed: int, base_dir: Path, one: bool = False) -> PromptSource:
    """``base`` with ``spec``'s clips attached (``base`` itself without audio); ``one``: exactly one clip a prompt
    (the transcription endpoint takes one file). Raises ImageError."""
    if spec is None:
        return base
    import numpy as np

    n = len(base)
    pool = audio_pool(spec, Path(base_dir), seed)
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
