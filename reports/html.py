"""HTML rendering: jinja2 templates in reports/templates, autoescape always on."""

from __future__ import annotations

from functools import cache
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


@cache  # one environment: its compiled templates are kept between renders
def environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
