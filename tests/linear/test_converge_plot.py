"""The convergence figure (`plot_convergence`) clamps nothing (s15 user trial S #7: t = 0 was
drawn at 1e-6 with the first times stacked on it, and zero drifts and rounding-level gaps ≤ 0 at
1e-18, as spikes that read as data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.figure
import numpy as np

from neuromanifold.linear.converge import ConvergenceReport, ConvergenceRun, plot_convergence

#: the trial's first times: t = 0, then two steps below 1e-6 that were drawn at 1e-6
TIMES = (0.0, 5.4e-9, 1.1e-8, 4.7e-7, 1e-3, 1.0, 10.0, 100.0)
LOSS_FINAL = 0.75
#: gaps ℓ(v(t)) − ℓ_final; the last two are rounding around ℓ_final (the trial's min −1.8e-15)
GAPS = (2.0, 1.9, 1.8, 1.0, 1e-3, 1e-9, 0.0, -1.8e-15)
#: drifts: 0 at t = 0 by definition, one more exact 0, then solver round-off
DRIFTS = (0.0, 0.0, 1e-16, 2e-15, 1e-13, 1e-12, 1e-12, 1e-12)


def _run() -> ConvergenceRun:
    return ConvergenceRun(
        index=0, reached_tol=True, t_final=TIMES[-1], loss_final=LOSS_FINAL, loss_at_zero=3.0,
        grad_norm=1e-9, jacobian_rank=5, dim_M=5, sigma_ratio=0.1, v_norm=1.0,
        max_invariant_drift=max(DRIFTS), nfev=10, times=TIMES,
        losses=tuple(LOSS_FINAL + g for g in GAPS), drifts=DRIFTS,
    )  # fmt: skip


def _drawn(tmp_path: Path, monkeypatch) -> tuple[Any, Any]:
    """The figure `plot_convergence` saves, drawn with the Agg renderer, and that renderer (the
    figure is closed after saving, which detaches its canvas)."""
    saved: list[Any] = []

    def capture(fig: Any, *args: Any, **kwargs: Any) -> None:
        fig.canvas.draw()
        saved.append((fig, fig.canvas.get_renderer()))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    plot_convergence([ConvergenceReport("LCN", (_run(),), 0)], str(tmp_path / "c.png"))
    (drawn,) = saved
    return drawn


def _check_panel(ax: Any, values: tuple[float, ...], zero: str) -> None:
    """Positive values at t > 0 are drawn at (t, value); the others at t > 0 as triangles on
    the lower edge; t = 0 is not drawn; the title counts both."""
    lo, hi = ax.get_ylim()
    (curve,) = [ln for ln in ax.get_lines() if ln.get_marker() in ("None", None, "")]
    drawn = [
        (float(x), float(y))
        for x, y in zip(curve.get_xdata(), curve.get_ydata(), strict=True)
        if np.isfinite(y)
    ]
    expected = [(t, v) for t, v in zip(TIMES, values, strict=True) if t > 0 and v > 0]
    assert drawn == expected
    assert all(lo < y < hi for _, y in drawn)
    (marks,) = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    at_zero = [t for t, v in zip(TIMES, values, strict=True) if t > 0 and v <= 0]
    assert marks.get_xdata().tolist() == at_zero
    assert set(marks.get_ydata().tolist()) == {lo} and not marks.get_clip_on()
    assert f"{len(at_zero)} points with" in ax.get_title() and zero in ax.get_title()
    assert "1 points at t = 0 not drawn" in ax.get_title()


def test_nothing_is_clamped_and_zeros_are_marked(tmp_path: Path, monkeypatch) -> None:
    fig, _ = _drawn(tmp_path, monkeypatch)
    ax_l, ax_d = fig.axes
    # the gaps as the figure defines them, ℓ(v(t)) − ℓ_final in float64 (GAPS up to rounding)
    gaps = tuple(float(x) for x in np.asarray(_run().losses) - LOSS_FINAL)
    assert [g <= 0 for g in gaps] == [g <= 0 for g in GAPS]
    _check_panel(ax_l, gaps, "≤ 0")
    _check_panel(ax_d, DRIFTS, "= 0")
    assert ax_l.get_title().startswith("LCN")


def test_the_title_lies_inside_a_one_report_figure(tmp_path: Path, monkeypatch) -> None:
    fig, renderer = _drawn(tmp_path, monkeypatch)
    box = fig._suptitle.get_window_extent(renderer)
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (box, fig.bbox)
    assert fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, (box, fig.bbox)
