"""Log–log plot of a cell's directional-Fisher sweep with the selected window marked.

matplotlib (Agg backend) is imported inside the function, so importing this module is free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["plot_reading"]


def plot_reading(
    reading: Any, path: str | Path, *, title: str = "", expected_k: int | None = None
) -> Path:
    """Write a PNG of ``F_u(t)`` against t (log–log) to ``path``; return the path.

    Drawn: the sweep points (points with ``F ≤ 0`` omitted), the floor as a dashed line, the
    selected window shaded, and the fitted line ``exp(c)·t^slope`` over the window; the title
    adds ``k̂``, r² and the class. ``expected_k`` adds a reference slope ``2(k − 1)`` through the
    window's first point.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    path = Path(path)
    ts = list(reading.sweep.ts)
    fs = list(reading.sweep.F)
    pos = [(t, f) for t, f in zip(ts, fs, strict=True) if f > 0 and math.isfinite(f)]
    fig, ax = plt.subplots(figsize=(5.0, 3.6), dpi=100)
    try:
        if pos:
            ax.loglog([p[0] for p in pos], [p[1] for p in pos], "o", ms=3, label="F_u(t)")
        floor = reading.sweep.floor
        if floor > 0:
            ax.axhline(floor, ls="--", lw=0.8, color="grey", label="floor")
        fit = reading.fit
        if fit.t_window is not None and fit.slope is not None and fit.intercept is not None:
            t0, t1 = fit.t_window
            ax.axvspan(t0, t1, color="tab:orange", alpha=0.15, label="window")
            tw = [t for t in ts if t0 <= t <= t1]
            ax.loglog(
                tw,
                [math.exp(fit.intercept) * t**fit.slope for t in tw],
                "-",
                color="tab:orange",
                label=f"slope {fit.slope:.3f}",
            )
            if expected_k is not None and tw:
                f0 = math.exp(fit.intercept) * tw[0] ** fit.slope
                ref = [f0 * (t / tw[0]) ** (2 * (expected_k - 1)) for t in ts if t >= tw[0]]
                ax.loglog(
                    [t for t in ts if t >= tw[0]],
                    ref,
                    ":",
                    color="black",
                    lw=0.8,
                    label=f"t^{2 * (expected_k - 1)}",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("t")
        ax.set_ylabel("uᵀF(θ₀ + t u)u")
        k_hat = "—" if reading.k_hat is None else f"{reading.k_hat:.3f}"
        r2 = "—" if reading.r2 is None else f"{reading.r2:.4f}"
        klass = getattr(reading.klass, "value", reading.klass)
        ax.set_title(f"{title}\n$\\hat{{k}}$ = {k_hat}, r² = {r2}, {klass}", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        fig.subplots_adjust(left=0.17, right=0.97, bottom=0.14, top=0.85)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
