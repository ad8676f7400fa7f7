"""The figures of `read --out` and of the survey can be read (s12 trial H #7).

* the sweep panels name their axes (x: t, y: F_u(t)), say that the dashed line is the floor and
  draw tick labels of at least 7 pt at a resolution where a panel is legible;
* the class map's counts contrast with their cell (white on dark cells, black on light ones);
* the survey's log-scale spread panel marks an exact 0 as 0 instead of drawing a bar that looks
  like a tiny positive spread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.figure
import numpy as np
from matplotlib.colors import to_rgb

from neuromanifold.linear.survey import SurveyResult, SurveyRow
from neuromanifold.linear.survey_report import plot_survey
from neuromanifold.report import figures
from neuromanifold.singular.reading import Reading
from test_report_figure_titles import _captured, _record  # shared with the title tests

#: smallest tick-label size the trial could read on the saved PNG (it measured 6 pt: too small)
MIN_TICK_PT = 7.0
#: smallest plot area of a sweep panel, in pixels of the saved PNG: the trial's figure (288 × 238
#: px at dpi 90, 6-pt ticks) had plot areas of about 230-240 × 125-145 px, too small to read
MIN_PANEL_PX = (280.0, 180.0)
#: WCAG 2 minimum contrast ratio for normal text (level AA)
WCAG_AA_CONTRAST = 4.5


def _legible_panels(fig: Any, n: int, xlabel: str, ylabel: str) -> list[Any]:
    """The ``n`` visible panels of ``fig``, each checked: its axis labels contain ``xlabel`` and
    ``ylabel`` (``$`` dropped), ticks of at least `MIN_TICK_PT`, a plot area of `MIN_PANEL_PX`."""
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == n
    renderer = fig.canvas.get_renderer()
    for ax in panels:
        assert xlabel in ax.get_xlabel() and ylabel in ax.get_ylabel().replace("$", "")
        for label in ax.get_xticklabels() + ax.get_yticklabels():
            assert label.get_fontsize() >= MIN_TICK_PT
        box = ax.get_window_extent(renderer)
        assert box.width >= MIN_PANEL_PX[0] and box.height >= MIN_PANEL_PX[1], box
    return panels


def _relative_luminance(colour: Any) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(colour)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: Any, b: Any) -> float:
    """WCAG 2 contrast ratio ``(L_light + 0.05) / (L_dark + 0.05)``."""
    la, lb = sorted((_relative_luminance(a), _relative_luminance(b)))
    return (lb + 0.05) / (la + 0.05)


def test_sweep_panels_name_their_axes_and_the_floor(tmp_path: Path, monkeypatch) -> None:
    drawn = _captured(monkeypatch)
    reading = Reading(
        directions=tuple(_record(f"fc{i}", "genuine_singularity") for i in range(5)),
        not_covered=(),
        meta={},
    )
    figures.plot_sweeps(reading, tmp_path / "sweeps.png", title="planted")
    (fig,) = drawn
    for ax in _legible_panels(fig, 5, "t", "F_u(t)"):
        assert ax.get_xlabel().strip() == "t"
        (floor,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert floor.get_label() == "floor"
    # the figure says in words that the dashed line is the floor
    words = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert "dashed: floor" in " ".join(words.split())


def test_class_map_counts_contrast_with_their_cell(tmp_path: Path, monkeypatch) -> None:
    drawn = _captured(monkeypatch)
    # fc1: 6 genuine singularities (the darkest cell), 1 live (a light cell)
    recs = [_record("fc1", "genuine_singularity")] * 6 + [_record("fc1", "live")]
    recs += [_record("fc2", "curved_gauge")] * 3
    figures.plot_class_map(
        Reading(directions=tuple(recs), not_covered=(), meta={}), tmp_path / "c.png"
    )
    (fig,) = drawn
    (ax,) = fig.axes
    (image,) = ax.get_images()
    counts = np.asarray(image.get_array())
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
    assert {k: int(t.get_text()) for k, t in texts.items()} == {
        (i, j): int(counts[i, j]) for i, j in zip(*np.nonzero(counts), strict=True)
    }
    darkest = np.unravel_index(np.argmax(counts), counts.shape)
    lightest = np.unravel_index(np.argmin(np.where(counts > 0, counts, np.inf)), counts.shape)
    assert to_rgb(texts[darkest].get_color()) != to_rgb(texts[lightest].get_color())
    for (i, j), text in texts.items():
        cell = image.cmap(image.norm(counts[i, j]))
        assert _contrast(text.get_color(), cell) >= WCAG_AA_CONTRAST, (i, j, text.get_color())


def _row(name: str, spread: float) -> SurveyRow:
    return SurveyRow(
        architecture=name,
        condition="c",
        fiber_notion="n",
        samples=2,
        n_dependent=0,
        fraction_dependent=0.0,
        max_spread=spread,
        verdict="independent",
        paper_claim=None,
        agrees=None,
        routes_agree_fraction=None,
        n_failed=0,
        mean_points=1.0,
    )


def test_survey_marks_an_exact_zero_spread_as_zero(tmp_path: Path, monkeypatch) -> None:
    saved: list[Any] = []

    def capture(fig: Any, *args: Any, **kwargs: Any) -> None:
        fig.canvas.draw()
        saved.append(fig)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    # the trial's case: an exact 0 next to a round-off spread of the balanced FC row
    rows = (_row("zero", 0.0), _row("roundoff", 1.05e-15), _row("spread", 0.3))
    plot_survey(SurveyResult(rows=rows, samples=2, seed=0), str(tmp_path / "survey.png"))
    (fig,) = saved
    ax = fig.axes[1]
    assert ax.get_xscale() == "log"
    smallest_positive = min(r.max_spread for r in rows if r.max_spread > 0)
    bars = {}
    for patch in ax.patches:
        bars[round(patch.get_y() + patch.get_height() / 2)] = patch.get_x() + patch.get_width()
    # the zero row draws no bar; every drawn bar ends at its row's positive spread
    assert 0 not in bars
    for i, x1 in bars.items():
        assert rows[i].max_spread >= smallest_positive
        assert x1 == rows[i].max_spread
    # the zero row is marked "0" at the axis' left end, left of every positive spread
    (mark,) = [t for t in ax.texts if t.get_text().strip().startswith("0")]
    x, y = mark.xy if hasattr(mark, "xy") else mark.get_position()
    assert round(y) == 0
    assert x == ax.get_xlim()[0] and x < smallest_positive


def test_survey_threshold_line_stays_inside_and_a_failed_row_is_not_a_zero(
    tmp_path: Path, monkeypatch
) -> None:
    """Audit S12c #2 and #5: with every positive spread below ntk_rtol, set_xlim(left=…) turned
    off autoscaling and the dashed threshold line fell outside the axis; a row whose samples all
    failed (no spread measured) was marked "0 (exactly)" like a measured zero."""
    import dataclasses

    saved: list[Any] = []

    def capture(fig: Any, *args: Any, **kwargs: Any) -> None:
        fig.canvas.draw()
        saved.append(fig)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    failed = dataclasses.replace(
        _row("failed", 0.0), n_failed=2, fraction_dependent=float("nan"), verdict=None
    )
    rows = (_row("zero", 0.0), _row("roundoff", 1.05e-15), failed)
    result = SurveyResult(rows=rows, samples=2, seed=0)
    plot_survey(result, str(tmp_path / "survey.png"))
    (fig,) = saved
    ax = fig.axes[1]
    lo, hi = ax.get_xlim()
    (threshold,) = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert lo < threshold.get_xdata()[0] == result.ntk_rtol < hi
    marks = {round(t.xy[1]): t.get_text() for t in ax.texts}
    assert marks[0] == "0 (exactly)"
    assert marks[2] == "no sample on the manifold"


def test_spectra_panels_name_their_axes_and_the_threshold(tmp_path: Path, monkeypatch) -> None:
    """The factor-spectrum figure of `read --out` gets the sweeps' treatment (it had 6-pt ticks
    at dpi 90 and no axis labels): labelled axes, readable ticks, the dotted threshold named."""
    from neuromanifold.report.spectra import SPREAD_TAU

    drawn = _captured(monkeypatch)
    spectra = {
        f"fc{i}": {"A": [1.0, 0.1, 1e-16], "G": [1.0, 0.5], "A_kernel": 1, "G_kernel": 0}
        for i in range(3)
    }
    figures.plot_spectra(spectra, tmp_path / "spectra.png", title="planted")
    (fig,) = drawn
    for ax in _legible_panels(fig, 3, "eigenvalue index", "α_max"):
        (dotted,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
        assert dotted.get_ydata()[0] == SPREAD_TAU
    words = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert " ".join(figures.SPECTRA_KEY.split()) in " ".join(words.split())
    # the dotted line is named as τ, the near-kernel's threshold (with its gap: s17 trial AF #3)
    assert f"below τ = {SPREAD_TAU:g} (dotted)" in figures.SPECTRA_KEY
