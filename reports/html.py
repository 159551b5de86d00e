"""HTML rendering: jinja2 templates in reports/templates, autoescape always on."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["anchor"] = anchor
    return env


def anchor(text: str) -> str:
    """An id-safe anchor for a target or section name."""
    return "t-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", str(text)).strip("-") or "x")


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
