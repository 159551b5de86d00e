"""How a report's figures become SVG: the style they are built in, the figure, its layout and its drawing.

Building a figure (its axes, lines and labels: :mod:`reports.plots`) is the smaller part of its cost; laying it
out and writing its SVG is most of it, and its ticks were most of that. :func:`to_uri` lays a figure out from what
stands beside its axes (:mod:`reports.layout`), puts its ticks in a few artists an axis (:mod:`reports.ticks`) and
draws it once, as an SVG data URI.
"""

from __future__ import annotations

import base64
import io
import sys
from contextlib import contextmanager

from reports.layout import fit
from reports.ticks import flatten

URI_PREFIX = "data:image/svg+xml;base64,"


@contextmanager
def plot_style():
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # only when nobody chose a backend: reports never open a window
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "latbench", "font.size": 9,
                                "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
                                "grid.alpha": 0.3, "legend.frameon": False, "figure.dpi": 100,
                                "axes.titley": 1.0}):  # a title sits above its axes (no measuring where to)
        yield


def figure(w: float, h: float, rows: int = 1, cols: int = 1, **kw):
    """A figure of ``w`` x ``h`` inches with a grid of axes, laid out once when it is drawn."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h))
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def to_uri(fig) -> str:
    """Lay the figure out and draw it: a base64 SVG data URI (an <img> source: inert, whatever text it holds).

    Laid out from what stands beside its axes (:func:`reports.layout.fit`) and drawn once. A layout engine set
    on the figure would draw it three times (constrained layout measures twice, then savefig draws once to lay
    out and once to write), and ``tight_layout`` measures every artist of it: half a report's rendering time."""
    with plot_style():
        fit(fig)
        flatten(fig)  # its ticks as a few artists an axis, not five a tick (reports.ticks)
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return URI_PREFIX + base64.b64encode(buf.getvalue()).decode("ascii")

