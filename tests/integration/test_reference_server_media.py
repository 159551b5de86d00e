"""Reference server, images: image parts become prompt tokens (one per 2x2 patches of 16 pixels), counted in usage;
the image cache serves a repeated image by its content hash (its metric says so); bad image parts are a 400 that
names the part. A real server on port 0, the tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.scenario.images import data_url, synthetic_image
from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig
from reference_server.models.tokenizer import render_chat
from reference_server.models.vision import patches_of
from tests.integration.test_reference_server import http, post_json


@pytest.fixture(scope="module")
def server(weights_dir):
    cfg = ServerConfig.from_preset("naive", model="tiny", backend="numpy", cache_dir=weights_dir, preload=True,
                                   image_cache_size=8)
    with BackgroundServer(cfg) as srv:
        yield srv


def _image(seed: int, w: int, h: int) -> str:
    return data_url(synthetic_image(np.random.default_rng(seed), w, h, "png"), "image/png")


def _chat(url: str, text: str, *images: str, **kw):
    parts = [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in images]
    body = {"model": "tiny", "messages": [{"role": "user", "content": parts}], "max_tokens": 4, "temperature": 0,
            **kw}
    return post_json(url + "/v1/chat/completions", body)


def _metric(url: str, name: str) -> float:
    _, _, text = http("GET", url + "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_an_image_is_prompt_tokens_and_the_cache_serves_it_again(server):
    url = server.url
    text_only = len(render_chat([{"role": "user", "content": "what is this?"}]).encode())
    img = _image(1, 100, 60)  # 7 x 4 patches of 16 px -> 4 x 2 merged tokens
    hits0 = _metric(url, "refserver:image_cache_hits_total")
    status, _, body = _chat(url, "what is this?", img)
    assert status == 200, body
    first = json.loads(body)
    assert first["usage"]["prompt_tokens"] == text_only + patches_of(100, 60, 16, 2) == text_only + 8
    status, _, body = _chat(url, "what is this?", img)  # the same image: its tokens from the cache
    assert json.loads(body)["choices"][0]["message"] == first["choices"][0]["message"]  # the same prompt tokens
    assert _metric(url, "refserver:image_cache_hits_total") == hits0 + 1
    # each answer's usage says how many of its images the cache held (what latbench records per request)
    assert json.loads(body)["usage"]["prompt_tokens_details"] == {"media_cache_hits": 1}
    assert first["usage"]["prompt_tokens_details"] == {"media_cache_hits": 0}
    status, _, body = _chat(url, "what is this?", _image(2, 100, 60), _image(3, 320, 320))
    usage = json.loads(body)["usage"]
    assert usage["prompt_tokens"] == text_only + 8 + patches_of(320, 320, 16, 2)
    assert _metric(url, "refserver:image_cache_hits_total") == hits0 + 1  # two new images: no hit
    assert usage["prompt_tokens_details"] == {"media_cache_hits": 0}
    status, _, body = _chat(url, "no image")
    assert "prompt_tokens_details" not in json.loads(body)["usage"]  # said only for a request with media


@pytest.mark.parametrize("url, why", [
    ("https://example.com/cat.png", "does not fetch image URLs"),
    ("data:image/png;base64,%%%", "not valid base64"),
    ("data:image/png;base64,aGVsbG8=", "not an image"),
    ("data:text/plain;base64,aGVsbG8=", "data:image/"),
])
def test_a_bad_image_part_is_a_400_naming_it(server, url, why):
    status, _, body = _chat(server.url, "hi", url)
    err = json.loads(body)["error"]
    assert status == 400 and why in err["message"] and err["param"] == "messages[0].content[1]", body
