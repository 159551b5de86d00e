"""#31's bad input, through ``latbench validate`` on small scenario files: an unreadable image file, an image folder
holding non-images, a tool definition that is not a JSON schema, an image dimension of 0 or 10^6 (asked for, or
an image file's own) are each one error naming the scenario's file, line and field (and the image file and line
at fault), exit 2, and nothing is sent to the target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image

from tests.servers import KnownServer

ROOT = Path(__file__).resolve().parents[2]

BAD = {
    "folder.yaml": "images: {folder: imgs}",
    "lines.yaml": "images: {file: lines.jsonl}",
    "sides.yaml": "images: {width: 0, height: 1000000}",
    "sizes.yaml": "images: {sizes: ['1000000x512']}",
    "schema.yaml": "tools: [{type: function, function: {name: f, parameters: {type: objekt}}}]",
    "object.yaml": "tools: [{type: function, function: {name: f, parameters: {type: string}}}]",
    # the image processor's config beside the tokenizer, read for latbench's own image-token count
    "processor.yaml": "tokenizer: model\n  images: {count: 1, width: 32, height: 32}",
}
EXPECTED = [
    "folder.yaml:5:20: workload.images.folder: imgs/readme.txt: not an image (no image format Pillow reads "
    "recognises it)",
    "folder.yaml:5:20: workload.images.folder: imgs/wide.png: 1000000x1 pixels: each side must be from 1 to 32768",
    "lines.yaml:5:18: workload.images.file: lines.jsonl:1: image: dir.png: cannot read: Is a directory",
    "lines.yaml:5:18: workload.images.file: lines.jsonl:2: image: gone.png: cannot read: No such file or directory",
    "sides.yaml:5:19: workload.images.width: expected a width in pixels from 1 to 8192, got 0",
    "sides.yaml:5:30: workload.images.height: expected a height in pixels from 1 to 8192, got 1000000",
    "sizes.yaml:5:20: workload.images.sizes[0]: expected each side from 1 to 8192 pixels, got 1000000x512",
    "schema.yaml:5:60: workload.tools.definitions[0].function.parameters: not a JSON Schema: type: 'objekt' is not "
    "a JSON Schema type (object, array, string, number, integer, boolean, null)",
    "object.yaml:5:60: workload.tools.definitions[0].function.parameters: a tool's parameters are an object schema "
    "(type: object), got type 'string'",
    "processor.yaml:5:14: workload.tokenizer: model/preprocessor_config.json: not readable JSON: Expecting property "
    "name enclosed in double quotes: line 1 column 2 (char 1)",
]


def test_latbench_validate_names_each_bad_media_input_and_sends_nothing(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "ok.png")
    Image.new("L", (1_000_000, 1)).save(tmp_path / "imgs" / "wide.png")  # a few kB: one row of a million pixels
    (tmp_path / "imgs" / "readme.txt").write_text("not an image")
    (tmp_path / "dir.png").mkdir()  # a path that cannot be read as a file
    (tmp_path / "lines.jsonl").write_text('{"image": "dir.png"}\n{"image": "gone.png"}\n')
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tokenizer.json").write_text("{}")  # resolved, not loaded, by validate
    (tmp_path / "model" / "preprocessor_config.json").write_text("{not json")
    srv = KnownServer(ttft=0.001, gap=0.001, tokens=2).start()
    try:
        for name, spec in BAD.items():
            (tmp_path / name).write_text(f"""name: bad
target: {{url: "{srv.url}", model: m, api: openai-chat}}
workload:
  prompts: {{input_tokens: 8, output_tokens: 4}}
  {spec}
load:
  phases: [{{name: a, duration: 1s, qps: 1}}]
""")
        done = subprocess.run([sys.executable, "-m", "loadgen.cli", "validate", *BAD], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)
        assert done.returncode == 2, done.stdout + done.stderr
        assert sorted(done.stderr.strip().splitlines()) == sorted(EXPECTED), done.stderr
        assert srv.requests == 0
    finally:
        srv.stop()
