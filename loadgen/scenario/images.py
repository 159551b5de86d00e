"""The images of ``workload.images``: made with the seed, read from files, or URLs, and attached to prompts.

**Synthetic images** (Pillow): image ``j`` of ``distinct`` has a size drawn from ``width``/``height`` (or
``sizes[j % len(sizes)]``) and pixels made with the seed: a coarse random colour grid, smoothly scaled up, with
per-pixel noise on top, so a JPEG's size follows its ``quality`` the way a photograph's does (pure noise would
not compress at all, a flat colour to nothing). The same scenario and seed make the same bytes on every machine
with the same Pillow.

**Files**: a folder's image files in name order, or a JSON-lines file whose line ``k`` names request ``k``'s
images (``{"image": PATH_OR_URL}`` or ``{"images": [...]}``, paths relative to the file). Every file is opened
with Pillow before the run (its size read, its data checked), so a file that is not an image is an error naming
it, before anything is sent. A file's bytes are sent as they are, as a base64 ``data:`` URL.

**A Hugging Face dataset** (``hf``, the ``latbench[datasets]`` extra, read as prompt datasets are:
:func:`loadgen.scenario.datasets.load_hf`): each row's ``column`` is one image of the pool, its file bytes as
stored, checked as a file's are.

**URLs** are passed through: the server fetches them, latbench never does, and their pixels and bytes are
unknown (-1 in the records).

**Per request.** Prompt ``i`` (request ``seq`` sends prompt ``seq % distinct prompts``) carries ``count_i``
images, drawn per prompt with the seed; they are the next ``count_i`` of the pool, in turn, so each image is
used as often as the others. With ``file``, prompt ``i`` carries line ``i % lines``'s images.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import json
from dataclasses import dataclass, replace
from pathlib import Path

from loadgen.scenario.datasets import DatasetError, load_hf
from loadgen.scenario.files import MAX_DATA_BYTES, UnreadableFile, read_capped
from loadgen.scenario.image_tokens import ImageTokenRule
from loadgen.scenario.media_model import MAX_IMAGE_SIDE, MAX_IMAGES, Images
from loadgen.scenario.problems import Problems
from loadgen.scenario.prompts import Prompt, PromptSource, draw_tokens  # one rule for every drawn length

__all__ = ["AttachedPrompts", "ImageError", "ImageItem", "check_images", "image_pool", "synthetic_image",
           "with_images"]

MAX_IMAGE_BYTES = 64 << 20  # one image file at most (64 MiB)
MAX_FOLDER_IMAGES = 100_000  # files of an image folder at most


class ImageError(ValueError):
    """Images that cannot be used: ``errors`` holds one ``file[:line]: what`` message per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True, slots=True)
class ImageItem:
    """One image as sent: its URL (a base64 ``data:`` URL, or an http(s) URL passed through), its size and bytes
    (-1 when unknown: a URL), the SHA-256 of its bytes ('' for a URL), and the prompt tokens it takes by
    :mod:`loadgen.scenario.image_tokens` (-1 not known)."""

    url: str
    width: int = -1
    height: int = -1
    nbytes: int = -1
    sha256: str = ""
    tokens: int = -1  # prompt tokens the model's processor makes of it, by latbench's count; -1 not known

    @property
    def pixels(self) -> int:
        """width x height; -1 when unknown."""
        return self.width * self.height if self.width >= 0 else -1


def _pil():
    try:
        from PIL import Image
    except ImportError:  # a dependency of latbench: only a broken install lacks it
        raise ImageError(["images need Pillow: pip install pillow"]) from None
    return Image


def data_url(data: bytes, mime: str) -> str:
    """``data:<mime>;base64,...`` of ``data``."""
    return f"data:{mime};base64," + base64.b64encode(data).decode("ascii")


def _item(data: bytes, mime: str, width: int, height: int) -> ImageItem:
    return ImageItem(data_url(data, mime), width, height, len(data), hashlib.sha256(data).hexdigest())


