"""latbench's own count of the prompt tokens an image takes, from the model's processor config, without
``transformers``: what the server should add to the prompt for each image, recorded beside its usage.

Read from the folder of ``workload.tokenizer`` (a model folder, a ``tokenizer.json``'s folder, or a model id's
snapshot in the local Hugging Face cache): ``preprocessor_config.json`` (``processor_config.json`` and
``config.json``'s ``vision_config`` for what it leaves out). Two families are known:

- **Qwen2-VL style** (``Qwen2VLImageProcessor``, also Qwen2.5-VL's and Qwen3-VL's; any config with
  ``merge_size`` and ``min_pixels``/``max_pixels``): the image is resized by ``smart_resize`` to sides that are
  multiples of ``patch_size * merge_size`` with its pixels within ``[min_pixels, max_pixels]``, and takes
  ``(h / patch) * (w / patch) / merge**2`` tokens. As transformers'
  ``src/transformers/models/qwen2_vl/image_processing_qwen2_vl.py`` (``smart_resize``) computes it.
- **LLaVA / CLIP style** (``CLIPImageProcessor``, model type ``llava``: a fixed ``crop_size``, else ``size``): every
  image becomes ``H x W`` pixels and takes ``(H // patch) * (W // patch) + 1`` tokens, less one (the CLS token)
  when ``vision_feature_select_strategy`` is ``default``. As transformers'
  ``src/transformers/models/llava/processing_llava.py`` (``LlavaProcessor.__call__``) counts it.

Any other processor is "not known" (:func:`image_token_rule` returns None, and records hold -1): tiling schemes
(LLaVA-NeXT's anyres, InternVL, Idefics) need their own rules.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from loadgen.scenario.tokenizer import TokenizerError, resolve_local

__all__ = ["ImageTokenRule", "image_token_rule", "read_image_rule", "smart_resize"]

QWEN_MIN_PIXELS = 56 * 56  # transformers' defaults, when a config leaves them out
QWEN_MAX_PIXELS = 28 * 28 * 1280
#: config.json model types whose CLIP-processed image is one fixed grid (LLaVA-NeXT's anyres tiles are not)
LLAVA_TYPES = ("llava", "vipllava", "clip")


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) as Qwen2-VL's image processor resizes an image: both sides multiples of ``factor``, the
    pixels within ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as possible. ValueError for an
    aspect ratio above 200 (the processor refuses such an image)."""
    if min(height, width) < 1 or max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be at most 200, got {width}x{height}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class ImageTokenRule:
    """How one model family turns an image into prompt tokens. ``family``: ``qwen2-vl`` (smart_resize with
    ``patch``, ``merge``, ``min_pixels``, ``max_pixels``) or ``llava`` (a fixed ``side`` = (height, width),
    ``patch``, ``extra`` tokens beside the patches: 1 with the CLS token, 0 without)."""

    family: str
    patch: int
    merge: int = 1
    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS
    side: tuple[int, int] = (0, 0)
    extra: int = 0

    def tokens(self, width: int, height: int) -> int:
        """Prompt tokens of one ``width`` x ``height`` image; -1 when the processor would refuse it."""
        if width < 1 or height < 1:
            return -1
        if self.family == "qwen2-vl":
            try:
                h, w = smart_resize(height, width, self.patch * self.merge, self.min_pixels, self.max_pixels)
            except ValueError:
                return -1
            return (h // self.patch) * (w // self.patch) // (self.merge * self.merge)
        h, w = self.side
        return (h // self.patch) * (w // self.patch) + self.extra


def _json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: not readable JSON: {exc}") from None
    return obj if isinstance(obj, dict) else {}


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _hw(v) -> tuple[int, int] | None:
    """(height, width) of a processor's ``crop_size`` or ``size``: {height, width}, {shortest_edge}, or a number."""
    if _int(v):
        return v, v
    if isinstance(v, dict):
        if _int(v.get("height")) and _int(v.get("width")):
            return v["height"], v["width"]
        if _int(v.get("shortest_edge")) and "longest_edge" not in v:
            return v["shortest_edge"], v["shortest_edge"]
    return None


def read_image_rule(folder: Path) -> ImageTokenRule | None:
    """The image token rule of the model in ``folder`` (None: no processor config there, or a family latbench
    does not know). TokenizerError for a config file that is not JSON."""
    pre = _json(folder / "preprocessor_config.json")
    if not pre:
        return None
    proc, config = _json(folder / "processor_config.json"), _json(folder / "config.json")
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    kind = str(pre.get("image_processor_type", ""))
    size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
    if "Qwen2VL" in kind or ("merge_size" in pre and ("min_pixels" in pre or "longest_edge" in size)):
        patch = _int(pre.get("patch_size")) or _int(vision.get("patch_size")) or 14
        merge = _int(pre.get("merge_size")) or _int(vision.get("spatial_merge_size")) or 2
        lo = _int(pre.get("min_pixels")) or _int(size.get("shortest_edge")) or QWEN_MIN_PIXELS
        hi = _int(pre.get("max_pixels")) or _int(size.get("longest_edge")) or QWEN_MAX_PIXELS
        return ImageTokenRule("qwen2-vl", patch, merge, lo, hi)
    if "CLIP" in kind and config.get("model_type", "llava") in LLAVA_TYPES:
        side = _hw(pre.get("crop_size")) if pre.get("do_center_crop", True) else None
        side = side or _hw(pre.get("size"))
        patch = _int(proc.get("patch_size")) or _int(vision.get("patch_size")) or _int(pre.get("patch_size"))
        if side is None or patch is None:
            return None
        strategy = proc.get("vision_feature_select_strategy", config.get("vision_feature_select_strategy"))
        extra = proc.get("num_additional_image_tokens", 1 if "CLIP" in kind else 0)
        extra = extra if isinstance(extra, int) and not isinstance(extra, bool) and extra >= 0 else 0
        if strategy == "default":
            extra = max(0, extra - 1)
        return ImageTokenRule("llava", patch, side=side, extra=extra)
    return None


def image_token_rule(tokenizer: str | None, base_dir: Path) -> ImageTokenRule | None:
    """The rule of ``workload.tokenizer``'s model (None: no tokenizer, ``server``, or no known processor config
    beside it). TokenizerError when the tokenizer cannot be resolved or a config is not JSON."""
    if tokenizer is None or tokenizer == "server":
        return None
    path = resolve_local(tokenizer, Path(base_dir))
    return read_image_rule(path if path.is_dir() else path.parent)
