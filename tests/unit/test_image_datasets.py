"""workload.images from a Hugging Face dataset (the ``datasets`` extra, local files only): each row's image goes
as its stored file bytes, in row order; a missing column, a column that holds no images, or a row that is not an
image is an error naming the scenario's file, line and field before anything is sent."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from loadgen.errors import ScenarioError
from loadgen.protocols.workload import make_workload
from loadgen.scenario.loader import load_scenario
from tests.helpers import write_scenario

datasets = pytest.importorskip("datasets")  # the optional extra: pip install 'latbench[datasets]'


def _png(w: int, h: int, colour: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (colour, 0, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _scenario(images: str) -> str:
    return f"""
name: img
target: {{url: "http://127.0.0.1:9/v1", model: m, api: openai-chat}}
workload:
  prompts: {{input_tokens: 8, output_tokens: 4, distinct: 4}}
  images: {images}
load:
  phases: [{{name: a, duration: 1s, qps: 1}}]
"""


def _errors(tmp_path: Path, images: str) -> list[str]:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write_scenario(tmp_path, _scenario(images)), env={})
    return [e.replace(f"{tmp_path}/", "") for e in exc.value.errors]


@pytest.fixture
def pngs() -> list[bytes]:
    return [_png(16, 8, 10), _png(24, 12, 200), _png(8, 8, 90)]


def _saved(tmp_path: Path, pngs: list[bytes]) -> None:
    """A dataset folder written by save_to_disk: an Image column, a text column and a bytes column."""
    ds = datasets.Dataset.from_dict({"picture": [Image.open(io.BytesIO(p)) for p in pngs],
                                     "caption": ["a", "b", "c"], "raw": pngs})
    ds = ds.cast_column("picture", datasets.Image())
    ds.save_to_disk(str(tmp_path / "imgs"))


def _sent(tmp_path: Path, images: str) -> list[str]:
    sc = load_scenario(write_scenario(tmp_path, _scenario(images)), env={}).scenario
    protocol, prompts = make_workload(sc.target_list()[0], sc.workload, "m", None, 0, tmp_path)
    urls = []
    for seq in range(3):
        (msg,) = json.loads(protocol.build(seq, prompts.get(seq)).body)["messages"]
        urls += [p["image_url"]["url"] for p in msg["content"] if p["type"] == "image_url"]
    return urls


def test_a_saved_datasets_images_are_sent_in_row_order_as_stored(tmp_path, pngs):
    _saved(tmp_path, pngs)
    for column in ("picture", "raw"):  # an Image feature, and plain file bytes
        sc = load_scenario(write_scenario(tmp_path, _scenario(f"{{hf: imgs, column: {column}}}")), env={}).scenario
        protocol, prompts = make_workload(sc.target_list()[0], sc.workload, "m", None, 0, tmp_path)
        reqs = [protocol.build(seq, prompts.get(seq)) for seq in range(3)]
        assert [(r.counts.images, r.counts.image_pixels, r.counts.image_bytes) for r in reqs] == [
            (1, 16 * 8, len(pngs[0])), (1, 24 * 12, len(pngs[1])), (1, 8 * 8, len(pngs[2]))]
    sent = _sent(tmp_path, "{hf: imgs, column: picture}")
    import base64
    assert [hashlib.sha256(base64.b64decode(u.partition(",")[2])).hexdigest() for u in sent] == [
        hashlib.sha256(p).hexdigest() for p in pngs]


def test_a_parquet_file_of_images_is_read_too(tmp_path, pngs):
    ds = datasets.Dataset.from_dict({"image": [Image.open(io.BytesIO(p)) for p in pngs]})
    ds.cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "imgs.parquet"))
    assert len(_sent(tmp_path, "{hf: imgs.parquet}")) == 3  # column: image by default


def test_a_missing_or_wrong_column_is_named_with_its_line(tmp_path, pngs):
    _saved(tmp_path, pngs)
    (err,) = _errors(tmp_path, "{hf: imgs, column: photo}")
    assert err.startswith("s.yaml:6:16: workload.images.hf: imgs: column: no column 'photo' in split 'train' "
                          "(its columns: picture, caption, raw)"), err
    (err,) = _errors(tmp_path, "{hf: imgs, column: caption}")
    assert err.startswith("s.yaml:6:16: workload.images.hf: imgs: column: 'caption' holds string, not images"), err
    (err,) = _errors(tmp_path, "{hf: nowhere}")
    assert err.startswith("s.yaml:6:16: workload.images.hf: nowhere: cannot load the Hugging Face dataset"), err
    assert _errors(tmp_path, "{folder: x, hf: imgs}")[0].startswith(
        "s.yaml:6:11: workload.images: expected at most one image source (folder, file, urls or hf), got folder, hf")
    assert "split and column: only with hf" in _errors(tmp_path, "{column: picture}")[0]


def test_a_row_that_is_not_an_image_is_named(tmp_path, pngs):
    datasets.Dataset.from_dict({"raw": [pngs[0], b"not an image", pngs[2]]}).save_to_disk(str(tmp_path / "imgs"))
    (err,) = _errors(tmp_path, "{hf: imgs, column: raw}")
    assert err == ("s.yaml:6:16: workload.images.hf: imgs[train] row 1: raw: not an image (no image format Pillow "
                   "reads recognises it)"), err
