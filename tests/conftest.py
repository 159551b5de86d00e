import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.scenario.sample_data import train_sample_tokenizer

ROOT = Path(__file__).resolve().parent.parent


class ServerProcess:
    """A tests.servers.KnownServer in a subprocess, on 127.0.0.1 and a free port."""

    def __init__(self, module: str = "tests.servers", **kw):
        argv = [sys.executable, "-m", module]
        for k, v in kw.items():
            argv += ["--" + k.replace("_", "-"), str(v)]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT="), line
        self.port = int(line.split("=")[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def known_server():
    started = []

    def start(**kw):
        s = ServerProcess(**kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def api_server():
    """tests.api_servers.ApiServer (Anthropic, Responses, rerank, KServe v2, Triton) in a subprocess."""
    started = []

    def start(**kw):
        s = ServerProcess("tests.api_servers", **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(autouse=True)
def _weights_cache(tmp_path_factory, monkeypatch):
    """Reference-server weights go to one temp folder per test session, never to the home folder."""
    cache = tmp_path_factory.getbasetemp() / "weights-cache"
    monkeypatch.setenv("LATBENCH_CACHE_DIR", str(cache))


@pytest.fixture(scope="session")
def weights_dir(tmp_path_factory):
    """The reference server's weights folder of this test session (the one _weights_cache points it to)."""
    return str(tmp_path_factory.getbasetemp() / "weights-cache")


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory):
    """A model folder with a small byte-level BPE tokenizer trained offline (BOS on plain prompts, a chat
    template with header tokens), shared by the session: see loadgen.scenario.sample_data.train_sample_tokenizer."""
    return train_sample_tokenizer(tmp_path_factory.mktemp("bpe"))
