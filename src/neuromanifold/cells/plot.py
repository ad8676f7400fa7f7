"""Log–log plot of a cell's directional-Fisher sweep with the selected window marked.

matplotlib (Agg backend) is imported inside the function, so importing this module is free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["plot_reading"]


def _nonpositive_note(n_zero: int, n_nonpositive: int, n: int) -> str:
    """The in-panel text for ``n_nonpositive`` values ``F ≤ 0`` (``n_zero`` of them exact zeros)
    among ``n``: the report's `_zero_note` when all of them are exact zeros."""
    from neuromanifold.report.figures import _zero_note

    if n_zero == n_nonpositive:
        return _zero_note(n_zero, n)
    return "F ≤ 0 at every t" if n_nonpositive == n else f"F ≤ 0 at {n_nonpositive} of {n} t"


def plot_reading(
    reading: Any, path: str | Path, *, title: str = "", expected_k: int | None = None
) -> Path:
    """Write a PNG of ``F_u(t)`` against t (log–log) to ``path``; return the path.

    Drawn: the sweep points with ``F > 0``, the floor as a dashed line, the selected window
    shaded, and the fitted line ``exp(c)·t^slope`` over the window; the title adds ``k̂``, r² and
    the class. ``expected_k`` adds a reference slope ``2(k − 1)`` through the window's first
    point. The x range is the sweep's t grid and the y range covers the drawn values (set
    explicitly, as `neuromanifold.report.figures.plot_sweeps` does): a value ``F ≤ 0`` has no
    place on the log axis and is marked by a triangle on the panel's lower edge at its t, with
    the panel saying how many there are (``F = 0 at every t`` for an identically zero F), so a
    vanishing sweep is not drawn as a blank panel.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from neuromanifold.report.figures import _mark_at_edge, _x_limits, _y_limits

    path = Path(path)
    ts = list(reading.sweep.ts)
    fs = list(reading.sweep.F)
    pos = [(t, f) for t, f in zip(ts, fs, strict=True) if f > 0 and math.isfinite(f)]
    nonpos = [(t, f) for t, f in zip(ts, fs, strict=True) if f <= 0]  # NaN compares False
    floor = reading.sweep.floor
    fit = reading.fit
    tw: list[float] = []
    fit_line: list[float] = []
    ref_t: list[float] = []
    ref: list[float] = []
    if fit.t_window is not None and fit.slope is not None and fit.intercept is not None:
        t0, t1 = fit.t_window
        tw = [t for t in ts if t0 <= t <= t1]
        fit_line = [math.exp(fit.intercept) * t**fit.slope for t in tw]
        if expected_k is not None and tw:
            ref_t = [t for t in ts if t >= tw[0]]
            ref = [fit_line[0] * (t / tw[0]) ** (2 * (expected_k - 1)) for t in ref_t]
    fig, ax = plt.subplots(figsize=(5.0, 3.6), dpi=100)
    try:
        # scales and limits before anything is drawn (an autoscaled log axis with nothing
        # positive on it kept matplotlib's default range, 1-10, away from the t grid)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(*_y_limits([*(f for _, f in pos), floor, *fit_line, *ref]))
        xlim = _x_limits(ts)
        if xlim is not None:
            ax.set_xlim(*xlim)
        if pos:
            ax.loglog([p[0] for p in pos], [p[1] for p in pos], "o", ms=3, label="F_u(t)")
        if floor > 0:
            ax.axhline(floor, ls="--", lw=0.8, color="grey", label="floor")
        if nonpos:
            n_zero = sum(f == 0 for _, f in nonpos)
            edge = "F = 0" if n_zero == len(nonpos) else "F ≤ 0"
            label = f"{edge} (at the lower edge)"
            _mark_at_edge(
                ax, [t for t, _ in nonpos], ax.get_ylim()[0], marker="^", ms=5, label=label
            )
            note = _nonpositive_note(n_zero, len(nonpos), len(fs))
            ax.text(0.5, 0.08, note, transform=ax.transAxes, ha="center", va="bottom", fontsize=8)
        if tw:
            ax.axvspan(*fit.t_window, color="tab:orange", alpha=0.15, label="window")
            ax.loglog(tw, fit_line, "-", color="tab:orange", label=f"slope {fit.slope:.3f}")
        if ref:
            ax.loglog(ref_t, ref, ":", color="black", lw=0.8, label=f"t^{2 * (expected_k - 1)}")
        ax.set_xlabel("t")
        ax.set_ylabel("uᵀF(θ₀ + t u)u")
        k_hat = "—" if reading.k_hat is None else f"{reading.k_hat:.3f}"
        r2 = "—" if reading.r2 is None else f"{reading.r2:.4f}"
        klass = getattr(reading.klass, "value", reading.klass)
        ax.set_title(f"{title}\n$\\hat{{k}}$ = {k_hat}, r² = {r2}, {klass}", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()  # the tick labels decide the margins (a fixed left one clipped them)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
