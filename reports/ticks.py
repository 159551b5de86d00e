"""A figure's ticks drawn as a few artists per axis instead of five per tick.

matplotlib builds every tick of an axis as its own object: two marks, a grid line and two labels, each an artist
with its own properties copied from the first tick's (a marker deep-copied per mark). For the report's figures
that was more than half of drawing each of them: a CDF with log axes had 126 ticks. :func:`flatten` puts, after
the figure is laid out (:func:`reports.layout.fit`), the same marks, grid lines and labels in their place: per axis
one line of tick markers for the major and one for the minor marks, one collection of grid lines, and one text per
label, each styled from the axis' own first tick and at the positions matplotlib would draw (its locators and
formatters, the ticks within the view, as ``Axis._update_ticks`` picks them); then it leaves the axis no ticks of
its own to draw. A figure whose formatter shows an offset or scale text ("1e6", "+1e4") beside an axis is left as
it is: that text is drawn from the ticks.
"""

from __future__ import annotations

import numpy as np


def _in_view(axis, locs) -> list[float]:
    """The tick locations matplotlib draws: within the view interval, through the scale, with its tolerance."""
    lo, hi = sorted(axis.get_view_interval())
    t = axis.get_transform()
    a, b = sorted(float(v) for v in t.transform([lo, hi]))
    slack = (b - a) * 1e-10
    out = []
    for loc in locs:
        v = float(t.transform(loc))
        if a - slack <= v <= b + slack:
            out.append(loc)
    return out


def _plan(axis) -> list[tuple] | None:
    """(locations, labels, template tick) of the major and of the minor ticks of ``axis``; None when an offset or
    scale text would stand beside it."""
    from matplotlib.ticker import NullLocator

    plans = []
    for major in (True, False):
        ticker = axis.major if major else axis.minor
        if isinstance(ticker.locator, NullLocator):
            continue
        locs = list(axis.get_majorticklocs() if major else axis.get_minorticklocs())
        if not locs:
            continue
        labels = ticker.formatter.format_ticks(locs)
        if ticker.formatter.get_offset():
            return None
        keep = set(_in_view(axis, locs))
        shown = [(loc, text) for loc, text in zip(locs, labels) if loc in keep]
        template = (axis.get_major_ticks(1) if major else axis.get_minor_ticks(1))[0]
        plans.append(([loc for loc, _ in shown], [text for _, text in shown], template))
    return plans


def _draw(ax, axis, plans: list[tuple]) -> None:
    """The artists standing in for ``axis``' ticks: marks, grid lines, labels, styled from its template ticks."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    x = axis.axis_name == "x"
    z = axis.get_zorder()
    for locs, labels, tick in plans:
        if not locs:
            continue
        line = tick.tick1line
        if line.get_visible():
            xy = (locs, np.zeros(len(locs))) if x else (np.zeros(len(locs)), locs)
            mark = Line2D(*xy, linestyle="None", marker=line.get_marker(), markersize=line.get_markersize(),
                          markeredgewidth=line.get_markeredgewidth(), markeredgecolor=line.get_markeredgecolor(),
                          transform=line.get_transform(), zorder=z, clip_on=False)
            ax.add_artist(mark)
            mark.set_clip_on(False)
        grid = tick.gridline
        if grid.get_visible():
            segs = [[(v, 0.0), (v, 1.0)] if x else [(0.0, v), (1.0, v)] for v in locs]
            lines = LineCollection(segs, colors=[grid.get_color()], linewidths=grid.get_linewidth(),
                                   linestyles=grid.get_linestyle(), alpha=grid.get_alpha(),
                                   transform=grid.get_transform(), zorder=z)
            ax.add_artist(lines)
            lines.set_clip_path(ax.patch)
        label = tick.label1
        if label.get_visible():
            style = dict(color=label.get_color(), fontproperties=label.get_fontproperties(),
                         rotation=label.get_rotation(), va=label.get_verticalalignment(),
                         ha=label.get_horizontalalignment(), transform=label.get_transform(), zorder=z)
            for v, text in zip(locs, labels):
                if text:
                    t = Text(v if x else 0.0, 0.0 if x else v, text, **style)
                    ax.add_artist(t)
                    t.set_clip_on(False)


def flatten(fig) -> None:
    """Replace the ticks of every axis of ``fig`` by the same marks, grid lines and labels in a few artists (see the
    module); a figure with an offset or scale text beside an axis, or with a second mark or label on the far side of
    one, keeps matplotlib's ticks."""
    from matplotlib.ticker import NullLocator

    work = []
    for ax in fig.axes:
        if not (ax.get_visible() and ax.axison):
            continue  # matplotlib draws no ticks of it: neither do we
        for axis in (a for a in (ax.xaxis, ax.yaxis) if a.get_visible()):
            plans = _plan(axis)
            if plans is None or any(t.tick2line.get_visible() or t.label2.get_visible() for _, _, t in plans):
                return
            work.append((ax, axis, plans))
    for ax, axis, plans in work:  # every plan first: shared axes share their locators
        _draw(ax, axis, plans)
    for _, axis, _ in work:
        axis.set_major_locator(NullLocator())
        axis.set_minor_locator(NullLocator())
