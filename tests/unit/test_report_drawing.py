"""How a report's figures are drawn (reports.svg, reports.render), checked on the SVG itself: every figure of
synthetic RunDirs' reports keeps its text inside the figure and out of the other axes' plotting areas (text boxes
from the layout's own width estimate); log axes tick their decades with millisecond labels; a known point lands on
its pixel; a line of a million points stays a few kilobytes; the same figure gives the same bytes."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from benchmarks.report_speed import synthetic_repeated_rundir, synthetic_rundir
from reports import drawing, render
from reports.compare import compare_context, entries_of
from reports.drawing import figure
from reports.layout import ASCENT, FONT, LINE, PAD, PX, text_width
from reports.plots import fraction_log_axis, ms_log_axis
from reports.run_report import run_context
from reports.rundir_loader import load_rundir

LONG = "a-target-whose-name-runs-on-and-on"  # its legends and bar labels set the margins
NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def rundirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("drawing")
    phases = (("warm", 1.0, False), ("base", 3.0, True), ("spike", 1.0, True), ("after", 3.0, True))
    one = synthetic_rundir(base / "one", 4000, targets=((LONG, 0.05), ("b", 0.4)), phases=phases, error_rate=0.05)
    two = synthetic_rundir(base / "two", 2000, targets=(("c", 0.002),), seed=1)
    repeated = synthetic_repeated_rundir(base / "rep", {"naive": [0.2, 0.25, 0.22], LONG: [0.05, 0.06, 0.05]}, 500)
    return one, two, repeated


def _svgs(rundirs, monkeypatch) -> list[str]:
    """Every figure the reports of ``rundirs`` and their comparison draw, as SVG text."""
    kept = []

    def keep(fig):
        kept.append(render.draw(fig))
        return kept[-1]

    monkeypatch.setattr(drawing, "draw", keep)
    for path in rundirs:
        run_context(load_rundir(path))
    if len(rundirs) > 1:
        compare_context(entries_of([str(rundirs[0]), str(rundirs[1])]))
    return kept


def _boxes(svg: str) -> tuple[tuple[float, float], list[tuple[float, float, float, float]], list[tuple]]:
    """(figure size, each axes' plotting area, each text line as (left, top, right, bottom, axes index, text)),
    pixels; a text's box from its font size, anchor and baseline and :func:`reports.layout.text_width`."""
    root = ET.fromstring(svg)
    size = float(root.get("width")), float(root.get("height"))
    areas, texts = [], []
    for el in root:
        if el.tag == NS + "clipPath":
            r = el.find(NS + "rect")
            x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
            areas.append((x, y, x + w, y + h))
        elif el.tag == NS + "text":
            px = float(el.get("font-size"))
            w = text_width(el.text, px / PX, el.get("font-weight") == "bold")
            x, y = float(el.get("x")), float(el.get("y"))
            lo = {"start": 0.0, "middle": w / 2, "end": w}[el.get("text-anchor", "start")]
            if el.get("transform"):  # turned a quarter left about (x, y): the text runs up the page
                assert el.get("transform") == f"rotate(-90 {el.get('x')} {el.get('y')})"
                box = (x - ASCENT * px, y - w + lo, x + (LINE - ASCENT) * px, y + lo)
            else:
                box = (x - lo, y - ASCENT * px, x - lo + w, y + (LINE - ASCENT) * px)
            texts.append((*box, len(areas) - 1, el.text))
    return size, areas, texts


def test_every_figure_fits_in_itself(rundirs, monkeypatch):
    svgs = _svgs(rundirs, monkeypatch)
    assert len(svgs) >= 10
    spare = PAD * FONT * PX * 0.5
    for svg in svgs:
        (w, h), areas, texts = _boxes(svg)
        assert texts and areas
        for x0, y0, x1, y1, own, text in texts:
            assert min(x0, y0, w - x1, h - y1) > spare, (text, (x0, y0, x1, y1), (w, h))
            for i, (a0, b0, a1, b1) in enumerate(areas):  # nothing of one axes enters another's plotting area
                if i != own:
                    overlap = min(x1, a1) - max(x0, a0), min(y1, b1) - max(y0, b0)
                    assert min(overlap) < 1.0, (text, i, own)


def _texts(svg: str) -> list[str]:
    return [t[-1] for t in _boxes(svg)[2]]


def test_log_axes_tick_decades_with_plain_labels():
    fig, ax = figure(6, 3)
    a = ax[0, 0]
    a.plot([0.8, 3000], [1e-4, 1], color="#1f77b4")
    a.set_xscale("log"), ms_log_axis(a.xaxis), a.set_yscale("log"), fraction_log_axis(a.yaxis)
    labels = _texts(render.draw(fig))
    assert {"1", "10", "100", "1000", "0.001", "0.01", "0.1", "1"} <= set(labels)
    assert not any("e" in s or "^" in s for s in labels)  # plain numbers, no 10^k, no 1e-03
    fig, ax = figure(6, 3)
    ax[0, 0].plot([8, 300], [1, 2], color="#1f77b4")
    ax[0, 0].set_xscale("log"), ms_log_axis(ax[0, 0].xaxis)
    assert {"10", "20", "50", "100", "200"} <= set(_texts(render.draw(fig)))  # 1, 2, 5 of each decade, where they fit


def test_a_known_point_lands_on_its_pixel():
    for scale, lim, point, frac in (("linear", (0, 10), 2.5, 0.25), ("log", (1, 1000), 10.0, 1 / 3)):
        fig, ax = figure(6, 3)
        a = ax[0, 0]
        a.set_xscale(scale), a.set_xlim(*lim), a.set_ylim(0, 100)
        a.plot([point], [75], "o", color="#d62728")
        svg = render.draw(fig)
        _, ((x0, y0, x1, y1),), _ = _boxes(svg)
        m = re.search(r'<path d="M([\d.]+) ([\d.]+)a([\d.]+) [^"]*" fill="#d62728"', svg)
        x, y, r = (float(v) for v in m.groups())
        assert x + r == pytest.approx(x0 + frac * (x1 - x0), abs=0.1)
        assert y == pytest.approx(y1 - 0.75 * (y1 - y0), abs=0.1)


def test_a_million_points_draw_as_few_as_the_pixels():
    rng = np.random.default_rng(0)
    y = np.cumsum(rng.normal(size=1_000_000))
    fig, ax = figure(11, 3)
    ax[0, 0].plot(np.arange(y.size), y, color="#1f77b4")
    svg = render.draw(fig)
    assert len(svg) < 120_000  # about 4 points per pixel column of a 1,000-pixel axes
    path = re.search(r'<path d="(M[^"]*)" fill="none" stroke="#1f77b4"', svg).group(1)
    ys = [float(v) for v in re.findall(r"[\d.]+ ([\d.]+)", path)]
    (_, areas, _) = _boxes(svg)
    x0, y0, x1, y1 = areas[0]
    span = y.max() - y.min()
    top, bottom = y1 - (y.max() - y.min() + 0.05 * span) / (1.1 * span) * (y1 - y0), y1 - 0.05 / 1.1 * (y1 - y0)
    assert min(ys) == pytest.approx(top, abs=0.2) and max(ys) == pytest.approx(bottom, abs=0.2)  # extremes kept


def test_the_same_figures_give_the_same_bytes(rundirs, monkeypatch):
    first = _svgs(rundirs[1:2], monkeypatch)
    assert first and first == _svgs(rundirs[1:2], monkeypatch)
    assert not any(re.search(r"\d{4}-\d\d-\d\d|id=\"(?!c\d+\")", s) for s in first)  # no dates, ids in order


def test_a_point_alone_between_gaps_is_a_dot():
    """A second in which requests completed between two in which none did: matplotlib drew nothing of it."""
    fig, ax = figure(6, 3)
    ax[0, 0].plot([1, 2, 3, 4, 5], [2000, np.nan, 2000, np.nan, 2000], color="#d62728")
    svg = render.draw(fig)
    dots = re.search(r'<path d="([^"]*)" fill="#d62728"', svg).group(1)
    assert dots.count("M") == 3
