"""A report's figures drawn as SVG by latbench itself: a figure with a grid of axes, and only what the reports draw.

The calls are matplotlib's (``ax.plot(x, y, color=..., lw=..., ls="--", label=...)``, ``axvspan``, ``hist``,
``legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))``, ``get_xaxis_transform()``...), so a figure reads as one
built with matplotlib, with matplotlib's look (font size 9, grid at alpha 0.3, no top or right spine, 5% margins);
but importing and drawing matplotlib was two thirds of a report's cost (issue #33), and this module is a few
hundred lines of arithmetic and string formatting. Coordinates: ``"data"``, ``"axes"`` (fractions of the axes),
``"xaxis"`` (x data, y axes fraction) and ``"yaxis"`` (x axes fraction, y data), as matplotlib's transforms.

This module holds what a figure is (its axes, scales and the things drawn); :mod:`reports.layout` sizes its text
and lays out its grid, :mod:`reports.ticks` picks its ticks, :mod:`reports.render` writes it as SVG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reports import ticks as tk
from reports.layout import DPI, FONT, LINE, PX, place, text_size, text_width


class Scale:
    """One axis' mapping from data to a fraction of its length (shared by the axes of a ``sharex`` column)."""

    def __init__(self):
        self.kind = "linear"
        self.lim: list[float | None] = [None, None]
        self.lo, self.hi, self.pos = math.inf, -math.inf, math.inf  # data range, least positive value
        self.sticky: set[float] = set()  # a bar's base: autoscaling does not pad past it
        self.fixed: tuple[list[float], list[str]] | None = None
        self.subs, self.minor = (1.0,), tk.MINOR
        self.inverted = False

    def include(self, values) -> None:
        """Widen the data range to hold ``values`` (non-finite ones left out)."""
        v = np.asarray(values, dtype=float).ravel()
        v = v[np.isfinite(v)]
        if v.size:
            self.lo, self.hi = min(self.lo, float(v.min())), max(self.hi, float(v.max()))
            p = v[v > 0]
            self.pos = min(self.pos, float(p.min())) if p.size else self.pos

    def f(self, v):
        """Data in the scale's own units: their log10 on a log scale (NaN where not positive), else themselves."""
        v = np.asarray(v, dtype=float)
        if self.kind != "log":
            return v
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)

    def view(self) -> tuple[float, float]:
        """The limits shown: the explicit ones; else the data's and 5% of the span beyond (log: of its decades),
        not past a bar's base. With one limit given (``set_ylim(bottom=0)``) the span runs from it: the data keep
        off the far edge however narrow their own range."""
        log = self.kind == "log"
        lo, hi = (self.pos, self.hi) if log else (self.lo, self.hi)
        if self.fixed and self.fixed[0]:
            lo, hi = min(lo, min(self.fixed[0])), max(hi, max(self.fixed[0]))
        if not hi >= lo or (log and not hi > 0):
            lo, hi = (1.0, 10.0) if log else (0.0, 1.0)
        given = [None if v is None else float(self.f(v)) for v in self.lim]
        t0 = float(self.f(lo)) if given[0] is None else given[0]
        t1 = float(self.f(hi)) if given[1] is None else given[1]
        if t1 <= t0:
            t0, t1 = t0 - (0.5 if log else max(abs(t0) * 0.05, 0.5)), t1 + (0.5 if log else max(abs(t1) * 0.05, 0.5))
        d = (t1 - t0) * 0.05
        t0, t1 = t0 - d, t1 + d
        for s in self.sticky:
            ts = float(self.f(s))
            if t0 < ts <= t0 + d * 1.0001:
                t0 = ts
            if t1 - d * 1.0001 <= ts < t1:
                t1 = ts
        out = [10 ** t0 if log else t0, 10 ** t1 if log else t1]
        for i in (0, 1):
            if self.lim[i] is not None:
                out[i] = self.lim[i]
        return out[0], out[1]

    def frac(self, v) -> np.ndarray:
        """Fractions of the axis' length, 0 at its low end (its top or right end when inverted)."""
        lo, hi = self.view()
        t0, t1 = float(self.f(lo)), float(self.f(hi))
        out = (self.f(v) - t0) / ((t1 - t0) or 1.0)
        return 1.0 - out if self.inverted else out


