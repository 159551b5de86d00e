"""HTML rendering: jinja2 templates in reports/templates, autoescape always on.

Compiling the report's templates costs about 40 ms of CPU, a few percent of a short run's whole process; their
compiled code is kept in the user's cache folder (``$XDG_CACHE_HOME/latbench/templates``, else
``~/.cache/latbench/templates``; jinja2's bytecode cache, keyed by each template's source checksum, so an edited
template is compiled again) and loaded in under a millisecond. A folder that cannot be written only costs the
compile.
"""

from __future__ import annotations

import os
import pickle
from functools import cache
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


def cache_folder() -> Path | None:
    """Where compiled templates are kept; None where no home folder is known (then nothing is kept)."""
    try:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    except (RuntimeError, KeyError):  # no HOME and no password entry for this user
        return None
    return Path(base) / "latbench" / "templates"


@cache  # one environment: its compiled templates are kept between renders
def environment():
    import jinja2

    class BytecodeCache(jinja2.FileSystemBytecodeCache):
        """jinja2's, where a folder or file that cannot be read or written is a miss, never an error."""

        def load_bytecode(self, bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except (OSError, EOFError, ValueError, pickle.UnpicklingError):  # unreadable, or not jinja2's
                bucket.reset()

        def dump_bytecode(self, bucket) -> None:
            try:
                Path(self.directory).mkdir(parents=True, exist_ok=True)
                super().dump_bytecode(bucket)
            except OSError:
                pass

    folder = cache_folder()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             bytecode_cache=BytecodeCache(str(folder)) if folder else None)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
