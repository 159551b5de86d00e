"""A figure of :mod:`reports.svg` written as SVG text: laid out (:func:`reports.layout.fit`), then each axes in
matplotlib's order (shading and bars, grid, lines and markers, spines and ticks, labels, texts, legend).

A line of more points than four times its axes' width in pixels keeps, per pixel column, its first, lowest, highest
and last point: the same picture, whatever the run's length. Coordinates are written to a tenth of a pixel; the
output holds no date and numbers its clip paths in order, so the same figure gives the same bytes.
"""

from __future__ import annotations

from dataclasses import replace
from html import escape

import numpy as np

from reports.layout import ASCENT, FONT, LINE, PX, fit, place, text_width
from reports.svg import BEST, Axes, Figure, Legend, Line, Patch, Text

TICK, MINOR_TICK, TICK_PAD, LABEL_PAD, TITLE_PAD = 3.5, 2.0, 3.5, 4.0, 6.0  # points, matplotlib's defaults
TITLE = 1.2 * FONT
DASHES = {"--": (3.7, 1.6), "-.": (6.4, 1.6, 1.0, 1.6), ":": (1.0, 1.65)}  # times the line width, as matplotlib's
FONTS = "DejaVu Sans, Bitstream Vera Sans, Arial, Helvetica, sans-serif"


def n(v: float) -> str:
    """A coordinate, to a tenth of a pixel."""
    s = f"{v:.1f}"
    return "0" if s in ("0.0", "-0.0") else s.removesuffix(".0")


def _tick_labels(ax: Axes):
    """Per axis (x, y): (ticks, labels, minor ticks), and how far its tick labels reach from the axis line."""
    x0, y0, x1, y1 = ax.box
    xt = ax.xaxis.ticks(x1 - x0)
    yt = ax.yaxis.ticks(y1 - y0)
    size = FONT * PX
    ry = (TICK + TICK_PAD) * PX + max((text_width(s, FONT) for s in yt[1]), default=0.0) \
        if ax.yaxis.labelled and yt[1] else TICK * PX
    rx = (TICK + TICK_PAD) * PX + LINE * size if ax.xaxis.labelled and xt[1] else TICK * PX
    return xt, yt, rx, ry


def outside(ax: Axes) -> tuple[float, float, float, float]:
    """How far (pixels) what belongs to ``ax`` stands out beyond its box: (left, top, right, bottom)."""
    x0, y0, x1, y1 = ax.box
    xt, yt, rx, ry = _tick_labels(ax)
    size = FONT * PX
    left, top, right, bottom = ry, 0.0, 0.0, rx
    if ax.yaxis.label:
        left += LABEL_PAD * PX + len(ax.yaxis.label.split("\n")) * LINE * size
    if ax.xaxis.label:
        bottom += LABEL_PAD * PX + len(ax.xaxis.label.split("\n")) * LINE * size
    if ax.title:
        top = TITLE_PAD * PX + LINE * TITLE * PX
    boxes = [t.box(ax) for t in ax.items if isinstance(t, Text)]
    if ax.yaxis.labelled:
        for y in ax.yaxis.scale.frac(yt[0]):
            cy = y1 - y * (y1 - y0)
            boxes.append((x0, cy - LINE * size / 2, x0, cy + LINE * size / 2))
    if ax.xaxis.labelled:
        for x, s in zip(ax.xaxis.scale.frac(xt[0]), xt[1]):
            cx, w = x0 + x * (x1 - x0), text_width(s, FONT)
            boxes.append((cx - w / 2, y1, cx + w / 2, y1))
    if ax.legend_ is not None and ax.legend_.anchor is not None:
        boxes.append(ax.legend_.box(ax))
    for bx0, by0, bx1, by1 in boxes:
        left, top = max(left, x0 - bx0), max(top, y0 - by0)
        right, bottom = max(right, bx1 - x1), max(bottom, by1 - y1)
    return left, top, right, bottom


def _path(x: np.ndarray, y: np.ndarray, close: bool = False) -> str:
    """Path data through the points; a non-finite one breaks it."""
    ok = np.isfinite(x) & np.isfinite(y)
    out = []
    for run in np.split(np.arange(x.size), np.flatnonzero(np.diff(ok.astype(np.int8))) + 1):
        if run.size and ok[run[0]]:
            pts = [f"{n(a)} {n(b)}" for a, b in zip(x[run].tolist(), y[run].tolist())]
            out.append("M" + pts[0] + ("L" + " ".join(pts[1:]) if len(pts) > 1 else "") + ("Z" if close else ""))
    return "".join(out)


