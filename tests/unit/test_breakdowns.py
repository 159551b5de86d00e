"""The report's breakdowns by image size and tools offered, and the structured-output sentence, read from a summary's
typed blocks; a run without images, tools or a response_format has none of them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.analysis.features import image_block, media_cache_block, structured_block, tool_call_block
from loadgen.records.results import Summary
from reports.breakdowns import image_rows, media_cache_note, structured_note, tool_note, tool_rows


def _frame() -> pd.DataFrame:
    n = 6
    return pd.DataFrame({
        "images": [1] * n, "image_pixels": [224 * 224, 448 * 448] * 3, "image_bytes": [9000, 30000] * 3,
        "ttft": [0.1, 0.3] * 3, "latency": [0.2, 0.4] * 3, "tools": [4] * n, "tool_calls": [1, 1, 1, 1, 0, 0],
        "tool_call_tokens": [9, 9, 9, 9, 0, 0], "ttftc": [0.1, 0.3, 0.1, 0.3, np.nan, np.nan],
        "json_valid": [1, 1, 1, 0, -1, -1], "schema_valid": [1, 0, -1, 0, -1, -1]})


def test_the_blocks_and_the_report_rows_agree():
    df = _frame()
    overall = {"images": image_block(df, df), "tool_calls": tool_call_block(df, df), "structured": structured_block(df)}
    assert overall["tool_calls"]["tool_call_rate"] == 4 / 6 and overall["tool_calls"]["argument_tokens"] == 36
    assert overall["structured"] == {"checked": 4, "json_valid": 3, "json_valid_rate": 0.75, "schema_checked": 3,
                                     "schema_valid": 1, "schema_valid_rate": 1 / 3}
    s = Summary.model_validate({"overall": overall})
    rows = image_rows(s, "t")
    assert [r["label"] for r in rows] == ["50,176 px (~224x224)", "200,704 px (~448x448)"]
    assert [r["cells"][1].src for r in rows] == [f"overall/images/by_size/{i}/ttft/percentiles/p50/value"
                                                  for i in range(2)]
    (tools,) = tool_rows(s, "t")
    assert tools["label"] == "4 tools" and tools["cells"][0].src == "overall/tool_calls/by_tools/0/n"
    assert "4 of 6 successful requests offered tools called one (tool_call_rate 66.7%)" in tool_note(s)
    assert "3 of 4 answers parsed as JSON (75.0%), 1 of 3 matched the schema" in structured_note(s)


def test_a_plain_run_has_no_breakdowns():
    df = _frame().assign(images=0, tools=0, json_valid=-1)
    assert image_block(df, df) is None and tool_call_block(df, df) is None and structured_block(df) is None
    s = Summary.model_validate({"overall": {}})
    assert image_rows(s, "t") == [] and tool_rows(s, "t") == [] and not tool_note(s) and not structured_note(s)


def test_the_token_counts_by_size_and_the_cache_hit_rate_per_phase():
    df = _frame().assign(audio=[0, 0, 0, 0, 1, 0], media_cache_hits=[0, 0, 1, 1, 2, -1],
                         prompt_tokens=[60, 210, 60, 210, 61, 211], image_tokens_est=[49, 196] * 3,
                         prompt_tokens_source=["usage"] * 5 + ["tokenizer"])
    images, cache = image_block(df, df), media_cache_block(df)
    small, large = images["by_size"]
    assert (small["prompt_tokens_mean"], small["image_tokens_est_mean"]) == ((60 + 60 + 61) / 3, 49)
    assert (large["prompt_tokens_mean"], large["image_tokens_est_mean"]) == (210, 196)  # the usage's only
    assert cache == {"requests": 5, "media": 6, "hits": 4, "hit_rate": 4 / 6}  # the last said nothing
    unknown = image_block(df.assign(image_tokens_est=[49, -1] * 3), df.assign(image_tokens_est=[49, -1] * 3))
    assert unknown["by_size"][1].get("image_tokens_est_mean") is None
    assert media_cache_block(df.assign(media_cache_hits=-1)) is None
    s = Summary.model_validate({"overall": {"images": images, "media_cache": cache},
                                "phases": {"cold": {"media_cache": {"requests": 2, "media": 2, "hits": 0,
                                                                    "hit_rate": 0.0}}, "warm": {}}})
    (row, _) = image_rows(s, "t")
    assert [c.src for c in row["cells"][-2:]] == ["overall/images/by_size/0/prompt_tokens_mean",
                                                  "overall/images/by_size/0/image_tokens_est_mean"]
    assert media_cache_note(s) == ("Encoder cache hit rate (images and audio clips the server's image cache held, "
                                   "from its usage): overall 66.67% (4 of 6); cold 0.00% (0 of 2).")
    assert media_cache_note(Summary.model_validate({"overall": {}})) == ""
