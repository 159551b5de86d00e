"""How a report's figures are laid out (reports.layout), checked on the figures of synthetic RunDirs: everything
beside an axes lies inside its figure and out of the other axes, as matplotlib itself measures it, artist by
artist, after the layout that measured only the text beside the axes."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from benchmarks.report_speed import synthetic_repeated_rundir, synthetic_rundir
from reports import drawing
from reports.compare import compare_context, entries_of
from reports.drawing import plot_style
from reports.layout import PAD, fit
from reports.run_report import run_context
from reports.rundir_loader import load_rundir

LONG = "a-target-whose-name-runs-on-and-on"  # its legends and bar labels set the margins


@pytest.fixture(scope="module")
def rundirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("drawing")
    phases = (("warm", 1.0, False), ("base", 3.0, True), ("spike", 1.0, True), ("after", 3.0, True))
    one = synthetic_rundir(base / "one", 4000, targets=((LONG, 0.05), ("b", 0.4)), phases=phases, error_rate=0.05)
    two = synthetic_rundir(base / "two", 2000, targets=(("c", 0.002),), seed=1)
    repeated = synthetic_repeated_rundir(base / "rep", {"naive": [0.2, 0.25, 0.22], LONG: [0.05, 0.06, 0.05]}, 500)
    return one, two, repeated


def _figures(rundirs, monkeypatch) -> list:
    """Every figure the reports of ``rundirs`` and their comparison draw, as built (before its layout)."""
    kept = []
    monkeypatch.setattr(drawing, "fit", lambda fig: kept.append(fig))  # to_uri lays out, then draws: kept, not laid
    one, two, _ = rundirs
    for path in rundirs:
        run_context(load_rundir(path))
    compare_context(entries_of([str(one), str(two)]))
    return kept


def test_every_figure_fits_in_itself(rundirs, monkeypatch):
    figs = _figures(rundirs, monkeypatch)
    assert len(figs) >= 10
    for fig in figs:
        with plot_style():
            fit(fig)
            renderer = FigureCanvasAgg(fig).get_renderer()
            tight = fig.get_tightbbox(renderer)  # inches: every artist's extent, laid out by matplotlib
            w, h = fig.get_size_inches()
            margin = min(tight.x0, tight.y0, w - tight.x1, h - tight.y1) * 72  # points to spare inside the figure
            assert margin > PAD * 9 * 0.5, (fig.axes[0].get_ylabel(), margin)
            boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
            for i, ax in enumerate(fig.axes):  # nothing of one axes enters another's plotting area
                for j, other in enumerate(boxes):
                    if i != j:
                        inter = other.intersection(other, ax.bbox)
                        assert inter is None or min(inter.width, inter.height) < 1.0, (i, j, inter)
