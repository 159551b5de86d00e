"""How a report's figures become images: a figure of :mod:`reports.svg`, drawn as an SVG data URI.

latbench draws its figures itself (:mod:`reports.svg`, :mod:`reports.render`) rather than with matplotlib, whose
import and drawing were two thirds of a report's CPU and a sixth of a short run's (issue #33).
"""

from __future__ import annotations

import base64

import numpy as np

from reports.render import draw
from reports.svg import Figure

URI_PREFIX = "data:image/svg+xml;base64,"


def figure(w: float, h: float, rows: int = 1, cols: int = 1, sharex: bool = False,
           height_ratios: list[float] | None = None) -> tuple[Figure, np.ndarray]:
    """A figure of ``w`` x ``h`` inches and its ``rows`` x ``cols`` axes (an array: ``ax[row, col]``); with
    ``sharex`` the axes of a column share their x scale and only the bottom row labels its ticks."""
    fig = Figure(w, h, rows, cols, sharex, height_ratios)
    axes = np.empty((rows, cols), dtype=object)
    for r, row in enumerate(fig.grid):
        for c, ax in enumerate(row):
            axes[r, c] = ax
    return fig, axes


def to_uri(fig: Figure) -> str:
    """Lay the figure out and draw it: a base64 SVG data URI (an <img> source: inert, whatever text it holds)."""
    return URI_PREFIX + base64.b64encode(draw(fig).encode("utf-8")).decode("ascii")
