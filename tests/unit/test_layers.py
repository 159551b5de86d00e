"""The package layout is the pipeline: imports point down the stages only, with no cycles, no imports hidden
in function bodies, and no private names imported across modules. Read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("loadgen", "reports", "reference_server")
#: loadgen's stages, lowest first: a module may import its own stage and the ones before it.
STAGES = ("version", "errors", "units", "metric_registry", "redact", "fetch", "telemetry", "scenario", "schedule",
          "records", "protocols", "transports", "engine", "analysis", "monitoring", "run", "cli")
#: what reports may import from loadgen: definitions and analysis, never what sends load
REPORTS_MAY_IMPORT = {"version", "errors", "units", "metric_registry", "redact", "telemetry", "scenario", "schedule",
                      "records", "analysis"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


MODULES = _modules()


def _imports(path: Path):
    """(imported module, names, line, at module level) for every import of a project module."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for cls in (n for n in tree.body if isinstance(n, ast.If | ast.Try)):  # `try: import x` at top level
        top |= {id(n) for n in ast.walk(cls)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names], node.lineno, id(node) in top
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno, id(node) in top


def _resolve(module: str, names: list[str]) -> list[str]:
    """The project modules an import statement loads (``from pkg import mod`` names a module)."""
    if module.split(".")[0] not in PACKAGES:
        return []
    found = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    return found or ([module] if module in MODULES else [])


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "loadgen" and len(parts) > 1 else None


def test_no_import_of_a_project_module_inside_a_function():
    hidden = [f"{MODULES[m].relative_to(ROOT)}:{line}: {imp}" for m in MODULES for imp, names, line, top in
              _imports(MODULES[m]) if not top and _resolve(imp, names)]
    assert not hidden, "imports inside functions hide cycles:\n" + "\n".join(hidden)


def test_loadgen_imports_point_down_the_stages():
    wrong = []
    for m, path in MODULES.items():
        st = _stage(m)
        if st is None:
            continue
        for imp, names, line, _ in _imports(path):
            for target in _resolve(imp, names):
                if target.split(".")[0] == "reports":
                    if st != "cli":
                        wrong.append(f"{path.relative_to(ROOT)}:{line}: {target} (only the CLI uses reports)")
                    continue
                if target.split(".")[0] == "reference_server":
                    if st != "cli":
                        wrong.append(f"{path.relative_to(ROOT)}:{line}: {target} (only the CLI starts it in-process)")
                    continue
                ts = _stage(target)
                if ts is not None and STAGES.index(ts) > STAGES.index(st):
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {st} imports {target} ({ts} comes after it)")
    assert not wrong, "\n".join(wrong)


def test_reports_never_import_what_sends_load_and_the_server_imports_nothing_of_ours():
    wrong = []
    for m, path in MODULES.items():
        pkg = m.split(".")[0]
        for imp, names, line, _ in _imports(path):
            for target in _resolve(imp, names):
                tp = target.split(".")[0]
                if pkg == "reports" and tp == "loadgen" and _stage(target) not in REPORTS_MAY_IMPORT:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {target}")
                if pkg == "reference_server" and tp != "reference_server":
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules():
    graph = {m: {t for imp, names, _, top in _imports(p) if top for t in _resolve(imp, names) if t != m}
             for m, p in MODULES.items()}
    # a package's __init__ importing its own submodules is how a package re-exports: not a cycle through it
    for m in graph:
        graph[m] = {t for t in graph[m] if not (t.startswith(m + ".") and MODULES[m].name == "__init__.py")}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_private_name_is_imported_across_modules():
    wrong = [f"{p.relative_to(ROOT)}:{line}: from {imp} import {n}" for m, p in MODULES.items()
             for imp, names, line, _ in _imports(p) if _resolve(imp, names) for n in names
             if n.startswith("_") and not n.startswith("__")]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("stage", STAGES[6:])
def test_every_stage_is_a_package(stage):
    assert (ROOT / "loadgen" / stage / "__init__.py").is_file()


def test_test_module_names_are_unique():
    """pytest imports test modules by basename (rootdir mode): two files of one name fail the whole collection."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_a_module_name_repeats_only_for_one_idea_at_several_stages():
    """Two modules of loadgen/reports share a file name only when they are one idea at several stages, and each says
    so: its docstring names every other module of that name (``:mod:`loadgen.analysis.host``...)."""
    by_name: dict[str, list[str]] = {}
    for m, path in MODULES.items():
        if m.split(".")[0] in ("loadgen", "reports") and path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(m)
    wrong = []
    for mods in (ms for ms in by_name.values() if len(ms) > 1):
        for m in mods:
            doc = ast.get_docstring(ast.parse(MODULES[m].read_text())) or ""
            wrong += [f"{MODULES[m].relative_to(ROOT)} does not name {o}" for o in mods if o != m and o not in doc]
    assert not wrong, "\n".join(wrong)
