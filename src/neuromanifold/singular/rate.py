"""The rate read: floor, window selection, log–log slope and the order k.

By the rate law (spec §3) ``F_u(t) = Θ(t^{2(k−1)})`` as ``t → 0``, so the log–log slope of the
directional Fisher gives ``k̂ = 1 + slope/2``. `fit_rate` selects the window of the sweep on which
the power law holds and reads it. The rule (spec §7.2 steps 5–6, made precise here):

1. **Floor.** Points with ``F < floor_margin·floor`` (default ``10·F_floor``) or ``F ≤ 0`` are
   dropped. Windows are runs of *consecutive* grid points that all survive.
2. **Candidates.** Every contiguous window ``[i0, i1]`` with at least ``min_points`` (6) points
   spanning at least ``min_decades`` (1) decade in t.
3. **Fit.** OLS of ``log F`` on ``log t`` (natural logs): ``slope``, ``intercept``, and
   ``r² = 1 − SS_res / max(SS_tot, n·R2_TSS_FLOOR²)``. The floor on the total sum of squares
   (``R2_TSS_FLOOR = 0.01``, i.e. 1 % in F) makes r² meaningful on a flat (slope-0) window: there
   log F varies only by rounding, the standard r² would be 0/0, and here it is 1 when the residuals
   are far below 1 %.
4. **Pass.** ``r² ≥ r2_min`` (0.95); ``round(slope/2) ≥ 0`` (k ≥ 1); integrality
   ``|slope − 2·round(slope/2)| ≤ slope_tol`` (0.3); curvature: the OLS slopes of the window's
   lower and upper halves (``⌈n/2⌉`` points each, sharing the middle point when n is odd) differ
   by at most ``half_tol`` (0.3).
5. **Prefer.** Let ``r²_best`` be the best r² of the passing windows. Among passing windows with
   ``r² ≥ r²_best − r2_tie`` (``r2_tie = 0.005``: equally good fits), take the one whose geometric
   centre ``√(t_{i0} t_{i1})`` is smallest — the asymptotic small-t end — and among windows with the
   same centre (``log t_{i0} + log t_{i1}`` equal to within ``CENTRE_TIE = 1e-9``, so that rounding
   in a log-even grid does not break the tie) the longest. On a log-evenly spaced grid this is the
   window with the smallest index sum ``i0 + i1``; on an uneven grid it can differ.
6. **Read.** ``k̂ = 1 + slope/2``, ``k = round(k̂)``, residual ``|k̂ − k|``, ``λ_dir = 1/(2k)``, and
   the magnitude ``c_k = median_{window} F/t^{2(k−1)}``.
7. **Small-t end.** When the selected window starts after the first ``min_points`` points of its
   run, ``small_t_slope`` is the OLS slope of those points and ``small_t_window`` their t range.
   `RateFit.order_below` is the order ``k_s < k`` of that slope when it is within ``slope_tol``
   of an even integer ``2(k_s − 1)``; `RateFit.plateau_below` is the case ``k_s = 1`` (slope ≈ 0).
   The read keeps ``k`` (the order of the selected window) and the classification's reason
   states the lower order below it.

8. **Switch-on.** When the window's run follows a prefix of grid points all below the floor
   (a point dropping out of a law later in the grid is no switch-on), the window's law
   ``ℓ(t) = exp(intercept)·t^slope`` is evaluated at the last of them, ``t_{a−1}``, and at the
   run's first point ``t_a``. Where ``ℓ(t_{a−1})`` exceeds ``SWITCH_ON_FACTOR`` times
   ``max(floor_margin·floor, F(t_{a−1}))`` the law does not reach down to there, and where
   moreover ``F(t_a) ≥ SWITCH_ON_JUMP · ℓ(t_a)`` F did not rise from zero into the law but
   jumped onto it: a dead ReLU unit with live output weights that the move switches on near
   ``t_a`` (its derivative steps from 0 to 1), flat before it. The window then describes the
   model after the switch, not the germ at ``t → 0``: no order is read (``k = None``, the reason
   names the jump). A plateau window (``k = 1``) so far above the floor is a switch-on however
   F reached it, gradually too: a live germ has F at its level as ``t → 0``, not at the floor.
   A law that emerges from the floor predicts about the floor at ``t_{a−1}`` (at most one grid
   step's factor ``(t_a/t_{a−1})^slope`` above it, under 20 for k ≤ 6 on the
   default grid). A checkpoint a distance ``t₀`` off a node death rises from zero like
   ``(t − t₀)²``, below the law at ``t_a`` (at most ``(1 − t_{a−1}/t_a)² ≈ 0.07`` of it on the
   default grid): it is read, with the order of the structure it sits near (below).

A plateau is preferred only when it fits as well as the best window (step 5). Its r² is judged
against the 1 % TSS floor, so a plateau that starts to bend within its decade loses to the power
law above it: ``F = 1 + (t/s)²`` reads k = 1 on the default grid (32 points from ``1e−4``) only
for ``s ≳ 2·10⁻²``, i.e. when ``s`` is about 2.3 decades above the grid start, and k = 2 below. This
is deliberate. A point near, not on, the singular locus (small dead weights whose offset is not
along u, which the snap cannot remove) shows exactly such a short plateau below the order of the
structure it sits near, and that order is the one the read reports. The asymptotic t → 0 order
at such a point is 1, and ``plateau_below`` says so.

When no window passes, ``k`` is ``None`` and ``reason`` says why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from neuromanifold.singular._validate import check_grid

__all__ = [
    "CENTRE_TIE",
    "HALF_TOL",
    "MIN_DECADES",
    "MIN_POINTS",
    "R2_MIN",
    "R2_TIE",
    "R2_TSS_FLOOR",
    "SLOPE_TOL",
    "SWITCH_ON_FACTOR",
    "SWITCH_ON_JUMP",
    "RateFit",
    "fit_rate",
    "local_slopes",
]

MIN_POINTS = 6
MIN_DECADES = 1.0
R2_MIN = 0.95
SLOPE_TOL = 0.3
HALF_TOL = 0.3
R2_TIE = 0.005
R2_TSS_FLOOR = 0.01
FLOOR_MARGIN_DEFAULT = 10.0
CENTRE_TIE = 1e-9
SWITCH_ON_FACTOR = 100.0
"""How far above the floor (or the measured F) at the last point below it a window's law may
predict before the rise can count as a switch-on (module docstring, step 8). A one-layer MLP's
dead ReLU unit revived at t ≈ 0.025 (s29 trial SHARED #5): F = 1e-38 up to t = 0.022, 3.1e-3
from t = 0.030; the window's law predicted 5.9e-4 at 0.022, 2·10²¹ times the margin, and read
k = 2."""
SWITCH_ON_JUMP = 0.5
"""The run's first point holds at least this fraction of the window's law there when F jumped
onto the law (step 8; SHARED #5: 3.1e-3 against 1.0e-3); a rise from zero past a nearby node
death holds at most ~0.07 of it."""


@dataclass(frozen=True)
class RateFit:
    """Result of `fit_rate` (see the module docstring for the rule).

    Attributes:
        slope, intercept: OLS of ``log F = intercept + slope·log t`` on the selected window.
        k_hat: ``1 + slope/2``; k: ``round(k_hat)`` (``None`` when no window passes).
        r2: fit quality of the window (TSS-floored r²).
        window: ``(i0, i1)`` grid indices, inclusive; t_window: ``(t_{i0}, t_{i1})``.
        half_slopes: OLS slopes of the lower and upper halves of the window.
        residual: ``|k_hat − k|``.
        magnitude: ``c_k = median F/t^{2(k−1)}`` over the window.
        lambda_dir: ``1/(2k)``.
        floor: the floor used (``F_floor``); n_above_floor: points kept.
        n_candidates, n_passing: windows examined and windows passing step 4.
        reason: why no window was selected (``""`` when one was).
        criteria: the thresholds used.
        small_t_slope, small_t_window: OLS slope and ``(t_first, t_last)`` of the first
            ``min_points`` points of the window's run, when the window starts after them
            (``None`` otherwise).
    """

    slope: float | None
    intercept: float | None
    k_hat: float | None
    k: int | None
    r2: float | None
    window: tuple[int, int] | None
    t_window: tuple[float, float] | None
    half_slopes: tuple[float, float] | None
    residual: float | None
    magnitude: float | None
    lambda_dir: float | None
    floor: float
    n_above_floor: int
    n_candidates: int
    n_passing: int
    reason: str = ""
    criteria: dict = field(default_factory=dict)
    small_t_slope: float | None = None
    small_t_window: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        """True when a window was selected."""
        return self.k is not None

    @property
    def plateau_below(self) -> bool:
        """True when the read is ``k ≥ 2`` but F is flat at the small-t end of the window's run.

        Then ``F(t) → F(0) > 0`` as ``t → 0``: the point is regular along u at the smallest
        scales, and ``k`` is the order of the structure above the plateau (module docstring).
        """
        return self.order_below == 1

    @property
    def order_below(self) -> int | None:
        """The lower order ``k_s < k`` that F shows at the small-t end of the window's run, or None.

        ``k_s = round(1 + s/2)`` of ``small_t_slope`` ``s``, when ``s`` lies within ``slope_tol``
        of its even integer ``2(k_s − 1)`` and ``k_s < k``: as ``t → 0`` F falls as
        ``t^{2(k_s−1)}``, so the order along u at the point is ``k_s``, and ``k`` is the order of
        the branch above (``F = t² + t⁴/s²`` with ``s`` inside the grid: ``k_s = 2``, ``k = 3``).
        ``k_s = 1`` is a plateau (`plateau_below`). None when no such end was measured.
        """
        if self.k is None or self.k < 2 or self.small_t_slope is None:
            return None
        k_s = round(1.0 + self.small_t_slope / 2.0)
        tol = float(self.criteria.get("slope_tol", SLOPE_TOL))
        if 1 <= k_s < self.k and abs(self.small_t_slope - 2.0 * (k_s - 1)) <= tol:
            return k_s
        return None

    def to_dict(self) -> dict:
        """JSON-safe dict (tuples become lists)."""
        d = asdict(self)
        for key in ("window", "t_window", "half_slopes", "small_t_window"):
            if d[key] is not None:
                d[key] = list(d[key])
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> RateFit:
        """Inverse of `to_dict`."""
        d = dict(d)
        if d.get("window") is not None:
            d["window"] = (int(d["window"][0]), int(d["window"][1]))
        for key in ("t_window", "half_slopes", "small_t_window"):
            if d.get(key) is not None:
                d[key] = (float(d[key][0]), float(d[key][1]))
        d["criteria"] = dict(d.get("criteria") or {})
        return cls(**d)


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """OLS slope, intercept and TSS-floored r² of y on x."""
    n = x.size
    xm, ym = x.mean(), y.mean()
    dx, dy = x - xm, y - ym
    sxx = float(dx @ dx)
    slope = float(dx @ dy) / sxx
    intercept = float(ym - slope * xm)
    res = dy - slope * dx
    ss_res = float(res @ res)
    ss_tot = float(dy @ dy)
    r2 = 1.0 - ss_res / max(ss_tot, n * R2_TSS_FLOOR**2)
    return slope, intercept, r2


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs ``[a, b]`` (inclusive) of True in ``mask``."""
    runs, start = [], None
    for i, m in enumerate(mask.tolist()):
        if m and start is None:
            start = i
        if not m and start is not None:
            runs.append((start, i - 1))
            start = None
    if start is not None:
        runs.append((start, mask.size - 1))
    return runs


def _check_positive_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int ≥ {minimum}; got {value!r}")
    return value


def _floor_prefix(t: np.ndarray, f: np.ndarray, keep: np.ndarray, margin: float) -> str:
    """``"; F ≤ 10×floor for t ≤ a, then rises to F_max at t = b"`` where the grid's first
    points are at the floor and later ones are not (a unit that switches on at some distance
    along u shows so: F at rounding level, then a jump no power law fits); else ``""``."""
    if keep[0] or not keep.any():
        return ""
    first = int(np.argmax(keep))
    top = int(np.argmax(f))
    return (
        f"; F ≤ {margin:g}×floor for t ≤ {t[first - 1]:.3g}, then rises to {f[top]:.3g} "
        f"at t = {t[top]:.3g}"
    )


def fit_rate(
    ts: Sequence[float] | np.ndarray,
    F: Sequence[float] | np.ndarray,
    *,
    floor: float | None = None,
    min_points: int = MIN_POINTS,
    min_decades: float = MIN_DECADES,
    r2_min: float = R2_MIN,
    slope_tol: float = SLOPE_TOL,
    half_tol: float = HALF_TOL,
    r2_tie: float = R2_TIE,
    floor_margin: float = FLOOR_MARGIN_DEFAULT,
) -> RateFit:
    """Read the order ``k`` from ``F(t) ∝ t^{2(k−1)}`` by the window rule of the module docstring.

    Args:
        ts: positive, strictly increasing t values.
        F: directional Fisher at each t (same length).
        floor: ``F_floor``; points below ``floor_margin·floor`` are dropped (``None``: 0).

    Returns:
        `RateFit`; ``k is None`` with a ``reason`` when no window passes.

    >>> import numpy as np
    >>> t = np.logspace(-3, 0, 24)
    >>> fit = fit_rate(t, 5.0 * t**4)
    >>> fit.k, round(fit.k_hat, 12), round(fit.magnitude, 12)
    (3, 3.0, 5.0)
    """
    t = check_grid(ts).numpy()
    f = np.asarray(F, dtype=np.float64).reshape(-1)
    if f.size != t.size:
        raise ValueError(f"F has {f.size} values but ts has {t.size}; expected one F per t")
    if not np.all(np.isfinite(f)):
        raise ValueError("F contains non-finite values (nan or inf)")
    fl = 0.0 if floor is None else float(floor)
    if not (math.isfinite(fl) and fl >= 0):
        raise ValueError(f"floor must be a finite float ≥ 0 or None; got {floor!r}")
    min_points = _check_positive_int("min_points", min_points, 4)
    criteria = {
        "min_points": min_points,
        "min_decades": float(min_decades),
        "r2_min": float(r2_min),
        "slope_tol": float(slope_tol),
        "half_tol": float(half_tol),
        "r2_tie": float(r2_tie),
        "floor_margin": float(floor_margin),
        "r2_tss_floor": R2_TSS_FLOOR,
    }
    keep = (f > 0) & (f >= floor_margin * fl)
    empty = dict(
        slope=None,
        intercept=None,
        k_hat=None,
        k=None,
        r2=None,
        window=None,
        t_window=None,
        half_slopes=None,
        residual=None,
        magnitude=None,
        lambda_dir=None,
        floor=fl,
        n_above_floor=int(keep.sum()),
        criteria=criteria,
    )
    lt = np.log(t)
    lf = np.where(keep, np.log(np.where(keep, f, 1.0)), 0.0)
    decade = math.log(10.0)
    candidates = []
    for a, b in _runs(keep):
        for i0 in range(a, b + 1):
            for i1 in range(i0 + min_points - 1, b + 1):
                if (lt[i1] - lt[i0]) / decade >= min_decades - 1e-9:
                    candidates.append((i0, i1))
    if not candidates:
        return RateFit(
            **empty,
            n_candidates=0,
            n_passing=0,
            reason=(
                f"no run of ≥ {min_points} consecutive points above {floor_margin:g}×floor "
                f"spanning ≥ {min_decades:g} decade(s) ({int(keep.sum())} of {t.size} points "
                f"above the floor){_floor_prefix(t, f, keep, floor_margin)}"
            ),
        )
    passing = []
    fails = {"r2": 0, "integrality": 0, "curvature": 0, "negative": 0}
    best_r2_any = -math.inf
    for i0, i1 in candidates:
        x, y = lt[i0 : i1 + 1], lf[i0 : i1 + 1]
        slope, intercept, r2 = _ols(x, y)
        best_r2_any = max(best_r2_any, r2)
        h = (x.size + 1) // 2
        s_lo = _ols(x[:h], y[:h])[0]
        s_hi = _ols(x[-h:], y[-h:])[0]
        k_even = round(slope / 2)
        if r2 < r2_min:
            fails["r2"] += 1
        elif k_even < 0:
            fails["negative"] += 1
        elif abs(slope - 2 * k_even) > slope_tol:
            fails["integrality"] += 1
        elif abs(s_lo - s_hi) > half_tol:
            fails["curvature"] += 1
        else:
            passing.append((i0, i1, slope, intercept, r2, s_lo, s_hi))
    if not passing:
        return RateFit(
            **empty,
            n_candidates=len(candidates),
            n_passing=0,
            reason=(
                f"no window passes: {len(candidates)} candidates, failures r²<{r2_min:g}: "
                f"{fails['r2']}, slope<0: {fails['negative']}, |slope−even|>{slope_tol:g}: "
                f"{fails['integrality']}, half-slope gap>{half_tol:g}: {fails['curvature']} "
                f"(best r² {best_r2_any:.4f}){_floor_prefix(t, f, keep, floor_margin)}"
            ),
        )
    best = max(p[4] for p in passing)
    tier = [p for p in passing if p[4] >= best - r2_tie]
    centre = {p[:2]: float(lt[p[0]] + lt[p[1]]) for p in tier}
    lowest = min(centre.values())
    near = [p for p in tier if centre[p[:2]] <= lowest + CENTRE_TIE]
    i0, i1, slope, intercept, r2, s_lo, s_hi = min(
        near, key=lambda p: (-(p[1] - p[0]), centre[p[:2]])
    )
    k_hat = 1.0 + slope / 2.0
    k = round(k_hat)
    a = next(r0 for r0, r1 in _runs(keep) if r0 <= i0 <= r1)
    if a > 0 and not keep[:a].any():  # step 8: the run follows a prefix below the floor
        below = max(floor_margin * fl, float(f[a - 1]))
        predicted = math.exp(intercept + slope * lt[a - 1])
        on_law = math.exp(intercept + slope * lt[a])
        jumped = f[a] >= SWITCH_ON_JUMP * on_law
        if predicted > SWITCH_ON_FACTOR * below and (jumped or k == 1):
            # a plateau (k = 1) is never the germ of a rise from zero: F ≥ its level at t → 0
            # would be live there, and F is at the floor (s34 trial CELLS D4: a dead ReLU unit
            # along its incoming weights, revived gradually on a grid to t = 10, read live)
            how = "" if jumped else "; a plateau reached by a gradual rise from the floor"
            return RateFit(
                **empty,
                n_candidates=len(candidates),
                n_passing=len(passing),
                reason=(
                    f"F switches on: the best window's law (t in [{t[i0]:.3g}, {t[i1]:.3g}], "
                    f"slope {slope:.3f}{how}) predicts F = {predicted:.3g} at t = {t[a - 1]:.3g}, "
                    f"where F is below {floor_margin:g}×floor"
                    f"{_floor_prefix(t, f, keep, floor_margin)}"
                ),
            )
    small_t_slope, small_t_window = None, None
    if a + min_points - 1 < i0:
        small_t_slope = _ols(lt[a : a + min_points], lf[a : a + min_points])[0]
        small_t_window = (float(t[a]), float(t[a + min_points - 1]))
    window_t, window_f = t[i0 : i1 + 1], f[i0 : i1 + 1]
    magnitude = float(np.median(window_f / window_t ** (2 * (k - 1))))
    return RateFit(
        slope=float(slope),
        intercept=float(intercept),
        k_hat=float(k_hat),
        k=int(k),
        r2=float(r2),
        window=(int(i0), int(i1)),
        t_window=(float(t[i0]), float(t[i1])),
        half_slopes=(float(s_lo), float(s_hi)),
        residual=float(abs(k_hat - k)),
        magnitude=magnitude,
        lambda_dir=1.0 / (2 * k),
        floor=fl,
        n_above_floor=int(keep.sum()),
        n_candidates=len(candidates),
        n_passing=len(passing),
        reason="",
        criteria=criteria,
        small_t_slope=small_t_slope,
        small_t_window=small_t_window,
    )


def local_slopes(
    ts: Sequence[float] | np.ndarray, F: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Finite-difference log–log slopes between consecutive sweep points.

    Returns ``(t_mid, s)`` with ``t_mid_i = √(t_i t_{i+1})`` and
    ``s_i = (log F_{i+1} − log F_i)/(log t_{i+1} − log t_i)`` (NaN where an F is ≤ 0).

    >>> import numpy as np
    >>> t = np.array([1.0, 2.0, 4.0])
    >>> local_slopes(t, t**2)[1].tolist()
    [2.0, 2.0]
    """
    t = check_grid(ts).numpy()
    f = np.asarray(F, dtype=np.float64).reshape(-1)
    if f.size != t.size:
        raise ValueError(f"F has {f.size} values but ts has {t.size}; expected one F per t")
    with np.errstate(divide="ignore", invalid="ignore"):
        lf = np.where(f > 0, np.log(np.where(f > 0, f, 1.0)), np.nan)
    lt = np.log(t)
    return np.sqrt(t[1:] * t[:-1]), np.diff(lf) / np.diff(lt)
