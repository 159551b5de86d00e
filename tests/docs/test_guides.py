"""The how-to guides and explanation pages (docs/how-to, docs/explanation) against the tool they describe.

What a page shows must still be true of this checkout:

- every scenario a page shows validates (``latbench validate``, in a workspace holding the files the pages make:
  the bundled ``data/``, the datasets page's ``prompts.jsonl``, the trace page's generated ``trace.jsonl``), and one
  that bears a bundled scenario's name says nothing its file does not (the page's keys and values are the file's);
- every ``latbench`` command a page shows names a real command and real options (parsed by the CLI itself);
- the output a page quotes from a command that sends no load (``trace show``, ``trace generate``, ``alerts``,
  ``dashboards``, ``check`` against a closed port) is what the command prints now;
- two examples run for real, at the pages' own short durations: the Anthropic/Responses scenario against the
  repository's test server (the reasoning shows in ``ttfat``, as the page says) and the dataset page's own prompts
  against the bundled reference server (every prompt counted as the server counts it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from loadgen.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs" / "how-to").glob("*.md"), *(ROOT / "docs" / "explanation").glob("*.md")])
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)\n(?P=indent)```", re.S | re.M)
HEREDOC = re.compile(r"cat > (?P<file>\S+) <<'EOF'\n(?P<body>.*?)\nEOF", re.S)
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-key", "OPENAI_API_KEY": "sk-test-key-123"}  # the pages' ${...}
ENV_WORD = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _blocks(page: Path) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, indented ones (inside a list item) dedented."""
    out = []
    for m in FENCE.finditer(page.read_text(encoding="utf-8")):
        n = len(m["indent"])
        out.append((m["lang"], "\n".join(line[n:] for line in m["body"].splitlines())))
    return out


def _scenarios() -> list[tuple[str, dict]]:
    """Every YAML block that is a whole scenario (a name, a target or targets, a load)."""
    found = []
    for page in PAGES:
        for lang, body in _blocks(page):
            if lang != "yaml":
                continue
            data = yaml.safe_load(body)
            if isinstance(data, dict) and "name" in data and "load" in data and ({"target", "targets"} & set(data)):
                found.append((f"{page.stem}:{data['name']}", data))
    return found


def _commands() -> list[tuple[str, str]]:
    """Every latbench command a page shows: `$ ` lines of console blocks, lines of bash blocks (heredocs left out)."""
    found = []
    for page in PAGES:
        for lang, body in _blocks(page):
            if lang not in ("console", "bash"):
                continue
            body = HEREDOC.sub("", body).replace("\\\n", " ")
            for line in body.splitlines():
                if lang == "console":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                words = _words(re.split(r"\s+#\s", line, maxsplit=1)[0])
                while words and ENV_WORD.match(words[0]):
                    words.pop(0)
                if words and words[0] == "latbench":
                    found.append((page.stem, " ".join(words[1:])))
    return found


def _words(line: str) -> list[str]:
    """A shell line's first command, as words (up to a pipe, `&`, `;` or a redirection)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words = []
    for word in lex:
        if word and set(word) <= set("|&;<>()"):
            break
        words.append(word)
    return words


def _subset(page: object, bundled: object, path: str = "") -> list[str]:
    """Where a page's YAML says something the bundled file does not."""
    if isinstance(page, dict) and isinstance(bundled, dict):
        return [d for k, v in page.items() for d in
                (_subset(v, bundled[k], f"{path}.{k}") if k in bundled else [f"{path}.{k}: not in the file"])]
    if isinstance(page, list) and isinstance(bundled, list) and len(page) == len(bundled):
        return [d for i, (a, b) in enumerate(zip(page, bundled)) for d in _subset(a, b, f"{path}[{i}]")]
    return [] if page == bundled else [f"{path}: page {page!r}, file {bundled!r}"]


