"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing anchor or a page left out
of the nav (mkdocs.yml's ``validation:``) fails the suite, as it would fail the site's build."""

from __future__ import annotations

import os
import re
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


def test_every_scenario_field_has_a_description_and_an_example():
    """A field added to the scenario models needs a description= (and an example: examples=, a bundled scenario
    that gives it, or an "e.g." in its description) before its reference row is complete."""
    rows = [r.split(" | ") for r in reference.scenario_page().splitlines() if r.startswith("| `")]
    assert len(rows) > 100
    bare = [r[0] for r in rows if not r[4].strip() or not r[5].strip(" |")]
    assert bare == [], f"scenario fields without a description or an example: {bare}"


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


# -- the README: short, its set-up first, every link into the docs alive ----------------------------------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")
#: pages the how-to and explanation part of the docs brings (agreed by file name): while one is absent from this
#: checkout its link is not checked; once it is here, it is, anchors included
PENDING = {f"docs/how-to/{n}.md" for n in (
    "datasets-tokenizers", "shared-prefixes", "conversations", "trace-replay", "repeated-runs", "distributed-locust",
    "watch-prometheus", "cold-starts", "compare-architectures", "grpc-kserve", "anthropic-responses")} | {
    f"docs/explanation/{n}.md" for n in ("numbers", "statistics", "validity", "reference-server", "design")}


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def _anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page as MkDocs makes them: an explicit {#id}, else the heading's slug."""
    out = set()
    for line in _prose(page.read_text(encoding="utf-8")):
        m = re.match(r"#+ (.*?)(?: \{#([\w.-]+)\})?$", line)
        if m:
            out.add(m.group(2) or re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", m.group(1)).strip().lower()))
    return out


def test_the_readme_is_short_and_its_prose_lines_fit():
    lines = README.splitlines()
    assert len(lines) <= 250
    assert [ln for ln in _prose(README) if len(ln) > 120] == []


def test_the_set_up_commands_come_first_and_ci_runs_them():
    blocks = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    assert blocks[:2] == ["python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && "
                          "latbench run scenarios/burst.yaml", "python -m pytest -q"]
    assert README.index("## Set up and run") < README.index("## A five-minute tour")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test]'" in ci and ci.rstrip().endswith("python -m pytest -q")


def test_every_readme_link_into_the_repo_resolves():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [x for x in links if not re.match(r"\w+://", x)]
    assert len(local) > 30
    for link in local:
        path, _, anchor = link.partition("#")
        if path in PENDING and not (ROOT / path).exists():
            continue
        assert (ROOT / path).exists(), f"README links {link}: no such file"
        if anchor:
            assert anchor in _anchors(ROOT / path), f"README links {link}: no such anchor"


def test_the_readme_answers_the_first_questions_by_page_and_anchor():
    for target in ("docs/tutorials/real-vllm.md#point-latbench-at-vllm",
                   "docs/tutorials/ci-gate.md#fail-on-a-p99-regression", "docs/reference/metrics.md#ttft",
                   "docs/reference/exit-codes.md#verdict-kinds",
                   "docs/tutorials/first-run.md#how-long-the-set-up-takes"):
        assert f"]({target})" in README, target


def test_the_anchor_check_can_fail():
    assert "ttft" in _anchors(ROOT / "docs" / "reference" / "metrics.md")
    assert "workload-prompts" in _anchors(ROOT / "docs" / "reference" / "scenario.md")
    assert "no-such-heading" not in _anchors(ROOT / "docs" / "tutorials" / "first-run.md")
