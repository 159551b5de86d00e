"""A figure's layout from measuring what stands beside its axes, not from drawing it.

matplotlib's layouts measure a figure by laying out every artist of it: ``tight_layout`` once (about half as long
as drawing the figure), constrained layout twice. What decides a margin is far less: the tick labels' text (their
strings, from the axis' locator and formatter, and the size of each in the font), the axis labels, the titles,
the texts that are not clipped to their axes, and the legends anchored outside them. :func:`fit` measures those
alone (with one shared renderer, whose text sizes are cached across figures), sets the grid's spacing so that
each fits with :data:`PAD` to spare, and places each axis label beside its tick labels, as matplotlib would when
drawing (it then need not measure the tick labels again). It measures again at the layout it made, until that
stops moving: a locator picks its ticks by the axis' length, and a text placed in axes fractions moves with it.

Sizes are in display pixels at the figure's dpi, as ``tight_layout``'s are. Figures are a grid of axes from one
GridSpec (:func:`reports.drawing.figure`), each axes with its ticks at its bottom and left.
"""

from __future__ import annotations

from functools import cache

#: Padding around and between the axes (tick labels, titles, legends beside them), in font sizes.
PAD = 0.6
#: Measurings at most: each at the last one's layout, until the margins move by under half a pixel (a legend
#: centred over its axes moves half as far as the axes' edge: each measuring halves what it misses).
PASSES = 6


@cache
def _renderer(dpi: float):
    """One measuring renderer per dpi (text sizes only: its canvas is one pixel), shared by every figure."""
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, dpi)


@cache
def _text_size(renderer, text: str, font) -> tuple[float, float]:
    """(width, height) in pixels of one line of ``text`` in ``font`` (a FontProperties, hashable by value)."""
    from matplotlib.cbook import is_math_text

    w, h, _ = renderer.get_text_width_height_descent(text, font, ismath=is_math_text(text))
    return w, h


class _Box:
    """How far (pixels) what belongs to one axes stands out beyond each of its sides."""

    __slots__ = ("left", "bottom", "right", "top", "yticks", "xticks")

    def __init__(self):
        self.left = self.bottom = self.right = self.top = 0.0
        self.yticks = self.xticks = 0.0  # the tick labels' own reach: where matplotlib puts the axis label

    def cover(self, ext, box) -> None:
        """Stretch to cover ``ext`` (a bbox in display pixels) beside ``box`` (the axes')."""
        self.left = max(self.left, box.x0 - ext.x0)
        self.right = max(self.right, ext.x1 - box.x1)
        self.bottom = max(self.bottom, box.y0 - ext.y0)
        self.top = max(self.top, ext.y1 - box.y1)


def _tick_labels(axis, renderer, span: tuple[float, float], to_px) -> tuple[float, float, float]:
    """(reach beyond the axis line, across it; overhang beyond its low and its high end, along it), pixels, of
    the tick labels ``axis`` will draw: its locators' ticks in view, labelled by its formatters."""
    ticks = axis.get_major_ticks(1)
    if not ticks or not ticks[0].label1.get_visible():
        return 0.0, 0.0, 0.0
    tick = ticks[0]
    font = tick.label1.get_fontproperties().copy()  # a cache key: not to change under it
    offset = (tick.get_tick_padding() + tick.get_pad()) * to_px
    lo, hi = sorted(axis.get_view_interval())
    reach, over_lo, over_hi = 0.0, 0.0, 0.0
    for locs, formatter in ((axis.get_majorticklocs(), axis.get_major_formatter()),
                            (axis.get_minorticklocs(), axis.get_minor_formatter())):
        shown = [loc for loc in locs if lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo)]
        if not shown:
            continue
        for loc, text in zip(shown, formatter.format_ticks(shown)):
            if not text:
                continue
            w, h = _text_size(renderer, text, font)
            across, along = (w, h) if axis.axis_name == "y" else (h, w)
            reach = max(reach, offset + across)
            at = span[0] + (span[1] - span[0]) * _fraction(axis, loc, lo, hi)
            over_lo = max(over_lo, span[0] - (at - along / 2))
            over_hi = max(over_hi, at + along / 2 - span[1])
        offset_text = formatter.get_offset()  # "1e6", "+1e4": beside the axis' far end
        if offset_text:
            w, h = _text_size(renderer, offset_text, font)
            over_hi = max(over_hi, (h if axis.axis_name == "y" else 0.0) + 3 * to_px)
            reach = max(reach, offset + (h if axis.axis_name == "x" else w))
    return reach, over_lo, over_hi


