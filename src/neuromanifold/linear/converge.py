"""Convergence experiment: where does LCN gradient flow on a least-squares loss end up?

Loss ``ℓ(v) = ½‖A v − b‖²`` (one random tall ``A``, ``b`` per experiment), parameter flow
``θ̇ = −Jμ(θ)ᵀ Aᵀ(Aμ(θ) − b)`` from several random initialisations. Each run is integrated with
LSODA (``rtol = 1e-11``; stiff phases switch to BDF, whose Jacobian is that of the right-hand side
``−∇L``, i.e. minus the central-difference Hessian of L) until ``‖∇L(θ)‖ ≤ grad_tol`` (a terminal
event) or ``t_max``. At the end point the run records the gradient norm, ``rank Jμ`` against
``dim M`` (singular values above ``RANK_RTOL · σ_max``), ``‖v‖``, ``ℓ(v)`` next to
``ℓ(0) = ½‖b‖²``, and the largest drift
``max_t ‖δ(θ(t)) − δ(θ(0))‖_∞`` of the conserved invariants over the solver's steps.

For 1-D LCNs the gradient is evaluated by a fast path (prefix/suffix polynomial products and one
correlation per layer), checked against :func:`neuromanifold.linear.flow.param_grad` in tests.

The spec's expectation (§4.7, §7.13): for all strides > 1 the limits are critical points with full
Jacobian rank and ``v ≠ 0``; the library asserts this only in its tests, and reports the stride-one
runs (where limits with ``rank Jμ < dim M`` occur) without asserting anything about them.

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367; Diederen, Rauhut, Terstiege,
arXiv:2601.08547 (convergence of LCN gradient flows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from neuromanifold.linear.architecture import LCN, _is_int, flatten_params, unflatten_params
from neuromanifold.linear.flow import param_grad
from neuromanifold.linear.invariants import delta as lcn_delta
from neuromanifold.linear.losses import QuadraticLoss
from neuromanifold.linear.metric import RTOL_RANK, balanced_representative
from neuromanifold.linear.ntk import jacobian
from neuromanifold.linear.polynomial import mu

#: Integration stops once ‖∇L(θ)‖₂ falls below this.
GRAD_TOL = 1e-10
#: Relative/absolute tolerances of the LSODA integration.
RTOL = 1e-11
ATOL = 1e-13
#: Singular values of Jμ above RANK_RTOL · σ_max count towards the rank (the package's shared
#: threshold :data:`~neuromanifold.linear.metric.RTOL_RANK`).
RANK_RTOL = RTOL_RANK
#: Step of the central-difference Hessian handed to the stiff solver.
FD_STEP = 1e-6


def lcn_grad_fast(arch: LCN, A: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``x ↦ ∇L(θ)`` for ``L = ½‖A μ(θ) − b‖²`` and a 1-D LCN (flat ``x``), by polynomial products.

    ``∂L/∂w_l[p] = Σ_i g_i R_l[i − p S_{l−1}]`` with ``g = Aᵀ(Av − b)`` and ``R_l`` the product of
    the other layers' dilated filters: a correlation of ``g`` with ``R_l``, sampled every
    ``S_{l−1}``.
    """
    if not isinstance(arch, LCN) or arch.D != 1:
        raise ValueError(f"arch = {arch!r}: the fast gradient needs a 1-D LCN")
    ks = arch.layer_sizes
    Ss = [S[0] for S in arch.dilations]
    off = np.cumsum([0, *ks])
    AtA, Atb = A.T @ A, A.T @ b

    def grad(x: np.ndarray) -> np.ndarray:
        fs = []
        for l, (k, S) in enumerate(zip(ks, Ss, strict=True)):
            f = np.zeros((k - 1) * S + 1)
            f[::S] = x[off[l] : off[l + 1]]
            fs.append(f)
        pre = [np.ones(1)]
        for f in fs[:-1]:
            pre.append(np.convolve(pre[-1], f))
        suf = [np.ones(1)]
        for f in fs[:0:-1]:
            suf.append(np.convolve(suf[-1], f))
        suf.reverse()
        v = np.convolve(pre[-1], fs[-1])
        g = AtA @ v - Atb
        out = np.empty(off[-1])
        for l, S in enumerate(Ss):
            R = np.convolve(pre[l], suf[l])
            out[off[l] : off[l + 1]] = np.correlate(g, R, "valid")[::S]
        return out

    return grad