class Axis:
    """One axis of one axes: its label, grid and tick labels, over a scale it may share."""

    def __init__(self, name: str, scale: Scale):
        self.name, self.scale = name, scale
        self.label = ""
        self.grid = True
        self.labelled = True  # tick labels shown (not on the upper rows of a shared x)

    def log_ticks(self, major: tuple[float, ...] = (1.0,), minor: tuple[float, ...] = tk.MINOR) -> None:
        """Which multiples of each decade a log axis ticks: ``major`` labelled (where they fit), ``minor`` not."""
        self.scale.subs, self.scale.minor = major, minor

    def ticks(self, length: float) -> tuple[list[float], list[str], list[float]]:
        """(major ticks, labels, minor ticks) in view on an axis ``length`` pixels long."""
        s = self.scale
        lo, hi = sorted(s.view())
        if s.fixed:
            keep = [(v, lab) for v, lab in zip(*s.fixed) if lo <= v <= hi]
            return [v for v, _ in keep], [lab for _, lab in keep], []
        size = FONT * PX
        bins = max(1, int(length / (size * (3 if self.name == "x" else 2))))

        def fits(values: list[float], labels: list[str]) -> bool:
            at = sorted(zip((s.frac(values) * length).tolist(), labels))
            if self.name == "y":
                return all(b[0] - a[0] >= LINE * size * 1.1 for a, b in zip(at, at[1:]))
            return all(b[0] - a[0] >= (text_width(a[1], FONT) + text_width(b[1], FONT)) / 2 + size
                       for a, b in zip(at, at[1:]))

        if s.kind == "log" and hi > 0 and lo > 0:
            return tk.pick_log(lo, hi, bins, s.subs, s.minor, fits)
        major, labels = tk.pick_linear(lo, hi, bins, fits)
        return major, labels, []


@dataclass
class Line:
    """A line through points, or markers alone (``ls`` empty), in ``coords``; sizes in points, as matplotlib's."""

    x: np.ndarray
    y: np.ndarray
    coords: str
    color: str
    lw: float = 1.5
    ls: str = "-"
    alpha: float = 1.0
    marker: str = ""
    ms: float = 6.0
    mew: float = 1.0
    drawstyle: str = "default"
    label: str | None = None


@dataclass
class Patch:
    """Filled polygons of one colour: shading, bars, a filled histogram."""

    polygons: list[np.ndarray]  # each (k, 2) in ``coords``
    coords: str
    color: str
    alpha: float = 1.0
    label: str | None = None