def _latbench(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _quoted(page: str, command: str) -> list[str]:
    """The output lines a page quotes under `$ command` in a console block."""
    for _, body in (b for b in _blocks(ROOT / "docs" / page) if b[0] == "console"):
        lines = body.replace("\\\n    ", "").splitlines()
        for i, line in enumerate(lines):
            if line == f"$ {command}":
                out = []
                for nxt in lines[i + 1:]:
                    if nxt.startswith("$ "):
                        break
                    out.append(nxt)
                return out
    raise AssertionError(f"{page} quotes no `$ {command}`")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The files the pages' scenarios name, made as the pages make them."""
    ws = tmp_path_factory.mktemp("guides")
    (ws / "data").symlink_to(ROOT / "scenarios" / "data")
    heredocs = {m["file"]: m["body"] for page in PAGES for m in HEREDOC.finditer(page.read_text(encoding="utf-8"))}
    (ws / "prompts.jsonl").write_text(heredocs["prompts.jsonl"] + "\n", encoding="utf-8")
    gen = _latbench("trace", "generate", "trace.jsonl", "-n", "200", "--qps", "8", "--input-tokens", "200",
                    "--input-stddev", "60", "--output-tokens", "16", "--groups", "4", "--prefix-tokens", "128",
                    "--block-tokens", "64", "--seed", "3", cwd=ws)
    assert gen.returncode == 0, gen.stderr
    return ws


def test_pages_show_scenarios_and_commands():
    """The collection below is not empty by accident: every how-to shows a scenario or a command."""
    assert len(_scenarios()) >= 11
    assert {p for p, _ in _commands()} >= {p.stem for p in (ROOT / "docs" / "how-to").glob("*.md")}


@pytest.mark.parametrize("name,data", _scenarios(), ids=[n for n, _ in _scenarios()])
def test_scenario_validates(name, data, workspace):
    text = yaml.safe_dump(data, sort_keys=False).replace("PORT", "8000")
    path = workspace / f"{name.replace(':', '_')}.yaml"
    path.write_text(text, encoding="utf-8")
    out = _latbench("validate", path.name, cwd=workspace, env=KEYS)
    assert out.returncode == 0, out.stdout + out.stderr
    bundled = ROOT / "scenarios" / f"{data['name']}.yaml"
    if bundled.exists():
        assert _subset(data, yaml.safe_load(bundled.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("page,command", _commands(), ids=[f"{p}: {c[:60]}" for p, c in _commands()])
def test_command_parses(page, command):
    """Appending --help makes click parse the words (an unknown command or option is exit 2) and run nothing."""
    result = CliRunner().invoke(cli, [*shlex.split(command), "--help"])
    assert result.exit_code == 0, f"{page}: latbench {command}: {result.output[-300:]}"


def test_quoted_outputs_are_current(workspace):
    shown = _latbench("trace", "show", "scenarios/data/trace_small.jsonl", cwd=ROOT)
    quoted = _quoted("how-to/trace-replay.md", "latbench trace show scenarios/data/trace_small.jsonl")
    assert shown.stdout.splitlines() == quoted
    head = (workspace / "trace.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    assert head == _quoted("how-to/trace-replay.md", "head -n 3 trace.jsonl")

    (workspace / "monitoring").mkdir(exist_ok=True)
    for cmd in ("alerts", "dashboards"):
        out = _latbench(cmd, str(ROOT / "scenarios" / "steady.yaml"), "--out", "monitoring/", cwd=workspace)
        assert out.returncode == 0, out.stderr
        quoted = _quoted("how-to/watch-prometheus.md", f"latbench {cmd} scenarios/steady.yaml --out monitoring/")
        assert [" ".join(x.split()) for x in (out.stdout + out.stderr).splitlines()] == quoted

    check = _latbench("check", "scenarios/steady.yaml", "--target", "http://127.0.0.1:9/v1", cwd=ROOT)
    assert check.returncode == 3
    assert check.stdout.strip() in _quoted("explanation/validity.md",
                                           "latbench check scenarios/steady.yaml --target http://127.0.0.1:9/v1")


def _shortened(data: dict) -> dict:
    """The page's scenario with each phase cut to 2 s: the same requests, a fraction of the suite's time."""
    for phase in (data.get("load") or {}).get("phases") or []:
        phase["duration"] = "2s"
    return data


def test_anthropic_and_responses_reasoning(api_server, workspace):
    """The page's scenario against the test server it names: 5 reasoning tokens 10 ms apart put ttfat ~50 ms
    after ttft on both APIs, every request succeeds, and the keys stay references in the RunDir."""
    srv = api_server(ttft=0.08, gap=0.01, tokens=20, thinking=5)
    data = _shortened(dict(_scenarios())["anthropic-responses:anthropic"])
    text = yaml.safe_dump(data, sort_keys=False).replace("PORT", str(srv.port))
    (workspace / "anthropic.yaml").write_text(text, encoding="utf-8")
    out = _latbench("run", "anthropic.yaml", "--quiet", "--no-report", "--out", "runs", cwd=workspace,
                    env=KEYS)
    assert out.returncode in (0, 3), out.stdout + out.stderr  # 3: a contended host may void the run, not the API
    rundir = max((workspace / "runs").glob("*_anthropic"))
    assert "${ANTHROPIC_API_KEY}" in (rundir / "scenario.yaml").read_text(encoding="utf-8")
    for target in ("messages", "responses"):
        s = json.loads((rundir / target / "summary.json").read_text(encoding="utf-8"))["overall"]
        assert s["count"] > 0 and s["ok"] == s["count"]
        m = s["metrics"]
        ttft, ttfat = (m[k]["percentiles"]["p50"]["value"] for k in ("ttft", "ttfat"))
        assert 0.03 < ttfat - ttft < 0.2, (ttft, ttfat)
        assert s["reasoning"]["tokens_mean"] == 5


def test_own_dataset_counted_by_the_server(workspace):
    """The datasets page's prompts.jsonl and my-dataset.yaml, as the page runs them."""
    data = _shortened(dict(_scenarios())["datasets-tokenizers:my-dataset"])
    (workspace / "my-dataset.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    out = _latbench("run", "my-dataset.yaml", "--quiet", "--no-report", "--out", "runs", cwd=workspace)
    assert out.returncode in (0, 3), out.stdout + out.stderr
    rundir = max((workspace / "runs").glob("*_my-dataset"))
    tokens = json.loads((rundir / "target" / "summary.json").read_text(encoding="utf-8"))["overall"]["tokens"]
    agree = tokens["usage_vs_counted"]
    assert agree["n"] > 0 and agree["equal"] == agree["n"]
