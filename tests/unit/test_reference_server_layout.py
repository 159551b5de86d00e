"""reference_server is three parts with imports pointing down: the front ends (``api``) use the serving engine
(``serving``), which runs the model backends (``models``); the top-level modules (config, the lifecycle, the
CLI) wire them. Read from the source with ``ast``, relative imports resolved."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "reference_server"
#: each part may import itself, the ones after it in this list, and ``config`` (the top level's shared settings)
PARTS = ("api", "serving", "models")


def _part_imports():
    """(file, line, importing part, imported module path) for every import of a reference_server module."""
    for f in ROOT.rglob("*.py"):
        rel = f.relative_to(ROOT).with_suffix("").parts
        here = list(rel[:-1])  # the package the file is in, below reference_server
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    parts = (node.module or "").split(".")
                    if parts[0] != "reference_server":
                        continue
                    target = parts[1:]
                else:
                    base = here[: len(here) - (node.level - 1)]
                    target = base + (node.module.split(".") if node.module else [node.names[0].name])
                yield f.relative_to(ROOT), node.lineno, (here[0] if here else None), target


def test_the_three_parts_exist_and_hold_what_they_say():
    for part, modules in {"api": ("http_app", "openai_routes", "kserve", "kserve_http", "kserve_grpc"),
                          "serving": ("scheduler", "result_cache", "prefix_cache", "faults", "metrics"),
                          "models": ("backends", "numpy_model", "torch_model", "positions", "weights")}.items():
        for m in modules:
            assert (ROOT / part / f"{m}.py").is_file(), f"{part}/{m}.py"
    assert (ROOT / "api" / "grpc_predict_v2.desc").is_file()
    assert not [f.name for f in ROOT.glob("*.py")
                if f.stem not in ("__init__", "__main__", "config", "server", "background")], "a flat module is back"


def test_imports_point_down_from_api_to_serving_to_models():
    wrong = []
    for path, line, part, target in _part_imports():
        if part is None or not target:
            continue
        tpart = target[0]
        if tpart == "config":
            continue
        if tpart not in PARTS:
            wrong.append(f"{path}:{line}: {part} imports the top level's {'.'.join(target)}")
        elif PARTS.index(tpart) < PARTS.index(part):
            wrong.append(f"{path}:{line}: {part} imports {'.'.join(target)} ({tpart} is above it)")
    assert not wrong, "\n".join(wrong)


def test_the_backends_share_helpers_without_importing_each_other():
    for a, b in (("torch_model", "numpy_model"), ("numpy_model", "torch_model")):
        targets = [t for p, _, _, t in _part_imports() if p == Path("models", f"{a}.py")]
        assert ["models", b] not in targets, f"{a} imports {b}"
        assert ["models", "positions"] in targets, f"{a} does not take the shared helpers from models/positions.py"