def _fraction(axis, loc: float, lo: float, hi: float) -> float:
    """Where ``loc`` lies along the axis, 0 at its low end, 1 at its high end (through the axis' scale)."""
    t = axis.get_transform()
    a, b, x = (float(v) for v in t.transform([lo, hi, loc]))
    return (x - a) / (b - a) if b != a else 0.5


def _measure(ax, renderer) -> _Box:
    """What stands beside ``ax``: tick labels, axis labels, title, unclipped texts, legends anchored outside."""
    fig = ax.get_figure()
    to_px = fig.dpi / 72
    box, out = ax.bbox, _Box()
    ly, below, above = _tick_labels(ax.yaxis, renderer, (box.y0, box.y1), to_px)
    lx, left_end, right_end = _tick_labels(ax.xaxis, renderer, (box.x0, box.x1), to_px)
    out.yticks, out.xticks = ly, lx
    marks_y = ax.yaxis.get_tick_padding() * to_px
    marks_x = ax.xaxis.get_tick_padding() * to_px
    out.left, out.bottom = max(ly, marks_y), max(lx, marks_x)
    out.top, out.right = above, right_end
    out.bottom = max(out.bottom, below)
    out.left = max(out.left, left_end)
    for axis, side in ((ax.yaxis, "left"), (ax.xaxis, "bottom")):
        label = axis.label
        if label.get_visible() and label.get_text():
            ext = label.get_window_extent(renderer)
            size = ext.width if side == "left" else ext.height
            reach = (out.yticks if side == "left" else out.xticks) + axis.labelpad * to_px + size
            setattr(out, side, max(getattr(out, side), reach))
    if ax.title.get_visible() and ax.title.get_text():
        out.cover(ax.title.get_window_extent(renderer), box)
    for text in ax.texts:
        if text.get_visible() and text.get_text() and not text.get_clip_on():  # a clipped one stays inside
            out.cover(text.get_window_extent(renderer), box)
    legend = ax.get_legend()
    if legend is not None and legend.get_visible() and legend.get_bbox_to_anchor() is not ax.bbox:
        out.cover(legend.get_window_extent(renderer), box)
    return out


def fit(fig) -> None:
    """Lay out ``fig``'s grid of axes: every tick label, axis label, title, unclipped text and outside legend
    within the figure and clear of the next axes, :data:`PAD` font sizes to spare; axis labels placed."""
    axes = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    if not axes:
        return
    import matplotlib as mpl

    renderer = _renderer(fig.dpi)
    rows, cols = axes[0].get_subplotspec().get_gridspec().get_geometry()
    pad = PAD * mpl.rcParams["font.size"] * fig.dpi / 72
    width, height = fig.bbox.width, fig.bbox.height
    last = None
    for _ in range(PASSES):
        boxes = [(ax.get_subplotspec(), _measure(ax, renderer)) for ax in axes]
        left = max((b.left for s, b in boxes if s.colspan.start == 0), default=0.0) + pad
        right = max((b.right for s, b in boxes if s.colspan.stop == cols), default=0.0) + pad
        top = max((b.top for s, b in boxes if s.rowspan.start == 0), default=0.0) + pad
        bottom = max((b.bottom for s, b in boxes if s.rowspan.stop == rows), default=0.0) + pad
        hgap = max([pad] + [a.bottom + b.top + pad for sa, a in boxes for sb, b in boxes
                            if sb.rowspan.start == sa.rowspan.stop]) if rows > 1 else 0.0
        wgap = max([pad] + [a.right + b.left + pad for sa, a in boxes for sb, b in boxes
                            if sb.colspan.start == sa.colspan.stop]) if cols > 1 else 0.0
        cell_h = max(height - top - bottom - (rows - 1) * hgap, rows) / rows
        cell_w = max(width - left - right - (cols - 1) * wgap, cols) / cols
        fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                            top=1 - top / height, hspace=hgap / cell_h, wspace=wgap / cell_w)
        now = (left, right, top, bottom, hgap, wgap)
        if last is not None and max(abs(a - b) for a, b in zip(now, last)) < 0.5:
            break  # what stands beside the axes no longer moves with them
        last = now
    to_px = fig.dpi / 72
    for ax in axes:  # where matplotlib would put them, once it had measured the tick labels at their final size
        box = ax.bbox
        ly = _tick_labels(ax.yaxis, renderer, (box.y0, box.y1), to_px)[0]
        lx = _tick_labels(ax.xaxis, renderer, (box.x0, box.x1), to_px)[0]
        ax.yaxis.set_label_coords(-(ly + ax.yaxis.labelpad * to_px) / box.width, 0.5)
        ax.xaxis.set_label_coords(0.5, -(lx + ax.xaxis.labelpad * to_px) / box.height)