def synthetic_image(rng, width: int, height: int, fmt: str = "jpeg", quality: int = 85) -> bytes:
    """An image of ``width`` x ``height`` pixels made with ``rng`` (a numpy Generator), encoded as ``fmt``."""
    import numpy as np

    Image = _pil()
    grid = rng.integers(0, 256, size=(max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(grid, "RGB").resize((width, height), Image.BILINEAR), dtype=np.int16)
    noisy = np.clip(smooth + rng.integers(-12, 13, size=smooth.shape, dtype=np.int16), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    if fmt == "png":
        Image.fromarray(noisy, "RGB").save(buf, format="PNG")
    else:
        Image.fromarray(noisy, "RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _sides(dist, n: int, rng):
    return draw_tokens(dist, n, rng, cap=MAX_IMAGE_SIDE).tolist()


def _synthetic(spec: Images, seed: int) -> list[ImageItem]:
    import numpy as np

    rng = np.random.default_rng([seed, 0x1A6E])
    n = spec.distinct
    if spec.sizes is not None:
        sizes = [spec.sizes[j % len(spec.sizes)] for j in range(n)]
    else:
        sizes = list(zip(_sides(spec.width, n, rng), _sides(spec.height, n, rng)))
    mime = "image/png" if spec.format == "png" else "image/jpeg"
    return [_item(synthetic_image(rng, w, h, spec.format, spec.quality), mime, w, h) for w, h in sizes]


def read_image(path: Path) -> ImageItem:
    """An image file as sent (its bytes as they are); ImageError (one message, without the path) when it cannot
    be read or is not an image Pillow knows."""
    try:
        data = read_capped(path, MAX_IMAGE_BYTES)
    except UnreadableFile as exc:
        raise ImageError([f"cannot read: {exc}"]) from None
    return image_of(data)


def image_of(data: bytes) -> ImageItem:
    """The bytes of an image file as sent; ImageError (one message) when they are not an image Pillow knows."""
    Image = _pil()
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError([f"{len(data):,} bytes: an image may take {MAX_IMAGE_BYTES:,} at most"])
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt, (w, h) = img.format, img.size
            img.verify()  # the data, not only the header
    except Image.UnidentifiedImageError:
        raise ImageError(["not an image (no image format Pillow reads recognises it)"]) from None
    except Exception as exc:  # PIL raises SyntaxError, OSError, ValueError... for a broken image file
        raise ImageError([f"a broken image file ({type(exc).__name__}: {exc})"]) from None
    mime = Image.MIME.get(fmt or "", "")
    if not mime.startswith("image/"):
        raise ImageError([f"an image of format {fmt}, which has no image MIME type to send it as"])
    if not (1 <= w <= MAX_IMAGE_SIDE * 4 and 1 <= h <= MAX_IMAGE_SIDE * 4):
        raise ImageError([f"{w}x{h} pixels: each side must be from 1 to {MAX_IMAGE_SIDE * 4}"])
    return _item(data, mime, w, h)


def _folder(folder: Path, problems: Problems) -> list[ImageItem]:
    if not folder.is_dir():
        problems.at(None, "not a folder" if folder.exists() else "no such folder")
        return []
    files = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and not p.is_dir())
    if not files:
        problems.at(None, "holds no image file")
    if len(files) > MAX_FOLDER_IMAGES:
        problems.at(None, f"holds {len(files):,} files, more than the {MAX_FOLDER_IMAGES:,} an image folder may")
        return []
    items = []
    for f in files:
        try:
            items.append(read_image(f))
        except ImageError as exc:
            problems.add(f"{f}: {exc.errors[0]}")
    return items


def _lines(file: Path, problems: Problems) -> list[tuple[ImageItem, ...]]:
    try:
        text = read_capped(file, MAX_DATA_BYTES).decode("utf-8")
    except (UnreadableFile, UnicodeDecodeError) as exc:
        problems.at(None, f"cannot read: {exc}")
        return []
    groups: list[tuple[ImageItem, ...]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            problems.at(n, f"not JSON: {exc}")
            continue
        names = [obj["image"]] if isinstance(obj, dict) and "image" in obj else (
            obj.get("images") if isinstance(obj, dict) else None)
        field = "image" if isinstance(obj, dict) and "image" in obj else "images"
        if (not isinstance(names, list) or not all(isinstance(x, str) and x for x in names)
                or len(names) > MAX_IMAGES or (isinstance(obj, dict) and not names and field == "image")):
            problems.at(n, f'{field}: expected {{"image": "path or URL"}} or {{"images": [up to {MAX_IMAGES} '
                           f'paths or URLs]}}, got {line.strip()!r:.80}')
            continue
        group = []
        for k, name in enumerate(names):
            where = field if field == "image" else f"images[{k}]"
            if name.startswith(("http://", "https://")):
                group.append(ImageItem(name))
                continue
            try:
                group.append(read_image(file.parent / name))
            except ImageError as exc:
                problems.at(n, f"{where}: {name}: {exc.errors[0]}")
        groups.append(tuple(group))
    if not groups and not problems.errors:
        problems.at(None, "holds no line")
    return groups


def _hf_rows(spec: Images, base_dir: Path, problems: Problems) -> list[ImageItem]:
    """The images of a Hugging Face dataset's ``column``, one a row, their file bytes as stored (an ``Image``
    feature read undecoded, or a column of bytes)."""
    try:
        ds = load_hf(spec.hf, spec.split, base_dir)
    except DatasetError as exc:
        problems.add(exc.errors[0])
        return []
    if spec.column not in ds.column_names:
        problems.at(None, f"column: no column {spec.column!r} in split {spec.split!r} (its columns: "
                          f"{', '.join(ds.column_names)})")
        return []
    feature, image_type = ds.features[spec.column], importlib.import_module("datasets").Image
    if isinstance(feature, image_type):  # undecoded: {"bytes", "path"}, the file as stored
        ds = ds.cast_column(spec.column, image_type(decode=False))
    elif not (getattr(feature, "dtype", None) in ("binary", "large_binary")
              or (isinstance(feature, dict) and "bytes" in feature)):  # a parquet file's image struct
        problems.at(None, f"column: {spec.column!r} holds {getattr(feature, 'dtype', type(feature).__name__)}, "
                          "not images (expected an Image feature or image file bytes)")
        return []
    items = []
    for i, value in enumerate(ds[spec.column]):
        data = value.get("bytes") if isinstance(value, dict) else value
        if data is None and isinstance(value, dict) and value.get("path"):
            try:
                data = read_capped(Path(value["path"]), MAX_IMAGE_BYTES)
            except UnreadableFile as exc:
                problems.add(f"{spec.hf}[{spec.split}] row {i}: {spec.column}: cannot read {value['path']}: {exc}")
                continue
        if not isinstance(data, (bytes, bytearray)):
            problems.add(f"{spec.hf}[{spec.split}] row {i}: {spec.column}: no image (got {type(value).__name__})")
            continue
        try:
            items.append(image_of(bytes(data)))
        except ImageError as exc:
            problems.add(f"{spec.hf}[{spec.split}] row {i}: {spec.column}: {exc.errors[0]}")
    if not items and not problems.errors:
        problems.at(None, f"split {spec.split!r} has no rows")
    return items


def image_pool(spec: Images, base_dir: Path, seed: int) -> tuple[list[ImageItem], list[tuple[ImageItem, ...]]]:
    """(the pool prompts take their images from in turn, or the file's per-request groups): one of the two is
    empty. Raises ImageError naming every file and line that cannot be used."""
    if spec.urls is not None:
        return [ImageItem(u) for u in spec.urls], []
    if spec.synthetic:
        return _synthetic(spec, seed), []
    if spec.hf is not None:
        problems = Problems(spec.hf, ImageError)
        pool = _hf_rows(spec, Path(base_dir), problems)
        problems.raise_any()
        return pool, []
    path = Path(base_dir) / (spec.folder if spec.folder is not None else spec.file)
    problems = Problems(path, ImageError)
    if spec.folder is not None:
        pool, groups = _folder(path, problems), []
    else:
        pool, groups = [], _lines(path, problems)
    problems.raise_any()
    return pool, groups


def check_images(spec: Images | None, base_dir: Path) -> list[str]:
    """What is wrong with the images a scenario names (empty when nothing): every file read and checked, before
    anything is sent. Synthetic images are not made here (only Pillow's presence is checked)."""
    if spec is None:
        return []
    try:
        if spec.synthetic:
            _pil()
        else:
            image_pool(spec, base_dir, 0)
    except ImageError as exc:
        return exc.errors
    return []


class AttachedPrompts(PromptSource):
    """``base``'s prompts, prompt ``i`` with its attachments ``groups[i]`` as its field ``field`` (``images`` or
    ``audio``); request ``seq`` gets prompt ``seq % len``."""

    def __init__(self, base: PromptSource, groups: list[tuple], field: str):
        self._base, self._groups, self._field = base, groups, field
        self._n = len(base)

    def __len__(self) -> int:
        return self._n

    def get(self, seq: int) -> Prompt:
        i = seq % self._n
        return replace(self._base.get(i), **{self._field: self._groups[i]})


def with_images(base: PromptSource, spec: Images | None, seed: int, base_dir: Path,
                rule: ImageTokenRule | None = None) -> PromptSource:
    """``base`` with ``spec``'s images attached (``base`` itself without images), each with its prompt tokens by
    ``rule`` (None: not known). Raises ImageError."""
    if spec is None:
        return base
    import numpy as np

    n = len(base)
    pool, lines = image_pool(spec, Path(base_dir), seed)
    if rule is not None:
        counted = lambda i: replace(i, tokens=rule.tokens(i.width, i.height)) if i.width > 0 else i  # noqa: E731
        pool, lines = [counted(i) for i in pool], [tuple(map(counted, g)) for g in lines]
    if lines:
        groups = [lines[i % len(lines)] for i in range(n)]
    else:
        c, rng = spec.count, np.random.default_rng([seed, 0x1A6F])
        drawn = rng.normal(c.mean, c.stddev, size=n) if c.stddev > 0 else np.full(n, float(c.mean))
        counts = np.clip(np.rint(drawn), c.min, c.max if c.max is not None else MAX_IMAGES).astype(np.int64)
        groups, at = [], 0
        for c in counts.tolist():
            groups.append(tuple(pool[(at + k) % len(pool)] for k in range(c)))
            at += c
    return AttachedPrompts(base, groups, "images")


def image_stats(items) -> tuple[int, int, int, int]:
    """(images, pixels, bytes, tokens) of a request's images; each sum -1 when any of its terms is unknown (a
    URL's pixels and bytes, the tokens of a model whose processor latbench does not know)."""
    def total(values) -> int:
        values = list(values)
        return sum(values) if all(v >= 0 for v in values) else -1
    return (len(items), total(i.pixels for i in items), total(i.nbytes for i in items),
            total(i.tokens for i in items))
