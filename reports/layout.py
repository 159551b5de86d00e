"""A figure's layout from the size of what stands beside its axes: text sizes estimated, never rendered.

The SVG names DejaVu Sans first (matplotlib's font, and the browsers' sans-serif on Linux); its advance widths per
ASCII character are below, any other character counts as wide as ``≤`` or ``−``, bold as 1.1 times regular. A
browser that substitutes a font (Arial, Helvetica) draws narrower text, never wider: the estimate is a bound.

:func:`fit` sets the grid's spacing so that each axes' tick labels, axis labels, title, texts and outside legends
(what :func:`reports.render.outside` measures) fit within the figure and clear of the next axes, :data:`PAD` font
sizes to spare; it measures again at the layout it made until that stops moving (a locator picks its ticks by the
axis' length, and a text placed in data coordinates moves with the axes).
"""

from __future__ import annotations

DPI = 100
PX = DPI / 72  # pixels per point: font sizes, line widths and paddings are in points, as in matplotlib
FONT = 9  # points: every text but titles (1.2 times), legends and notes that name their own size
#: Line boxes in font sizes: a line's height, and its baseline's depth below the top of its box.
LINE, ASCENT = 1.2, 0.93
#: Padding around and between the axes, in font sizes.
PAD = 0.6
PASSES = 6

# DejaVu Sans advance widths, thousandths of an em, characters 32 (space) to 126 (~)
_WIDTHS = (318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636,
           636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295,
           295, 656, 557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838,
           500, 500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521,
           392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838)
_OTHER = 838


def text_width(line: str, size: float, bold: bool = False) -> float:
    """Width in pixels of one line of text at ``size`` points."""
    em = sum(_WIDTHS[o - 32] if 32 <= (o := ord(c)) < 127 else _OTHER for c in line) / 1000
    return em * size * PX * (1.1 if bold else 1.0)


def text_size(text: str, size: float, bold: bool = False) -> tuple[float, float]:
    """(width, height) in pixels of ``text`` (lines split at newlines) at ``size`` points."""
    lines = text.split("\n")
    return max(text_width(ln, size, bold) for ln in lines), len(lines) * LINE * size * PX


def place(x: float, y: float, w: float, lines: int, size: float, ha: str, va: str) -> tuple[float, float, float,
                                                                                           float]:
    """(left, top, right, bottom) in pixels (y down) of a text ``w`` pixels wide of ``lines`` lines at ``size`` points,
    aligned on the point (x, y) as matplotlib aligns one: ``ha`` left / center / right, ``va`` top / center / bottom
    / baseline (of its first line)."""
    h, px = lines * LINE * size * PX, size * PX
    x0 = x - {"left": 0.0, "center": w / 2, "right": w}[ha]
    top = {"top": y, "center": y - h / 2, "bottom": y - h, "baseline": y - ASCENT * px}[va]
    return x0, top, x0 + w, top + h


def _cells(fig, left: float, right: float, top: float, bottom: float, hgap: float, wgap: float) -> None:
    """Give each axes of ``fig`` its box (left, top, right, bottom pixels) within the given margins and gaps."""
    rows, cols = len(fig.ratios), fig.cols
    cell_w = max(fig.width - left - right - (cols - 1) * wgap, cols) / cols
    heights = fig.height - top - bottom - (rows - 1) * hgap
    y = top
    for r, ratio in enumerate(fig.ratios):
        h = max(heights * ratio / sum(fig.ratios), 1.0)
        for c in range(cols):
            x = left + c * (cell_w + wgap)
            fig.grid[r][c].box = (x, y, x + cell_w, y + h)
        y += h + hgap


def fit(fig, beside) -> None:
    """Lay out ``fig``'s grid of axes: every tick label, axis label, title, text and outside legend within the
    figure and clear of the next axes, :data:`PAD` font sizes to spare. ``beside(ax)``: how far (pixels) what
    belongs to an axes stands out beyond its box, (left, top, right, bottom)."""
    pad = PAD * FONT * PX
    rows, cols = len(fig.ratios), fig.cols
    now = (pad, pad, pad, pad, pad, pad)
    for _ in range(PASSES):
        _cells(fig, *now)
        reach = [[beside(ax) for ax in row] for row in fig.grid]  # (left, top, right, bottom) beyond each box
        left = max(reach[r][0][0] for r in range(rows)) + pad
        right = max(reach[r][-1][2] for r in range(rows)) + pad
        top = max(reach[0][c][1] for c in range(cols)) + pad
        bottom = max(reach[-1][c][3] for c in range(cols)) + pad
        hgap = max([pad] + [reach[r][c][3] + reach[r + 1][c][1] + pad for r in range(rows - 1) for c in range(cols)])
        wgap = max([pad] + [reach[r][c][2] + reach[r][c + 1][0] + pad for r in range(rows) for c in range(cols - 1)])
        last, now = now, (left, right, top, bottom, hgap, wgap)
        if max(abs(a - b) for a, b in zip(now, last)) < 0.5:
            break  # what stands beside the axes no longer moves with them
    _cells(fig, *now)
