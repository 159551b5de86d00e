"""Reference server, torch backend: skipped cleanly when torch is not installed (it is an optional extra)."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest

torch = pytest.importorskip("torch", exc_type=ImportError)  # absent or broken torch: skip

from reference_server.background import BackgroundServer  # noqa: E402
from reference_server.config import ServerConfig  # noqa: E402
from reference_server.models.modelspec import get_spec  # noqa: E402
from reference_server.models.numpy_model import NumpyModel  # noqa: E402
from reference_server.models.torch_model import TorchModel  # noqa: E402
from reference_server.models.weights import ensure_weights_file, read_weights_file  # noqa: E402


@pytest.fixture(scope="module")
def tiny_weights(weights_dir):
    return read_weights_file(ensure_weights_file(get_spec("tiny"), 0, weights_dir))


def test_torch_matches_numpy_in_fp32(tiny_weights):
    spec = get_spec("tiny")
    ref, tm = NumpyModel(spec, tiny_weights), TorchModel(spec, tiny_weights, "fp32", "cpu", 1)
    prompts = [list(b"same maths"), list(b"on both backends!")]
    rc, tc = [ref.new_cache(32) for _ in prompts], [tm.new_cache(32) for _ in prompts]
    for p, a, b in zip(prompts, rc, tc):
        np.testing.assert_allclose(ref.prefill(p, a), tm.prefill(p, b), rtol=1e-3, atol=1e-3)
    for step in range(3):
        np.testing.assert_allclose(ref.decode([70 + step] * 2, rc), tm.decode([70 + step] * 2, tc),
                                   rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_torch_low_precisions_run(tiny_weights, precision):
    spec = get_spec("tiny")
    ref = NumpyModel(spec, tiny_weights)
    tm = TorchModel(spec, tiny_weights, precision, "cpu", 1)
    out = tm.prefill(list(b"quantized"), tm.new_cache(16))
    assert np.corrcoef(out, ref.prefill(list(b"quantized"), ref.new_cache(16)))[0, 1] > 0.95
    cache = tm.new_cache(20)
    tm.prefill(list(b"q"), cache)
    assert tm.decode([65], [cache]).shape == (1, 256)


def test_server_on_torch_backend(weights_dir):
    config = ServerConfig.from_preset("optimized", model="tiny", backend="torch", cache_dir=weights_dir,
                                      max_batch_size=4)
    with BackgroundServer(config) as srv:
        assert srv.resolved["backend"] == "torch:cpu"
        body = json.dumps({"model": "tiny", "prompt": "torch", "max_tokens": 5}).encode()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(srv.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(srv.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers["x-backend"] == "torch:cpu"
            assert len(json.loads(r.read())["choices"][0]["text"]) == 5
