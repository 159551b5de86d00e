"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing anchor or a page left out
of the nav (mkdocs.yml's ``validation:``) fails the suite, as it would fail the site's build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadgen.cli import reference
from loadgen.scenario import model as scenario_model

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about a future MkDocs, not about our pages
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").read_text().count("latbench") > 1


def test_the_reference_pages_are_the_code_s(tmp_path):
    """Each committed page of docs/reference is what the generator writes now, so a scenario field, a metric, an
    option or a result key added without regenerating fails here."""
    written = reference.write(tmp_path)
    assert {p.name for p in written} == {p.name for p in (ROOT / "docs" / "reference").glob("*.md")}
    for page in written:
        committed = (ROOT / "docs" / "reference" / page.name).read_text(encoding="utf-8")
        assert committed == page.read_text(encoding="utf-8"), (
            f"docs/reference/{page.name} is stale: run latbench docs --generate docs/reference")


def test_a_new_scenario_field_makes_the_page_stale(monkeypatch):
    """The check above can fail: a field added to a model changes the generated scenario page."""
    before = reference.scenario_page()
    schema = reference._schema()
    schema["$defs"]["Phase"]["properties"]["colour"] = {"type": "string", "description": "a test-only field"}
    monkeypatch.setattr(reference, "_schema", lambda: schema)
    monkeypatch.setattr(scenario_model.Phase, "model_fields", {**scenario_model.Phase.model_fields,
                                                                 "colour": scenario_model.Phase.model_fields["name"]})
    after = reference.scenario_page()
    assert after != before and "| `colour` | string |" in after


def test_the_docs_command_writes_the_pages(tmp_path):
    out = subprocess.run([sys.executable, "-m", "loadgen.cli", "docs", "--generate", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(reference.pages())
    assert "latbench_latency_seconds" in (tmp_path / "prometheus.md").read_text()
    bad = subprocess.run([sys.executable, "-m", "loadgen.cli", "docs"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "give one of --generate DIR or --serve" in bad.stderr
