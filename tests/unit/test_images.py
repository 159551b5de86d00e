"""workload.images: bad input is an error naming the file, the line and the field before anything is sent;
synthetic images are the seed's; each API gets the images as its own content parts, and the request's record
counts carry the images, pixels and bytes it sends."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from loadgen.errors import ScenarioError
from loadgen.protocols.workload import make_workload
from loadgen.scenario.images import ImageError, image_pool
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.media_model import Images
from tests.helpers import write_scenario
from tests.servers import KnownServer

ROOT = Path(__file__).resolve().parents[2]


def _scenario(images: str, api: str = "openai-chat") -> str:
    return f"""
name: img
target: {{url: "http://127.0.0.1:9/v1", model: m, api: {api}}}
workload:
  prompts: {{input_tokens: 8, output_tokens: 4, distinct: 6}}
  images: {images}
load:
  phases: [{{name: a, duration: 1s, qps: 1}}]
"""


def _errors(tmp_path: Path, images: str) -> list[str]:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write_scenario(tmp_path, _scenario(images)), env={})
    return [e.replace(f"{tmp_path}/", "") for e in exc.value.errors]


@pytest.mark.parametrize("images, where", [
    ("{width: 0}", "s.yaml:6:19: workload.images.width: expected a width in pixels from 1 to 8192, got 0"),
    ("{sizes: ['512x1000000']}", "s.yaml:6:20: workload.images.sizes[0]: expected each side from 1 to 8192"),
    ("{height: {mean: 1000000}}", "s.yaml:6:27: workload.images.height.mean: Input should be less than or equal"),
    ("{count: 65}", "s.yaml:6:19: workload.images.count: expected a number of images from 0 to 64, got 65"),
    ("{urls: ['file:///etc/passwd']}", "s.yaml:6:18: workload.images.urls: expected http:// or https:// URLs"),
    ("{folder: imgs, width: 64}", "s.yaml:6:11: workload.images: width, height, sizes, format, quality and"),
])
def test_a_bad_image_field_is_named_with_its_line(tmp_path, images, where):
    (tmp_path / "imgs").mkdir()
    assert any(e.startswith(where) for e in _errors(tmp_path, images)), _errors(tmp_path, images)


def test_a_folder_with_non_images_names_each_file(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "ok.png")
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    (tmp_path / "imgs" / "cut.png").write_bytes((tmp_path / "imgs" / "ok.png").read_bytes()[:40])
    errors = _errors(tmp_path, "{folder: imgs}")
    assert len(errors) == 2, errors
    assert errors[0].startswith("s.yaml:6:20: workload.images.folder: imgs/cut.png: ")
    assert errors[1] == ("s.yaml:6:20: workload.images.folder: imgs/notes.txt: not an image (no image format Pillow "
                         "reads recognises it)")
    assert "no such folder" in _errors(tmp_path, "{folder: nowhere}")[0]


def test_an_unreadable_image_of_a_lines_file_names_its_line_and_field(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    (tmp_path / "imgs.jsonl").write_text('{"image": "a.png"}\n{"images": ["a.png", "missing.png"]}\n{"image": 3}\n')
    errors = _errors(tmp_path, "{file: imgs.jsonl}")
    assert errors[0] == ("s.yaml:6:18: workload.images.file: imgs.jsonl:2: images[1]: missing.png: cannot read: No "
                         "such file or directory")
    assert errors[1].startswith("s.yaml:6:18: workload.images.file: imgs.jsonl:3: image: expected")


def test_nothing_is_sent_when_an_image_is_bad(tmp_path):
    srv = KnownServer(ttft=0.001, gap=0.001, tokens=2).start()
    try:
        (tmp_path / "imgs").mkdir()
        (tmp_path / "imgs" / "x.txt").write_text("text")
        path = write_scenario(tmp_path, _scenario("{folder: imgs}").replace("http://127.0.0.1:9/v1", srv.url))
        done = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", str(path), "--out", str(tmp_path / "r")],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 2 and "workload.images.folder" in done.stderr + done.stdout
        assert srv.requests == 0 and not (tmp_path / "r").exists()
    finally:
        srv.stop()


def test_synthetic_images_are_the_seeds_and_quality_sets_their_bytes(tmp_path):
    spec = Images(sizes=["64x48", "32x32"], distinct=3)
    a, _ = image_pool(spec, tmp_path, 1)
    assert [(i.width, i.height) for i in a] == [(64, 48), (32, 32), (64, 48)]
    assert [i.sha256 for i in a] == [i.sha256 for i in image_pool(spec, tmp_path, 1)[0]]
    assert a[0].sha256 != image_pool(spec, tmp_path, 2)[0][0].sha256
    low, high = (image_pool(Images(width=256, height=256, distinct=1, quality=q), tmp_path, 1)[0][0]
                 for q in (10, 95))
    assert low.nbytes < high.nbytes / 2 and low.url.startswith("data:image/jpeg;base64,")
    with pytest.raises(ImageError):
        image_pool(Images(folder="nowhere"), tmp_path, 1)


@pytest.mark.parametrize("api", ["openai-chat", "openai-responses", "anthropic-messages"])
def test_each_api_gets_the_images_after_the_text_and_the_record_counts_them(tmp_path, api):
    path = write_scenario(tmp_path, _scenario("{count: 2, sizes: ['16x8'], distinct: 3, format: png}", api))
    sc = load_scenario(path, env={}).scenario
    protocol, prompts = make_workload(sc.target_list()[0], sc.workload, "m", None, 0, tmp_path)
    req = protocol.build(1, prompts.get(1))
    (msg,) = json.loads(req.body)["input" if api == "openai-responses" else "messages"]
    text, *images = msg["content"]
    assert len(images) == 2 and text["text"] == prompts.get(1).text
    pool, _ = image_pool(sc.workload.images, tmp_path, 0)
    urls = [pool[(2 + k) % 3].url for k in range(2)]  # prompt 1 takes the pool's next two, in turn
    if api == "openai-chat":
        assert [p["image_url"]["url"] for p in images] == urls
    elif api == "openai-responses":
        assert [p["image_url"] for p in images] == urls and text["type"] == "input_text"
    else:
        assert [("data:image/png;base64," + p["source"]["data"]) for p in images] == urls
    c = req.counts
    assert (c.images, c.image_pixels, c.image_bytes) == (2, 2 * 16 * 8, pool[2].nbytes + pool[0].nbytes)
