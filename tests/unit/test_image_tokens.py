"""latbench's own count of an image's prompt tokens from a model folder's processor config, without transformers:
Qwen2-VL's smart_resize rule and LLaVA's fixed grid, table-driven against the formulas (values worked by hand
from transformers' image_processing_qwen2_vl.py and processing_llava.py); an unknown processor is "not known"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.scenario.image_tokens import ImageTokenRule, image_token_rule, read_image_rule, smart_resize
from loadgen.scenario.tokenizer import TokenizerError

QWEN = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "merge_size": 2,
        "min_pixels": 3136, "max_pixels": 12845056, "temporal_patch_size": 2}


@pytest.mark.parametrize("h, w, factor, lo, hi, expect", [
    (512, 512, 28, 3136, 12845056, (504, 504)),  # round(18.3) * 28
    (1080, 1920, 28, 3136, 12845056, (1092, 1932)),  # 39 x 69 blocks
    (28, 28, 28, 3136, 12845056, (56, 56)),  # below min_pixels: scaled up by ceil
    (10, 10, 28, 3136, 12845056, (56, 56)),
    # above max_pixels (1280 x 28 x 28): beta 3.458, floor(41.3) and floor(30.98) blocks
    (4000, 3000, 28, 3136, 1003520, (1148, 840)),
    (224, 224, 32, 3136, 1_000_000, (224, 224)),
    (100, 60, 32, 3136, 1_000_000, (96, 64)),  # round(3.125), round(1.875)
])
def test_smart_resize(h, w, factor, lo, hi, expect):
    got = smart_resize(h, w, factor, lo, hi)
    assert got == expect and got[0] % factor == 0 and got[1] % factor == 0 and lo <= got[0] * got[1] <= hi


def test_smart_resize_refuses_an_aspect_ratio_above_200():
    with pytest.raises(ValueError):
        smart_resize(10, 2100, 28, 3136, 12845056)


@pytest.mark.parametrize("width, height, tokens", [
    (512, 512, 324),  # (504 / 14)^2 / 4
    (1920, 1080, 2691),  # (1932 / 14) x (1092 / 14) / 4 = 138 x 78 / 4
    (28, 28, 4),  # up to 56 x 56: 4 x 4 patches, one token per 2 x 2
    (3000, 10, -1),  # the processor refuses it
    (0, 10, -1),
])
def test_qwen2_vl_tokens(tmp_path, width, height, tokens):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(QWEN))
    rule = read_image_rule(tmp_path)
    assert rule == ImageTokenRule("qwen2-vl", 14, 2, 3136, 12845056)
    assert rule.tokens(width, height) == tokens


def test_qwen_sizes_may_come_as_shortest_and_longest_edge_and_patch_from_the_vision_config(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Qwen2VLImageProcessorFast", "merge_size": 2,
         "size": {"shortest_edge": 65536, "longest_edge": 16777216}}))
    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {"patch_size": 16}}))
    rule = read_image_rule(tmp_path)
    assert (rule.patch, rule.merge, rule.min_pixels, rule.max_pixels) == (16, 2, 65536, 16777216)
    assert rule.tokens(1024, 1024) == (1024 // 16) ** 2 // 4


@pytest.mark.parametrize("processor, config, tokens", [
    ({"patch_size": 14, "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1}, {}, 576),
    ({"patch_size": 14, "vision_feature_select_strategy": "full", "num_additional_image_tokens": 1}, {}, 577),
    ({}, {"model_type": "llava", "vision_feature_select_strategy": "default", "vision_config": {"patch_size": 14}},
     576),  # processor_config.json absent: config.json's; the CLS token counted by default, then dropped
    ({}, {"model_type": "llava", "vision_config": {"patch_size": 14}}, 577),
])
def test_llava_tokens_are_one_grid_whatever_the_image(tmp_path, processor, config, tokens):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "CLIPImageProcessor", "crop_size": {"height": 336, "width": 336},
         "size": {"shortest_edge": 336}, "do_center_crop": True}))
    if processor:
        (tmp_path / "processor_config.json").write_text(json.dumps(processor))
    if config:
        (tmp_path / "config.json").write_text(json.dumps(config))
    rule = read_image_rule(tmp_path)
    assert rule.family == "llava" and rule.tokens(1920, 1080) == rule.tokens(64, 64) == tokens


@pytest.mark.parametrize("pre, config", [
    ({"image_processor_type": "LlavaNextImageProcessor", "crop_size": 336}, {"model_type": "llava_next"}),
    ({"image_processor_type": "CLIPImageProcessor", "crop_size": 336}, {"model_type": "llava_next"}),  # anyres
    ({"image_processor_type": "SiglipImageProcessor", "size": {"height": 224, "width": 224}}, {}),
    ({"image_processor_type": "CLIPImageProcessor", "crop_size": 336}, {}),  # no patch size anywhere
    ({}, {}),
])
def test_other_processors_are_not_known(tmp_path, pre, config):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(pre))
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert read_image_rule(tmp_path) is None


def test_the_rule_is_read_beside_the_scenarios_tokenizer(tmp_path):
    assert image_token_rule(None, tmp_path) is None and image_token_rule("server", tmp_path) is None
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")  # only resolved, not loaded
    assert image_token_rule("model", tmp_path) is None  # no processor config: not known
    (model / "preprocessor_config.json").write_text(json.dumps(QWEN))
    assert image_token_rule("model", tmp_path).family == "qwen2-vl"
    assert image_token_rule(str(model / "tokenizer.json"), Path("/")).family == "qwen2-vl"
    (model / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="preprocessor_config.json: not readable JSON"):
        image_token_rule("model", tmp_path)
