"""The cells figure (`neuromanifold.cells.plot.plot_reading`) marks what a log axis cannot show
(s15 user trial S #1: an identically zero sweep drew a blank panel on matplotlib's default x range
1-10, away from the sweep's grid 1e-5 … 0.1)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib.figure
import pytest

from neuromanifold.cells.plot import plot_reading

#: the trial's grid: 32 points log-spaced over four decades from 1e-5
GRID = [1e-5 * 10 ** (4 * i / 31) for i in range(32)]
#: the widest padding of the x range past the grid, as a factor on each side (a third of a
#: decade: the grid's ends stay where the reader looks for them)
X_PAD_MAX = 10 ** (1 / 3)


def _reading(F: list[float], floor: float = 7.3e-27) -> SimpleNamespace:
    """A cell reading without a rate fit (as `ce_logit_shift`'s flat gauge is read)."""
    fit = SimpleNamespace(t_window=None, slope=None, intercept=None)
    return SimpleNamespace(
        sweep=SimpleNamespace(ts=list(GRID), F=list(F), floor=floor),
        fit=fit,
        k_hat=None,
        r2=None,
        klass="flat_gauge",
    )


def _drawn(reading: Any, tmp_path: Path, monkeypatch) -> Any:
    """The one axes of the figure `plot_reading` saves, drawn with the Agg renderer."""
    saved: list[Any] = []

    def capture(fig: Any, *args: Any, **kwargs: Any) -> None:
        fig.canvas.draw()
        saved.append(fig)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    plot_reading(reading, tmp_path / "cell.png", title="cell")
    (fig,) = saved
    (ax,) = fig.axes
    return ax


def _edge_marks(ax: Any) -> list[float]:
    """The t of the triangles drawn on the panel's lower edge."""
    lo = ax.get_ylim()[0]
    return [
        float(x)
        for ln in ax.get_lines()
        if ln.get_marker() == "^"
        for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True)
        if y == lo
    ]


def _assert_x_range_is_the_grid(ax: Any) -> None:
    lo, hi = ax.get_xlim()
    assert min(GRID) / X_PAD_MAX <= lo <= min(GRID), lo
    assert max(GRID) <= hi <= max(GRID) * X_PAD_MAX, hi


def test_an_identically_zero_sweep_is_marked_on_its_grid(tmp_path: Path, monkeypatch) -> None:
    ax = _drawn(_reading([0.0] * len(GRID)), tmp_path, monkeypatch)
    _assert_x_range_is_the_grid(ax)
    assert sorted(_edge_marks(ax)) == sorted(GRID)
    assert [t.get_text() for t in ax.texts] == ["F = 0 at every t"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "F = 0 (at the lower edge)" in labels
    lo, hi = ax.get_ylim()
    assert lo < 7.3e-27 < hi  # the floor line is inside the panel


@pytest.mark.parametrize(("zero", "word"), [(0.0, "="), (-1e-40, "≤")])
def test_some_non_positive_values_are_marked_at_their_t(
    zero: float, word: str, tmp_path: Path, monkeypatch
) -> None:
    F = [zero if i % 4 == 0 else 1e-10 * t * t for i, t in enumerate(GRID)]
    ax = _drawn(_reading(F, floor=1e-27), tmp_path, monkeypatch)
    _assert_x_range_is_the_grid(ax)
    assert sorted(_edge_marks(ax)) == sorted(t for t, f in zip(GRID, F, strict=True) if f <= 0)
    n = sum(f <= 0 for f in F)
    assert [t.get_text() for t in ax.texts] == [f"F {word} 0 at {n} of {len(F)} t"]
    # every positive value is drawn as a point inside the y range
    (points,) = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    lo, hi = ax.get_ylim()
    assert len(points.get_ydata()) == len(F) - n
    assert all(lo < y < hi for y in points.get_ydata())


def test_a_positive_sweep_has_no_edge_marks(tmp_path: Path, monkeypatch) -> None:
    ax = _drawn(_reading([1e-10 * t * t for t in GRID], floor=1e-27), tmp_path, monkeypatch)
    _assert_x_range_is_the_grid(ax)
    assert _edge_marks(ax) == [] and list(ax.texts) == []