def random_least_squares(
    arch: LCN, rng: np.random.Generator, *, rows: int | None = None
) -> QuadraticLoss:
    """``ℓ(v) = ½‖Av − b‖²``; Gaussian ``A`` (``rows × n_v``, default ``2 n_v`` rows) and ``b``."""
    m = 2 * arch.n_v if rows is None else rows
    return QuadraticLoss(rng.standard_normal((m, arch.n_v)), rng.standard_normal(m))


@dataclass(frozen=True)
class ConvergenceRun:
    """One integrated run and the properties of its end point (module docstring)."""

    index: int
    reached_tol: bool
    t_final: float
    loss_final: float
    loss_at_zero: float
    grad_norm: float
    jacobian_rank: int
    dim_M: int
    sigma_ratio: float
    v_norm: float
    max_invariant_drift: float
    nfev: int
    times: tuple[float, ...]
    losses: tuple[float, ...]
    drifts: tuple[float, ...]
    theta_final: tuple[float, ...] = ()  # the end point, flat in parameter order

    def to_dict(self, *, trajectory: bool = False) -> dict[str, Any]:
        """JSON-serialisable dict; the trajectory (times, losses, drifts) only on request."""
        d = dict(self.__dict__)
        d["theta_final"] = list(self.theta_final)
        if not trajectory:
            for k in ("times", "losses", "drifts"):
                d.pop(k)
        else:
            for k in ("times", "losses", "drifts"):
                d[k] = list(d[k])
        return d


def converge_run(
    arch: LCN,
    loss: QuadraticLoss,
    theta0: Sequence[Any],
    *,
    index: int = 0,
    grad_tol: float = GRAD_TOL,
    t_max: float = 1e5,
) -> ConvergenceRun:
    """Integrate the parameter flow from ``θ0`` until ``‖∇L‖ ≤ grad_tol`` or ``t_max``."""
    x0 = flatten_params(arch, theta0)
    if arch.D == 1:
        grad = lcn_grad_fast(arch, loss.A, loss.b)
    else:

        def grad(x: np.ndarray) -> np.ndarray:
            return param_grad(arch, unflatten_params(arch, x), loss)

    def rhs(_t: float, x: np.ndarray) -> np.ndarray:
        return -grad(x)

    def hess(_t: float, x: np.ndarray) -> np.ndarray:
        n = x.size
        H = np.empty((n, n))
        for i in range(n):
            e = np.zeros(n)
            e[i] = FD_STEP
            H[:, i] = (rhs(0.0, x + e) - rhs(0.0, x - e)) / (2 * FD_STEP)
        return H

    def small_gradient(_t: float, x: np.ndarray) -> float:
        return float(np.linalg.norm(grad(x)) - grad_tol)

    small_gradient.terminal = True  # type: ignore[attr-defined]
    small_gradient.direction = -1  # type: ignore[attr-defined]
    sol = solve_ivp(
        rhs,
        (0.0, float(t_max)),
        x0,
        method="LSODA",
        rtol=RTOL,
        atol=ATOL,
        jac=hess,
        events=small_gradient,
    )
    d0 = lcn_delta(unflatten_params(arch, x0))
    drifts, losses = [], []
    for y in sol.y.T:
        th = unflatten_params(arch, y)
        drifts.append(float(np.max(np.abs(lcn_delta(th) - d0))) if arch.L > 1 else 0.0)
        losses.append(loss.value(mu(arch, th)))
    x_end = sol.y[:, -1]
    th_end = unflatten_params(arch, x_end)
    s = np.linalg.svd(jacobian(arch, balanced_representative(arch, th_end)), compute_uv=False)
    rank = int(np.sum(s > RANK_RTOL * s[0])) if s.size and s[0] > 0 else 0
    m = arch.dim_M
    return ConvergenceRun(
        index=index,
        reached_tol=bool(sol.status == 1),
        t_final=float(sol.t[-1]),
        loss_final=losses[-1],
        loss_at_zero=0.5 * float(loss.b @ loss.b),
        grad_norm=float(np.linalg.norm(grad(x_end))),
        jacobian_rank=rank,
        dim_M=m,
        sigma_ratio=float(s[m - 1] / s[0]) if s.size >= m and s[0] > 0 else 0.0,
        v_norm=float(np.linalg.norm(mu(arch, th_end))),
        max_invariant_drift=max(drifts),
        nfev=int(sol.nfev),
        times=tuple(float(t) for t in sol.t),
        losses=tuple(losses),
        drifts=tuple(drifts),
        theta_final=tuple(float(x) for x in x_end),
    )


