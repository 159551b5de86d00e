"""The benchmark scripts are not run by the suite (they take minutes and peers' installs), so a module moved
in the package breaks them silently: every project name they import, at top level or inside a function, must
resolve. Read from the source with ``ast``; the project modules are imported, the scripts are not run."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("loadgen", "reports", "reference_server", "benchmarks")
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))


def _project_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS:
                    yield node.lineno, a.name, []


def _resolves(module: str, name: str | None) -> bool:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    if name is None or hasattr(mod, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ImportError:
        return False


def test_the_benchmarks_are_found():
    assert {"memory.py", "streaming.py", "real_engines.py"} <= {p.name for p in SCRIPTS}
    assert any(module == "loadgen.engine.scrape" for _, module, _ in _project_imports(ROOT / "benchmarks" /
                                                                                      "real_engines.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_project_name_a_benchmark_imports_exists(script):
    missing = [f"{script.name}:{line}: {module}{'.' + name if name else ''}"
               for line, module, names in _project_imports(script)
               for name in (names or [None]) if not _resolves(module, name)]
    assert not missing, "benchmark imports that no longer resolve:\n" + "\n".join(missing)