@dataclass
class Text:
    """A text placed at (x, y) in ``coords``, aligned as matplotlib aligns one; never clipped to its axes."""

    x: float
    y: float
    text: str
    coords: str
    ha: str = "left"
    va: str = "baseline"
    size: float = FONT
    color: str = "#000000"
    bold: bool = False

    def box(self, ax) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) pixels of the text where ``ax`` stands now."""
        (x,), (y,) = ax.px([self.x], [self.y], self.coords)
        lines = self.text.split("\n")
        w = max(text_width(ln, self.size, self.bold) for ln in lines)
        return place(x, y, w, len(lines), self.size, self.ha, self.va)


@dataclass
class Legend:
    """A frameless legend of ``entries`` (what was drawn with a label), inside its axes or beside ``anchor``."""

    entries: list
    loc: str
    anchor: tuple[float, float] | None
    size: float
    ncols: int = 1

    def dims(self) -> tuple[float, float, list]:
        """(width, height, per entry: its offset (x, y) within the legend and its label's height), pixels."""
        fs = self.size * PX
        per = math.ceil(len(self.entries) / self.ncols)
        x, width, height, at = 0.4 * fs, 0.0, 0.0, []
        for c in range(self.ncols):
            col = self.entries[c * per:(c + 1) * per]
            if not col:
                break
            y, widest = 0.4 * fs, 0.0
            for item in col:
                w, h = text_size(item.label, self.size)
                at.append((x, y, h))
                y += h + 0.5 * fs
                widest = max(widest, 2.8 * fs + w)
            x += widest + 2.0 * fs
            width, height = x - 2.0 * fs + 0.4 * fs, max(height, y - 0.5 * fs + 0.4 * fs)
        return width, height, at

    def box(self, ax, where: str | None = None) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) pixels: at ``loc`` within the axes, or beside ``anchor`` (axes fractions)."""
        w, h, _ = self.dims()
        x0, y0, x1, y1 = ax.box
        pad = 0.5 * self.size * PX
        loc = where or self.loc
        if self.anchor is not None:
            ax_, ay = self.anchor
            x0 = x1 = x0 + ax_ * (x1 - x0)
            y0 = y1 = y1 - ay * (y1 - y0)
        vert, _, horiz = loc.partition(" ") if " " in loc else ("center", "", loc)
        horiz = "center" if loc == "center" else horiz
        left = {"left": x0 + pad, "center": (x0 + x1 - w) / 2, "right": x1 - pad - w}[horiz]
        top = {"upper": y0 + pad, "center": (y0 + y1 - h) / 2, "lower": y1 - pad - h}[vert]
        return left, top, left + w, top + h


BEST = ("upper right", "upper left", "lower left", "lower right", "center right", "center left", "lower center",
        "upper center", "center")


class Axes:
    """One plotting area: what is drawn in it, its two axes, its title and legend; ``box`` set by the layout."""

    transAxes = "axes"

    def __init__(self, xscale: Scale, yscale: Scale):
        self.xaxis, self.yaxis = Axis("x", xscale), Axis("y", yscale)
        self.items: list = []
        self.title = ""
        self.legend_: Legend | None = None
        self.box = (0.0, 0.0, 1.0, 1.0)

    # coordinates
    def get_xaxis_transform(self) -> str:
        return "xaxis"

    def get_yaxis_transform(self) -> str:
        return "yaxis"

    def px(self, x, y, coords: str = "data") -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (y down) of points given in ``coords``."""
        x0, y0, x1, y1 = self.box
        fx = self.xaxis.scale.frac(x) if coords in ("data", "xaxis") else np.asarray(x, dtype=float)
        fy = self.yaxis.scale.frac(y) if coords in ("data", "yaxis") else np.asarray(y, dtype=float)
        return x0 + fx * (x1 - x0), y1 - fy * (y1 - y0)

    def _data(self, x, y, coords: str) -> None:
        if coords in ("data", "xaxis"):
            self.xaxis.scale.include(x)
        if coords in ("data", "yaxis"):
            self.yaxis.scale.include(y)

    # what is drawn
    def plot(self, x, y, fmt: str = "", *, color: str = "#1f77b4", lw: float = 1.5, ls: str | None = None,
             alpha: float = 1.0, marker: str | None = None, ms: float = 6.0, mew: float = 1.0,
             drawstyle: str = "default", label: str | None = None, transform: str = "data") -> None:
        """A line through (x, y) (NaN breaks it), or markers alone: ``fmt`` as matplotlib's ("x", "o", "--")."""
        mark = marker or next((c for c in fmt if c in "ox."), "")
        style = ls or next((s for s in ("--", "-.", "-", ":") if s in fmt), "" if mark and fmt else "-")
        x, y = np.atleast_1d(np.asarray(x, dtype=float)), np.atleast_1d(np.asarray(y, dtype=float))
        self.items.append(Line(x, y, transform, color, lw, style, alpha, mark, ms, mew, drawstyle, label))
        self._data(x, y, transform)

    def axhline(self, y: float, color: str = "#000000", lw: float = 1.0, ls: str = "-", label: str | None = None):
        self.plot([0, 1], [y, y], color=color, lw=lw, ls=ls, label=label, transform="yaxis")

    def axvline(self, x: float, color: str = "#000000", lw: float = 1.0, ls: str = "-", label: str | None = None):
        self.plot([x, x], [0, 1], color=color, lw=lw, ls=ls, label=label, transform="xaxis")

    def fill(self, polygons: list, coords: str, color: str, alpha: float = 1.0, label: str | None = None) -> None:
        """Filled polygons, each a sequence of (x, y) in ``coords``, in one colour."""
        polys = [np.asarray(p, dtype=float).reshape(-1, 2) for p in polygons]
        self.items.append(Patch(polys, coords, color, alpha, label))
        if polys:
            pts = np.concatenate(polys)
            self._data(pts[:, 0], pts[:, 1], coords)

    def axvspan(self, x0: float, x1: float, color: str, alpha: float = 1.0, label: str | None = None) -> None:
        self.fill([[(x0, 0), (x0, 1), (x1, 1), (x1, 0)]], "xaxis", color, alpha, label)

    def axhspan(self, y0: float, y1: float, color: str, alpha: float = 1.0, label: str | None = None) -> None:
        self.fill([[(0, y0), (1, y0), (1, y1), (0, y1)]], "yaxis", color, alpha, label)

    def bar(self, x, height, width: float, bottom=0.0, color: str = "#1f77b4", label: str | None = None) -> None:
        x, h = np.asarray(x, dtype=float), np.asarray(height, dtype=float)
        b = np.broadcast_to(np.asarray(bottom, dtype=float), h.shape)
        keep = np.isfinite(h) & (h != 0)
        self.fill([[(xi - width / 2, bi), (xi - width / 2, bi + hi), (xi + width / 2, bi + hi), (xi + width / 2, bi)]
                   for xi, hi, bi in zip(x[keep], h[keep], b[keep])], "data", color, 1.0, label)
        self.yaxis.scale.include(b)
        self.yaxis.scale.sticky.add(0.0)

    def barh(self, y, width, left=0.0, color: str = "#1f77b4", label: str | None = None, height: float = 0.8):
        y, w = np.asarray(y, dtype=float), np.asarray(width, dtype=float)
        left = np.broadcast_to(np.asarray(left, dtype=float), w.shape)
        self.fill([[(li, yi - height / 2), (li + wi, yi - height / 2), (li + wi, yi + height / 2),
                    (li, yi + height / 2)] for yi, wi, li in zip(y, w, left)], "data", color, 1.0, label)
        self.xaxis.scale.include(left)
        self.xaxis.scale.sticky.add(0.0)

    def hist(self, values, bins, weights=None, histtype: str = "step", alpha: float = 1.0, color: str = "#1f77b4",
             lw: float = 1.5, label: str | None = None) -> None:
        """A histogram's outline (``step``) or its filled shape (``stepfilled``) from the base line."""
        h, edges = np.histogram(values, bins=bins, weights=weights)
        x = np.repeat(edges, 2)
        y = np.concatenate([[0.0], np.repeat(h.astype(float), 2), [0.0]])
        if histtype == "stepfilled":
            self.fill([np.column_stack([x, y])], "data", color, alpha, label)
        else:
            self.plot(x, y, color=color, lw=lw, label=label)
        self.yaxis.scale.include([0.0])
        self.yaxis.scale.sticky.add(0.0)

    def text(self, x: float, y: float, s: str, transform: str = "data", ha: str = "left", va: str = "baseline",
             fontsize: float = FONT, color: str = "#000000", fontweight: str = "normal") -> None:
        """A text (never clipped: the layout keeps it within the figure)."""
        self.items.append(Text(x, y, s, transform, ha, va, fontsize, color, fontweight == "bold"))

    # axes and labels
    def set_xscale(self, kind: str) -> None:
        self.xaxis.scale.kind = kind

    def set_yscale(self, kind: str) -> None:
        self.yaxis.scale.kind = kind

    def set_xlim(self, left: float | None = None, right: float | None = None) -> None:
        self.xaxis.scale.lim = [left, right]

    def set_ylim(self, bottom: float | None = None, top: float | None = None) -> None:
        self.yaxis.scale.lim = [bottom, top]

    def set_xticks(self, ticks, labels=None) -> None:
        t = [float(v) for v in ticks]
        self.xaxis.scale.fixed = (t, list(labels) if labels is not None else tk.linear_labels(t))

    def set_yticks(self, ticks, labels=None) -> None:
        t = [float(v) for v in ticks]
        self.yaxis.scale.fixed = (t, list(labels) if labels is not None else tk.linear_labels(t))

    def invert_yaxis(self) -> None:
        self.yaxis.scale.inverted = True

    def set_xlabel(self, text: str) -> None:
        self.xaxis.label = text

    def set_ylabel(self, text: str) -> None:
        self.yaxis.label = text

    def set_title(self, text: str) -> None:
        self.title = text

    def grid(self, axis: str = "both", visible: bool = True) -> None:
        for a in ((self.xaxis, self.yaxis) if axis == "both" else (getattr(self, axis + "axis"),)):
            a.grid = visible

    def legend(self, loc: str = "best", bbox_to_anchor: tuple[float, float] | None = None, fontsize: float = FONT,
               ncols: int = 1) -> None:
        """A legend of what was drawn with a label (frameless, as every legend of the reports)."""
        entries = [i for i in self.items if isinstance(i, (Line, Patch)) and i.label]
        self.legend_ = Legend(entries, loc, bbox_to_anchor, fontsize, ncols) if entries else None


class Figure:
    """``width`` x ``height`` inches, a grid of ``rows`` x ``cols`` axes (rows sized by ``height_ratios``)."""

    def __init__(self, width: float, height: float, rows: int = 1, cols: int = 1, sharex: bool = False,
                 height_ratios: list[float] | None = None):
        self.width, self.height = width * DPI, height * DPI
        self.cols, self.ratios = cols, list(height_ratios or [1.0] * rows)
        shared = [Scale() for _ in range(cols)]
        self.grid = [[Axes(shared[c] if sharex else Scale(), Scale()) for c in range(cols)] for _ in range(rows)]
        if sharex:
            for row in self.grid[:-1]:
                for ax in row:
                    ax.xaxis.labelled = False
