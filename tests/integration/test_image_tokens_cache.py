"""A run with images against the reference server, its tokenizer a local model folder with a Qwen2-VL style
``preprocessor_config.json`` (patch 16, merge 2: the reference server's own grid, so latbench's count must equal
the image tokens in the server's usage): each record keeps latbench's count of its images' tokens and how many of
its images the server's image cache held; the summary's by-size rows carry both token counts, each phase its
cache hit rate, and the report says them."""

from __future__ import annotations

import json
import shutil

from reports import write_outputs
from tests.helpers import run

SIZES = {224 * 224: 49, 448 * 448: 196}  # (side / 16 / 2)^2: smart_resize keeps a multiple of 32 as it is


def _scenario(model, cache: int) -> str:
    return f"""
name: tokens
target:
  reference: {{arch: naive, model: tiny, options: {{preload: true, image_cache_size: {cache}, tokenizer: {model}}}}}
  api: openai-chat
  stream: true
workload:
  tokenizer: {model}
  prompts: {{input_tokens: 8, output_tokens: 2, distinct: 40}}
  images: {{count: 1, sizes: ["224x224", "448x448"], format: png, distinct: 4}}
load:
  arrival: constant
  grace: 60s
  host_wait_limit: 1  # the numbers asserted are counts, not times: a busy host does not bend them
  send_lag_threshold: 1s
  phases:
    - {{name: first, duration: 1s, qps: 4}}
    - {{name: again, duration: 2s, qps: 4}}
"""


def test_image_tokens_and_cache_hits_are_recorded_per_request_and_phase(tmp_path, bpe_dir):
    model = tmp_path / "model"
    shutil.copytree(bpe_dir, model)
    (model / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "merge_size": 2, "min_pixels": 3136,
         "max_pixels": 1_000_000}))
    res, s, df = run(tmp_path / "on", _scenario(model, 64))
    assert res.exit_code == 0, res.reasons
    df = df.sort_values("seq")
    assert (df["error"] == "").all() and (df["images"] == 1).all()
    assert list(df["image_tokens_est"]) == [SIZES[p] for p in df["image_pixels"]]
    # the server's usage counts the images as latbench does: prompt = text and template + image tokens
    assert (df["prompt_tokens_source"] == "usage").all()
    assert (df["prompt_tokens"] == df["input_tokens"] + df["added_tokens"] + df["image_tokens_est"]).all()
    # 4 distinct images sent in turn, one request at a time: the first 4 miss, every later one hits
    assert list(df["media_cache_hits"]) == [0] * 4 + [1] * (len(df) - 4)
    rows = {r["image_pixels"]: r for r in s["overall"]["images"]["by_size"]}
    for pixels, tokens in SIZES.items():
        assert rows[pixels]["image_tokens_est_mean"] == tokens
        assert rows[pixels]["prompt_tokens_mean"] == df.loc[df["image_pixels"] == pixels, "prompt_tokens"].mean()
    assert s["phases"]["first"]["media_cache"] == {"requests": 4, "media": 4, "hits": 0, "hit_rate": 0.0}
    again = s["phases"]["again"]["media_cache"]
    assert again["hits"] == again["media"] == len(df) - 4 and again["hit_rate"] == 1.0
    write_outputs(res.rundir.path)
    html = (res.rundir.path / "report.html").read_text()
    assert "overall/images/by_size/0/image_tokens_est_mean" in html
    assert "overall/images/by_size/0/prompt_tokens_mean" in html
    assert "Encoder cache hit rate" in html and "first 0.00% (0 of 4)" in html and "again 100.00%" in html
    md = (res.rundir.path / "summary.md").read_text()  # the CI comment says it too
    assert "**Images and audio:**" in md and "first 0.00% (0 of 4)" in md and "again 100.00%" in md

    res, s, df = run(tmp_path / "off", _scenario(model, 0))
    assert res.exit_code == 0, res.reasons
    assert (df["media_cache_hits"] == 0).all() and s["overall"]["media_cache"]["hit_rate"] == 0.0
