"""The report templates' compiled code is kept in the user's cache folder and read back; a cache folder that
cannot be written, or a cached file that is not jinja2's, costs only the compile."""

from __future__ import annotations

import subprocess
import sys

import pytest
from jinja2.bccache import bc_magic

RENDER = (
    "from reports.html import environment; "
    "env = environment(); [env.get_template(n) for n in ('report.html', 'macros.html', 'base.html')]; "
    "print(env.get_template('macros.html').module is not None)"
)


def render_in_child(cache_home) -> subprocess.CompletedProcess:
    env = {"XDG_CACHE_HOME": str(cache_home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", RENDER], env=env, capture_output=True, text=True, timeout=120)


def test_compiled_templates_are_kept_and_read_back(tmp_path):
    folder = tmp_path / "latbench" / "templates"
    first = render_in_child(tmp_path)
    assert first.returncode == 0, first.stderr
    cached = sorted(folder.glob("*.cache"))
    assert len(cached) == 3  # report.html, macros.html, base.html
    stamps = {p: p.stat().st_mtime_ns for p in cached}
    second = render_in_child(tmp_path)
    assert second.returncode == 0, second.stderr
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*.cache")} == stamps  # read, not written again


@pytest.mark.parametrize("spoil", ["not-a-folder", "garbage"])
def test_a_cache_that_cannot_be_used_costs_only_the_compile(tmp_path, spoil):
    if spoil == "not-a-folder":
        (tmp_path / "latbench").write_text("a file where the cache folder would be")
    else:
        assert render_in_child(tmp_path).returncode == 0
        for p in (tmp_path / "latbench" / "templates").glob("*.cache"):
            p.write_bytes(bc_magic + b"\x80 a pickle cut short")  # jinja2's header, then what it cannot load
    p = render_in_child(tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True"