@dataclass(frozen=True)
class ConvergenceReport:
    """All runs of one architecture on one loss, plus a summary.

    ``architecture`` is a description for figures and text; ``architecture_spec`` the
    architecture's ``to_dict()``, which `to_dict` writes under ``"architecture"`` (the same type
    as in ``lcn ntk``/``lcn compare``/``lcn fiber``; s15 trial T #4), the description under
    ``"architecture_label"``. ``loss`` is the least-squares loss every run descends (written as
    ``"loss": {"A", "b"}``), and each run's end point is ``theta_final``, so the limits can be
    rechecked from the JSON alone (s25 trial LIN: the seeds had to be rebuilt from the docstring).
    """

    architecture: str
    runs: tuple[ConvergenceRun, ...]
    seed: int
    architecture_spec: dict[str, Any] | None = None
    loss: QuadraticLoss | None = None

    def summary(self) -> dict[str, Any]:
        """Counts and extremes over the runs (critical values rounded to 1e-8 for counting)."""
        r = self.runs
        return {
            "runs": len(r),
            "reached_tol": sum(x.reached_tol for x in r),
            "full_rank": sum(x.jacobian_rank == x.dim_M for x in r),
            "max_grad_norm": max(x.grad_norm for x in r),
            "min_v_norm": min(x.v_norm for x in r),
            "max_invariant_drift": max(x.max_invariant_drift for x in r),
            "min_sigma_ratio": min(x.sigma_ratio for x in r),
            "critical_values": sorted({round(x.loss_final, 8) for x in r}),
            "loss_at_zero": r[0].loss_at_zero if r else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (runs without trajectories)."""
        spec = self.architecture_spec
        return {
            "architecture": dict(spec) if spec is not None else self.architecture,
            "architecture_label": self.architecture,
            "seed": self.seed,
            "loss": None
            if self.loss is None
            else {"A": self.loss.A.tolist(), "b": self.loss.b.tolist()},
            "summary": self.summary(),
            "runs": [x.to_dict() for x in self.runs],
        }


def convergence_experiment(
    arch: LCN, *, n_runs: int = 20, seed: int = 0, t_max: float = 1e5
) -> ConvergenceReport:
    """``n_runs`` Gaussian initialisations on one random least-squares loss (all seeded).

    The loss comes from ``default_rng([seed, 0])``, run ``i``'s start from
    ``default_rng([seed, 1, i])``.
    """
    if not isinstance(arch, LCN):  # an FC had ended in AttributeError 'n_v' (s15 audit W)
        raise TypeError(f"arch = {arch!r}: the convergence experiment is for LCN architectures")
    if not (_is_int(n_runs) and n_runs >= 1):
        raise ValueError(f"n_runs must be a positive int, got {n_runs!r}")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    n_runs, seed = int(n_runs), int(seed)
    loss = random_least_squares(arch, np.random.default_rng([seed, 0]))
    runs = []
    for i in range(n_runs):
        rng = np.random.default_rng([seed, 1, i])
        theta0 = [rng.standard_normal(s) for s in arch.param_shapes]
        runs.append(converge_run(arch, loss, theta0, index=i, t_max=t_max))
    from neuromanifold.linear.fiber import _describe  # the fiber reports' label (D-D too)

    return ConvergenceReport(_describe(arch), tuple(runs), seed, arch.to_dict(), loss)


#: factor by which a convergence panel's y range extends past its smallest and largest drawn
#: value (half a decade), so the values at or below 0 marked on the lower edge stay apart from it
_PLOT_Y_PAD = 10**0.5


def _log_panel(
    ax: Any, curves: Sequence[tuple[np.ndarray, np.ndarray]], *, what: str, zero: str
) -> None:
    """Draw ``curves`` (one ``(t, y)`` per run) on the log–log ``ax`` without clamping anything.

    A point at ``t ≤ 0`` is left out (no place on a log t axis); a value ``y ≤ 0`` breaks its
    run's line and is marked by a triangle ▼ in the run's colour on the panel's lower edge at its
    t, the y range being set from the positive values (`_PLOT_Y_PAD`). The panel's title says how
    many were left out and marked, naming them ``what`` (the text of ``y``) and ``zero``
    (``"≤ 0"`` or ``"= 0"``), so no marked point reads as a value.
    """
    pos = np.concatenate([y[(t > 0) & (y > 0)] for t, y in curves] or [np.zeros(0)])
    pos = pos[np.isfinite(pos)]
    lo, hi = (pos.min() / _PLOT_Y_PAD, pos.max() * _PLOT_Y_PAD) if pos.size else (0.1, 10.0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    n_t0 = n_zero = 0
    for t, y in curves:
        keep = t > 0
        n_t0 += int((~keep).sum())
        t, y = t[keep], y[keep]
        (line,) = ax.loglog(t, np.where(y > 0, y, np.nan), lw=0.8)
        at_zero = y <= 0
        if at_zero.any():
            n_zero += int(at_zero.sum())
            ax.plot(
                t[at_zero],
                np.full(int(at_zero.sum()), lo),
                ls="none",
                marker="v",
                ms=3,
                color=line.get_color(),
                clip_on=False,
            )
    notes = []
    if n_zero:
        notes.append(f"▼ on the lower edge: {n_zero} points with {what} {zero}")
    if n_t0:
        notes.append(f"{n_t0} points at t = 0 not drawn (log t axis)")
    if notes:
        ax.set_title("\n".join(notes), fontsize=8)


def plot_convergence(reports: Sequence[ConvergenceReport], path: str) -> None:
    """Loss gap ``ℓ(v(t)) − ℓ_final`` and invariant drift against time, one column per report.

    Both rows are log–log and nothing is clamped (`_log_panel`): the points at ``t = 0`` are left
    out, and a gap ``≤ 0`` (rounding around ``ℓ_final`` once a run has converged) or a drift
    ``= 0`` is marked by a triangle on the panel's lower edge, the panel's title counting both.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(reports), figsize=(5.5 * len(reports), 7.5), squeeze=False)
    for j, rep in enumerate(reports):
        ax_l, ax_d = axes[0, j], axes[1, j]
        times = [np.asarray(run.times, dtype=float) for run in rep.runs]
        gaps = [np.asarray(run.losses, dtype=float) - run.loss_final for run in rep.runs]
        drifts = [np.asarray(run.drifts, dtype=float) for run in rep.runs]
        _log_panel(ax_l, list(zip(times, gaps, strict=True)), what="gap", zero="≤ 0")
        _log_panel(ax_d, list(zip(times, drifts, strict=True)), what="drift", zero="= 0")
        notes = ax_l.get_title()
        ax_l.set_title(f"{rep.architecture}\n{notes}" if notes else rep.architecture, fontsize=9)
        ax_l.set_ylabel("ℓ(v(t)) − ℓ(v(∞))")
        ax_d.set_ylabel("max |δ(t) − δ(0)|")
        ax_d.set_xlabel("t")
    # two lines: on one, the title ran past both edges of a one-report (5.5 in wide) figure
    fig.suptitle("Gradient flow on a random least-squares loss\n(one curve per initialisation)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