def _thin(x: np.ndarray, y: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Per pixel column the first, lowest, highest and last point, when there are more than 4 a column; a line
    that goes back in x (not a function of it) is left as it is."""
    if x.size <= 4 * max(width, 1.0) or not np.isfinite(x).all() or np.any(np.diff(x) < 0):
        return x, y
    col = np.floor(x).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    ends = np.r_[starts[1:], x.size] - 1
    ymin, ymax = np.fmin.reduceat(y, starts), np.fmax.reduceat(y, starts)
    # a column with a gap (NaN) keeps it, so the line still breaks there
    gap = np.add.reduceat(~np.isfinite(y), starts) > 0
    mid_lo, mid_hi = np.where(gap, np.nan, ymin), np.where(gap, np.nan, ymax)
    xs = np.column_stack([x[starts], x[starts], x[starts], x[ends]]).ravel()
    ys = np.column_stack([y[starts], mid_lo, mid_hi, y[ends]]).ravel()
    return xs, ys


def _steps(x: np.ndarray, y: np.ndarray, style: str) -> tuple[np.ndarray, np.ndarray]:
    if style == "steps-post" and x.size > 1:
        return np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]
    if style == "steps-mid" and x.size > 1:
        mid = (x[1:] + x[:-1]) / 2
        return np.concatenate([x[:1], np.repeat(mid, 2), x[-1:]]), np.repeat(y, 2)
    return x, y


def _stroke(color: str, lw: float, ls: str, alpha: float) -> str:
    out = f' fill="none" stroke="{color}" stroke-width="{round(lw * PX, 2):g}"'
    if ls in DASHES:
        out += ' stroke-dasharray="' + " ".join(f"{d * lw * PX:.2f}" for d in DASHES[ls]) + '"'
    return out + (f' stroke-opacity="{alpha:g}"' if alpha < 1 else "")


def _markers(x: np.ndarray, y: np.ndarray, line: Line) -> str:
    """One path of every marker of ``line``; markers within half a pixel of one drawn already are not drawn again
    (an hour of scrapes on a 1,000-pixel axes: a few hundred, not 3,600)."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    _, first = np.unique(np.column_stack([np.round(x), np.round(y)]), axis=0, return_index=True)
    pts = list(zip(x[np.sort(first)].tolist(), y[np.sort(first)].tolist()))
    r = line.ms * PX / 2 * (0.5 if line.marker == "." else 1.0)
    if line.marker == "x":
        d = "".join(f"M{n(a - r)} {n(b - r)}l{n(2 * r)} {n(2 * r)}m0 {n(-2 * r)}l{n(-2 * r)} {n(2 * r)}"
                    for a, b in pts)
        style = f' fill="none" stroke="{line.color}" stroke-width="{round(line.mew * PX, 2):g}"'
    else:
        d = "".join(f"M{n(a - r)} {n(b)}a{n(r)} {n(r)} 0 1 0 {n(2 * r)} 0a{n(r)} {n(r)} 0 1 0 {n(-2 * r)} 0"
                    for a, b in pts)
        style = f' fill="{line.color}" stroke="{line.color}" stroke-width="{round(line.mew * PX, 2):g}"'
    return f'<path d="{d}"{style}' + (f' opacity="{line.alpha:g}"' if line.alpha < 1 else "") + "/>" if d else ""


def _line(ax: Axes, line: Line, clip: str) -> list[str]:
    """The line, and its markers; a point of a plain line with a gap on each side (a second in which no request
    completed between two that did) is a dot, where matplotlib would draw nothing of it."""
    x, y = ax.px(line.x, line.y, line.coords)
    out = []
    if line.ls:
        sx, sy = _steps(x, y, line.drawstyle)
        d = _path(*_thin(sx, sy, ax.box[2] - ax.box[0]))
        if d:
            out.append(f'<path d="{d}"{_stroke(line.color, line.lw, line.ls, line.alpha)} '
                       f'stroke-linejoin="round"{clip}/>')
        ok = np.r_[False, np.isfinite(x) & np.isfinite(y), False]
        alone = ok[1:-1] & ~ok[:-2] & ~ok[2:]
        if line.drawstyle == "default" and not line.marker and alone.any():
            dot = replace(line, marker="o", ms=2.5 * line.lw, mew=0.0)
            out.append(_markers(x[alone], y[alone], dot).replace("/>", clip + "/>"))
    if line.marker:
        out.append(_markers(x, y, line).replace("/>", clip + "/>"))
    return out


def _patch(ax: Axes, patch: Patch, clip: str) -> str:
    d = "".join(_path(*ax.px(p[:, 0], p[:, 1], patch.coords), close=True) for p in patch.polygons)
    alpha = f' fill-opacity="{patch.alpha:g}"' if patch.alpha < 1 else ""
    return f'<path d="{d}" fill="{patch.color}"{alpha}{clip}/>' if d else ""


def _text(x: float, y: float, text: str, size: float, ha: str = "left", va: str = "baseline",
          color: str = "#000000", bold: bool = False, rotate: bool = False) -> list[str]:
    """One <text> per line; ``rotate``: turned a quarter left about (x, y), its lines stacked rightwards."""
    lines = text.split("\n")
    w = max(text_width(ln, size, bold) for ln in lines)
    left, top, right, _ = place(x, y, w, len(lines), size, ha, va)
    anchor = {"left": ("start", left), "center": ("middle", (left + right) / 2), "right": ("end", right)}[ha]
    style = (f' font-size="{round(size * PX, 2)}"' + (f' text-anchor="{anchor[0]}"' if ha != "left" else "")
             + (f' fill="{color}"' if color != "#000000" else "") + (' font-weight="bold"' if bold else ""))
    out = []
    for k, ln in enumerate(lines):
        base = top + (ASCENT + k * LINE) * size * PX
        if rotate:  # (x, y) is the centre of the turned text: its lines' baselines run up the page, left to right
            bx = x - len(lines) * LINE * size * PX / 2 + (ASCENT + k * LINE) * size * PX
            out.append(f'<text x="{n(bx)}" y="{n(y)}"{style} transform="rotate(-90 {n(bx)} {n(y)})">'
                       f'{escape(ln)}</text>')
        else:
            out.append(f'<text x="{n(anchor[1])}" y="{n(base)}"{style}>{escape(ln)}</text>')
    return out


def _best(ax: Axes, legend: Legend) -> str:
    """Where inside the axes the legend covers the fewest points of what is drawn (matplotlib's 'best')."""
    xs, ys = [], []
    for item in ax.items:
        if isinstance(item, Line):
            x, y = ax.px(item.x, item.y, item.coords)
            if 1 < x.size < 2000:  # a few points far apart: the segments between them count too
                t = np.linspace(0, x.size - 1, (x.size - 1) * 8 + 1)
                x, y = np.interp(t, np.arange(x.size), x), np.interp(t, np.arange(y.size), y)
            xs.append(x), ys.append(y)
        elif isinstance(item, Patch):
            for p in item.polygons:
                x, y = ax.px(p[:, 0], p[:, 1], item.coords)
                xs.append(x), ys.append(y)
    x, y = (np.concatenate(xs), np.concatenate(ys)) if xs else (np.empty(0), np.empty(0))

    def covered(loc: str) -> int:
        bx0, by0, bx1, by1 = legend.box(ax, loc)
        return int(np.count_nonzero((x >= bx0) & (x <= bx1) & (y >= by0) & (y <= by1)))

    return min(BEST, key=covered)


def _legend(ax: Axes, legend: Legend) -> list[str]:
    loc = _best(ax, legend) if legend.loc == "best" else legend.loc
    left, top, _, _ = legend.box(ax, loc)
    fs = legend.size * PX
    _, _, at = legend.dims()
    out = []
    for item, (dx, dy, h) in zip(legend.entries, at):
        hx, cy = left + dx, top + dy + h / 2
        if isinstance(item, Patch):
            alpha = f' fill-opacity="{item.alpha:g}"' if item.alpha < 1 else ""
            out.append(f'<rect x="{n(hx)}" y="{n(cy - 0.35 * fs)}" width="{n(2 * fs)}" height="{n(0.7 * fs)}" '
                       f'fill="{item.color}"{alpha}/>')
        else:
            if item.ls:
                stroke = _stroke(item.color, item.lw, item.ls, item.alpha)
                out.append(f'<path d="M{n(hx)} {n(cy)}h{n(2 * fs)}"{stroke}/>')
            if item.marker:
                out.append(_markers(np.array([hx + fs]), np.array([cy]), item))
        out += _text(hx + 2.8 * fs, cy, item.label, legend.size, va="center")
    return out


def _axes(ax: Axes, i: int) -> list[str]:
    x0, y0, x1, y1 = ax.box
    clip = f' clip-path="url(#c{i})"'
    out = [f'<clipPath id="c{i}"><rect x="{n(x0)}" y="{n(y0)}" width="{n(x1 - x0)}" height="{n(y1 - y0)}"/>'
           '</clipPath>']
    (xt, xl, xm), (yt, yl, ym), rx, ry = _tick_labels(ax)
    xs = (x0 + ax.xaxis.scale.frac(xt) * (x1 - x0)).tolist()
    ys = (y1 - ax.yaxis.scale.frac(yt) * (y1 - y0)).tolist()
    out += [_patch(ax, p, clip) for p in ax.items if isinstance(p, Patch)]
    grid = ([f"M{n(x)} {n(y0)}V{n(y1)}" for x in xs] if ax.xaxis.grid else []) + \
           ([f"M{n(x0)} {n(y)}H{n(x1)}" for y in ys] if ax.yaxis.grid else [])
    if grid:
        out.append(f'<path d="{"".join(grid)}" stroke="#b0b0b0" stroke-opacity="0.3" '
                   f'stroke-width="{round(0.8 * PX, 2)}"/>')
    for line in (i for i in ax.items if isinstance(i, Line)):
        out += _line(ax, line, clip)
    marks = [f"M{n(x0)} {n(y0)}V{n(y1)}H{n(x1)}"]  # the left and bottom spines
    marks += [f"M{n(x)} {n(y1)}v{n(TICK * PX)}" for x in xs] + [f"M{n(x0)} {n(y)}h{n(-TICK * PX)}" for y in ys]
    out.append(f'<path d="{"".join(marks)}" fill="none" stroke="#000000" stroke-width="{round(0.8 * PX, 2)}"/>')
    minor = [f"M{n(x)} {n(y1)}v{n(MINOR_TICK * PX)}" for x in (x0 + ax.xaxis.scale.frac(xm) * (x1 - x0)).tolist()]
    minor += [f"M{n(x0)} {n(y)}h{n(-MINOR_TICK * PX)}" for y in (y1 - ax.yaxis.scale.frac(ym) * (y1 - y0)).tolist()]
    if minor:
        out.append(f'<path d="{"".join(minor)}" stroke="#000000" stroke-width="{round(0.6 * PX, 2)}"/>')
    if ax.xaxis.labelled:
        for x, s in zip(xs, xl):
            out += _text(x, y1 + (TICK + TICK_PAD) * PX, s, FONT, "center", "top")
    if ax.yaxis.labelled:
        for y, s in zip(ys, yl):
            out += _text(x0 - (TICK + TICK_PAD) * PX, y, s, FONT, "right", "center")
    if ax.xaxis.label:
        out += _text((x0 + x1) / 2, y1 + rx + LABEL_PAD * PX, ax.xaxis.label, FONT, "center", "top")
    if ax.yaxis.label:
        h = len(ax.yaxis.label.split("\n")) * LINE * FONT * PX
        out += _text(x0 - ry - LABEL_PAD * PX - h / 2, (y0 + y1) / 2, ax.yaxis.label, FONT, "center", "center",
                     rotate=True)
    if ax.title:
        out += _text((x0 + x1) / 2, y0 - TITLE_PAD * PX, ax.title, TITLE, "center", "bottom")
    for t in (i for i in ax.items if isinstance(i, Text)):
        (tx,), (ty,) = ax.px([t.x], [t.y], t.coords)
        out += _text(float(tx), float(ty), t.text, t.size, t.ha, t.va, t.color, t.bold)
    if ax.legend_ is not None:
        out += _legend(ax, ax.legend_)
    return [s for s in out if s]


def draw(fig: Figure) -> str:
    """The figure laid out and written as an SVG document, ``fig.width`` x ``fig.height`` pixels."""
    fit(fig, outside)
    w, h = n(fig.width), n(fig.height)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'font-family="{FONTS}">', f'<rect width="{w}" height="{h}" fill="#ffffff"/>']
    for i, ax in enumerate(a for row in fig.grid for a in row):
        out += _axes(ax, i)
    return "\n".join(out + ["</svg>"])
