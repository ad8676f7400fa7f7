"""Gradient flows in parameter space and in function space; invariant-drift monitors.

Parameter space (spec §2.1): ``θ̇ = −∇L(θ) = −Jμ(θ)ᵀ ∇ℓ(μ(θ))``, integrated by scipy ``solve_ivp``
(DOP853, tight tolerances), or gradient descent ``θ ← θ − η ∇L(θ)``. Function space (spec §2.3–2.5):
``v̇ = −K_δ(v) ∇ℓ(v)`` with ``K_δ(v)`` re-solved at every right-hand-side call by Gauss–Newton onto
the ``(v, δ)``-fiber, warm-started from the previous call (which also projects stage points
back onto ``M``). FC: the same parameter flows, and the balanced flow ``Ẇ = −A_W(∇ℓ(W))``.

Losses (:mod:`neuromanifold.linear.losses`) act on the end-to-end filter ``v`` (or matrix ``W``)
and are **sums over samples** (a mean only rescales time by ``1/n``).

References: Achour, Kohn, Rauhut, arXiv:2507.06367; Bah, Rauhut, Terstiege, Westdickenberg,
Inf. Inference 2022 (balanced FC flow).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from neuromanifold.linear.architecture import (
    FC,
    LCN,
    Architecture,
    Params,
    _is_int,
    _is_real,
    flatten_params,
    unflatten_params,
)
from neuromanifold.linear.invariants import delta as _delta
from neuromanifold.linear.invariants import fc_delta
from neuromanifold.linear.losses import FunctionLoss
from neuromanifold.linear.ntk import fc_balanced_operator, fc_jacobian, jacobian
from neuromanifold.linear.polynomial import fc_mu, mu
from neuromanifold.linear.sheets import regrouping_pairs
from neuromanifold.linear.solve import _check_target, fiber_newton

__all__ = [
    "FlowResult",
    "FunctionFlowResult",
    "fc_balanced_flow",
    "function_space_flow",
    "gradient_descent",
    "gradient_flow",
    "invariant_drift",
    "invariants",
    "param_grad",
]

# The start of `function_space_flow` must be a fiber point of (v0, δ): the unit-scale Gauss–Newton
# residual of `solve.fiber_newton` (relative to the scale of (v0, δ)) from `theta_guess` must not
# exceed this. fiber_newton aims at 1e-13 and reaches ~1e-16 from a start near the fiber (also at
# the §4.6 critical points); 1e-10 leaves three orders for an ill-conditioned start, while an
# off-M v0 or a guess Gauss–Newton cannot move (θ = 0) stays at residuals ~1e-1.
RTOL_START_FIBER = 1e-10
# `function_space_flow` also requires the final v(t_end) to be realised (from the last tracked
# fiber point) to the residual max(RTOL_END_FIBER, END_FIBER_PER_TOL · max(rtol, atol)): the
# integration itself moves v off M by its own error. Measured on a depth-3 stride-2 flow over
# t ∈ [0, 2]: end residual 4e-13 at tolerances 1e-12, 3e-8 at 1e-6, 1.3e-6 at 1e-3 (at most 0.03×
# the tolerance); a lost fiber point stays at residuals ~1e-1. Solver stage points may stray
# further (~1e-6) and are not held to it.
RTOL_END_FIBER = RTOL_START_FIBER
END_FIBER_PER_TOL = 100.0
# Smooth-point margin σ_{dim M}(J)/σ_max(J) of the tracked fiber point below which the flow is
# said to pass near the singular locus of mu, where sheets of the fiber meet and K is not single
# valued. On the trajectories of tests/linear/test_flow.py away from it the margin stays above
# 1e-2; the stride-one trajectory that crosses a double root (spec §4.3) reaches 5e-10 and then
# departs from the parameter flow by 1.4e-4. Between the two lies a factor 1e7.
SINGULAR_MARGIN = 1e-6


def _mu_jac(arch: Architecture, theta: Params) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(arch, LCN):
        return mu(arch, theta), jacobian(arch, theta)
    if isinstance(arch, FC):
        return fc_mu(arch, theta), fc_jacobian(arch, theta)
    raise TypeError(f"arch = {arch!r}: expected an LCN or FC instance")


def invariants(arch: Architecture, theta: Sequence[Any]) -> np.ndarray:
    """Conserved quantities as one vector: ``δ`` (LCN, ``(L−1,)``) or all ``Δ_l`` flattened (FC)."""
    if isinstance(arch, FC):
        parts = [D.ravel() for D in fc_delta(list(theta))]
        return np.concatenate(parts) if parts else np.zeros(0)
    return _delta(theta)


def param_grad(arch: Architecture, theta: Sequence[Any], loss: FunctionLoss) -> np.ndarray:
    """``∇L(θ) = Jμ(θ)ᵀ ∇ℓ(μ(θ))`` as a flat ``(n_params,)`` vector."""
    v, J = _mu_jac(arch, tuple(theta))
    return J.T @ np.ravel(loss.grad(v))


@dataclass(frozen=True, eq=False)
class FlowResult:
    """A parameter-space trajectory.

    Attributes:
        arch: the architecture.
        t: times, ``(n_t,)`` (gradient descent: ``step · lr``).
        params: flat parameters ``(n_t, n_params)``.
        v: end-to-end filters (LCN) or matrices (FC), ``(n_t, *out_shape)``.
        invariants: ``δ`` (LCN) or flattened ``Δ_l`` (FC) per time, ``(n_t, m)``.
        loss: ``ℓ(v(t))``, ``(n_t,)``.
        success: solver status; message: solver message; nfev: RHS evaluations.
        invariants_start: the invariants at ``θ0``, ``(m,)``, the baseline of
            :func:`invariant_drift` (``t_eval`` need not record ``t0``).
    """

    arch: Architecture
    t: np.ndarray
    params: np.ndarray
    v: np.ndarray
    invariants: np.ndarray
    loss: np.ndarray
    success: bool
    message: str
    nfev: int
    invariants_start: np.ndarray | None = None

    def theta(self, i: int) -> Params:
        """Per-layer parameters at time index ``i``."""
        return unflatten_params(self.arch, self.params[i])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "arch": self.arch.to_dict(),
            "t": self.t.tolist(),
            "params": self.params.tolist(),
            "v": self.v.tolist(),
            "invariants": self.invariants.tolist(),
            "loss": self.loss.tolist(),
            "success": self.success,
            "message": self.message,
            "nfev": self.nfev,
            "invariants_start": (
                None if self.invariants_start is None else self.invariants_start.tolist()
            ),
        }


def _record(
    arch: Architecture,
    t: np.ndarray,
    X: np.ndarray,
    loss: FunctionLoss,
    start: np.ndarray,
    **kw: Any,
) -> FlowResult:
    """The `FlowResult` of the flat parameters ``X`` at times ``t``, from the flat ``start``."""
    vs, invs, ls = [], [], []
    for x in X:
        th = unflatten_params(arch, x)
        v = mu(arch, th) if isinstance(arch, LCN) else fc_mu(arch, th)
        vs.append(v)
        invs.append(invariants(arch, th))
        ls.append(loss.value(v))
    return FlowResult(
        arch=arch,
        t=np.asarray(t, dtype=np.float64),
        params=np.asarray(X),
        v=np.array(vs),
        invariants=np.array(invs),
        loss=np.array(ls),
        invariants_start=np.asarray(invariants(arch, unflatten_params(arch, start))),
        **kw,
    )


def _check_span(t_span: Any) -> tuple[float, float]:
    ts = tuple(float(x) for x in t_span)
    if len(ts) != 2 or not ts[1] > ts[0] or not all(np.isfinite(ts)):
        raise ValueError(f"t_span = {t_span!r}: expected (t0, t1) with finite t1 > t0")
    return ts


def _check_t_eval(t_eval: Any, span: tuple[float, float]) -> np.ndarray | None:
    """``None`` (the solver's own steps) or ``t_eval`` as a float64 array: one-dimensional, at
    least one finite time, strictly increasing, inside ``span`` — scipy's conditions, checked here
    with the argument's name (an empty ``t_eval`` would leave no state to report)."""
    if t_eval is None:
        return None
    try:
        te = np.asarray(t_eval, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"t_eval = {t_eval!r}: expected a sequence of times") from err
    if te.ndim != 1:
        raise ValueError(f"t_eval has shape {te.shape}: expected a 1-D sequence of times")
    if te.size == 0:
        raise ValueError(
            "t_eval is empty: pass None (the solver's own steps) or at least one time in t_span"
        )
    if not np.all(np.isfinite(te)) or np.any(np.diff(te) <= 0):
        raise ValueError(f"t_eval = {t_eval!r}: expected finite, strictly increasing times")
    for i, end, outside in ((0, span[0], te[0] < span[0]), (-1, span[1], te[-1] > span[1])):
        if outside:  # repr: a float32 grid's 0.1 is 0.10000000149011612
            raise ValueError(
                f"t_eval[{i}] = {float(te[i])!r} lies outside t_span = {span} (end {end!r}); "
                f"every time must lie in t_span (a float32 grid? pass float64 times)"
            )
    return te


def _check_tol(rtol: Any, atol: Any) -> None:
    """``rtol`` and ``atol`` of ``solve_ivp`` must be positive finite reals.

    scipy clamps ``rtol ≤ 0`` to ``100 ε`` with only a warning, and a NaN tolerance ends in NaN
    states (reported as an error about the parameters).
    """
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not (_is_real(value) and value > 0 and np.isfinite(value)):
            raise ValueError(f"{name} = {value!r}: expected a positive finite float")


def gradient_flow(
    arch: Architecture,
    theta0: Sequence[Any],
    loss: FunctionLoss,
    t_span: tuple[float, float],
    *,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    t_eval: Any = None,
) -> FlowResult:
    """Integrate ``θ̇ = −Jμ(θ)ᵀ ∇ℓ(μ(θ))`` with DOP853 (scipy ``solve_ivp``).

    ``t_eval`` defaults to the solver's own steps. The returned result carries ``v(t)``, the
    invariants and the loss at every recorded time.
    """
    span = _check_span(t_span)
    _check_tol(rtol, atol)
    t_eval = _check_t_eval(t_eval, span)
    x0 = flatten_params(arch, theta0)

    def rhs(_t: float, x: np.ndarray) -> np.ndarray:
        return -param_grad(arch, unflatten_params(arch, x), loss)

    sol = solve_ivp(rhs, span, x0, method="DOP853", rtol=rtol, atol=atol, t_eval=t_eval)
    return _record(
        arch,
        sol.t,
        sol.y.T,
        loss,
        x0,
        success=bool(sol.success),
        message=str(sol.message),
        nfev=int(sol.nfev),
    )


def gradient_descent(
    arch: Architecture,
    theta0: Sequence[Any],
    loss: FunctionLoss,
    *,
    lr: float,
    steps: int,
    record_every: int = 1,
) -> FlowResult:
    """``θ_{k+1} = θ_k − lr · ∇L(θ_k)`` for ``steps`` steps; time ``t_k = k · lr``.

    ``lr`` is any real number (NumPy scalars included, used as a float64), ``steps`` and
    ``record_every`` any integers (not bools).

    Each step changes ``δ_l`` by exactly ``lr² (‖g_{l+1}‖² − ‖g_l‖²)`` (the first-order terms cancel
    by the Euler identity), so over a fixed horizon ``T`` the drift is ``O(lr · T)``.
    """
    if not (_is_real(lr) and lr > 0 and np.isfinite(lr)):
        raise ValueError(f"lr = {lr!r}: expected a positive finite float")
    if not (_is_int(steps) and steps >= 1):
        raise ValueError(f"steps = {steps!r}: expected a positive int")
    if not (_is_int(record_every) and record_every >= 1):
        raise ValueError(f"record_every = {record_every!r}: expected a positive int")
    lr, steps, record_every = float(lr), int(steps), int(record_every)
    x = flatten_params(arch, theta0)
    ts, X = [0.0], [x.copy()]
    for k in range(1, steps + 1):
        x = x - lr * param_grad(arch, unflatten_params(arch, x), loss)
        if not np.all(np.isfinite(x)):
            return _record(
                arch,
                np.array(ts),
                np.array(X),
                loss,
                X[0],
                success=False,
                message=f"diverged at step {k}",
                nfev=k,
            )
        if k % record_every == 0 or k == steps:
            ts.append(k * lr)
            X.append(x.copy())
    return _record(
        arch, np.array(ts), np.array(X), loss, X[0], success=True, message="done", nfev=steps
    )


def invariant_drift(result: FlowResult) -> np.ndarray:
    """``max_m |I_m(t) − I_m(θ0)|`` per recorded time, ``(n_t,)`` (``I`` = δ or flattened Δ),
    against the invariants at the start ``θ0`` (``result.invariants_start``), also when the
    recorded times leave ``t0`` out (s30 trial LINFLOW #1: measured from the first recorded
    time, the drift read 0 where δ had moved by 1.8e-3); a result without that field falls back
    to the first recorded time."""
    inv = np.asarray(result.invariants)
    if inv.shape[1] == 0:
        return np.zeros(inv.shape[0])
    base = inv[0] if result.invariants_start is None else np.asarray(result.invariants_start)
    return np.max(np.abs(inv - base), axis=1)


@dataclass(frozen=True, eq=False)
class FunctionFlowResult:
    """A function-space trajectory ``v(t)`` of ``v̇ = −K_δ(v)∇ℓ(v)`` (or the balanced FC flow).

    Attributes:
        t: times ``(n_t,)``; v: ``(n_t, *out_shape)``; loss: ``ℓ(v(t))``.
        theta_last: (LCN) a fiber point of ``v(t_end)`` (also when ``t_eval`` stops earlier);
            empty for FC.
        max_fiber_residual: largest Gauss–Newton residual over the start and all RHS calls (LCN;
            0 for FC): how far solver stages strayed from ``M``, as the unit-scale residual of
            `solve.fiber_newton` (relative to the scale of ``(v, δ)``).
        n_rhs: number of RHS evaluations; success, message: solver status.
        sheet_note: None, or (LCN) why ``K`` need not be a function of ``(v, δ)`` on this
            architecture, so that the trajectory follows the sheet of ``theta_guess``
            (:func:`function_space_flow`; also emitted as a ``UserWarning``).
        min_smooth_margin: (LCN) the smallest ``σ_{dim M}(J)/σ_max(J)`` of the tracked fiber
            point over all RHS calls (1 for FC); t_min_margin: the time of that call.
        singular_note: None, or (LCN) a statement that the flow passed within
            ``SINGULAR_MARGIN`` of the singular locus of ``μ`` (also a ``UserWarning``).
        end_fiber_residual: (LCN) residual of ``v(t_end)`` on its fiber, from the last tracked
            point; ``success`` is False when it exceeds
            ``max(RTOL_END_FIBER, END_FIBER_PER_TOL · max(rtol, atol))`` (0 for FC).
    """

    t: np.ndarray
    v: np.ndarray
    loss: np.ndarray
    theta_last: Params
    max_fiber_residual: float
    n_rhs: int
    success: bool
    message: str
    sheet_note: str | None = None
    min_smooth_margin: float = 1.0
    t_min_margin: float | None = None
    singular_note: str | None = None
    end_fiber_residual: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "t": self.t.tolist(),
            "v": self.v.tolist(),
            "loss": self.loss.tolist(),
            "theta_last": [w.tolist() for w in self.theta_last],
            "max_fiber_residual": self.max_fiber_residual,
            "n_rhs": self.n_rhs,
            "success": self.success,
            "message": self.message,
            "sheet_note": self.sheet_note,
            "min_smooth_margin": self.min_smooth_margin,
            "t_min_margin": self.t_min_margin,
            "singular_note": self.singular_note,
            "end_fiber_residual": self.end_fiber_residual,
        }


def _sheet_note(arch: LCN) -> str | None:
    """Why ``K`` need not be a function of ``(v, δ)`` on ``arch`` (spec §4.3–4.4), or None.

    None when :func:`~neuromanifold.linear.sheets.regrouping_pairs` finds no pair, which asserts
    nothing: crossings such as spec §4.2 still carry several NTKs.
    """
    pairs = regrouping_pairs(arch)
    if not pairs:
        return None
    why = (
        "the same dilation (a stride one between them, spec §4.3)"
        if arch.D == 1
        else "the same dilation and filters in the same variables (spec §4.4 swap caveat)"
    )
    names = "; ".join(f"{i + 1} and {j + 1}" for i, j in pairs)
    return (
        f"K need not be a function of (v, delta) here: layers {names} have {why}, so "
        "factors of v can be regrouped between them and the (v, delta)-fiber has several sheets "
        "with, in general, different NTKs. This trajectory follows the sheet of theta_guess; "
        "near points where sheets meet (critical points of mu, e.g. a double root) the tracked "
        "fiber point is ill-conditioned and may stray or change sheet, and v(t) then departs "
        "from mu(theta(t)) of the parameter flow from theta_guess."
    )


def function_space_flow(
    arch: LCN,
    v0: Any,
    delta: Any,
    loss: FunctionLoss,
    t_span: tuple[float, float],
    *,
    theta_guess: Sequence[Any],
    rtol: float = 1e-12,
    atol: float = 1e-12,
    t_eval: Any = None,
) -> FunctionFlowResult:
    """Integrate ``v̇ = −K_δ(v) ∇ℓ(v)`` in function space (DOP853), ``K`` rebuilt from ``(v, δ)``.

    At every RHS call :func:`~neuromanifold.linear.solve.fiber_newton` moves the previous fiber
    point (initially ``theta_guess``, which need only be close to the ``(v0, δ)``-fiber) onto the
    ``(v, δ)``-fiber (least squares for stage points slightly off ``M``) and ``K_δ(v) = K(θ)``.
    Before integrating, Gauss–Newton from ``theta_guess`` must reach the ``(v0, δ)``-fiber to the
    unit-scale residual ``RTOL_START_FIBER``; otherwise (``v0`` off ``M``, or a guess from which
    it stalls, e.g. zero filters) a ``ValueError`` names ``v0`` and ``theta_guess``.
    Meaningful where ``K`` is single-valued on the fiber: 1-D with all strides > 1, **on the
    smooth locus** (spec §4.1); crossings such as spec §4.2 carry several NTKs, and which one the
    flow uses depends on the fiber point the solver tracks.

    Where the architecture itself lets factors of ``v`` move between layers (1-D with a stride
    one between non-scalar layers, spec §4.3; ``D ≥ 2`` with two layers of equal dilation on the
    axes their filters use and the same filter shape, §4.4, or filters along one and the same
    axis only, the 1-D mechanism; `neuromanifold.linear.sheets.regrouping_pairs`), ``K`` is not a
    function of ``(v, δ)``: the flow still runs (the
    sheet-following flow is the function-space image of the parameter flow from ``theta_guess``
    up to a point where sheets meet), and the result's ``sheet_note`` says so, also emitted as a
    ``UserWarning``. Which sheet is followed is chosen by ``theta_guess``, not by ``(v0, δ)``.

    Every RHS call also records the smooth-point margin ``σ_{dim M}(J)/σ_max(J)`` of the tracked
    fiber point (from the eigenvalues of ``JᵀJ``). Where it falls below ``SINGULAR_MARGIN`` the
    flow passed near the singular locus of ``μ``, where sheets meet and the tracked point can
    change sheet: ``singular_note`` says when, also as a ``UserWarning`` (compare with the
    parameter flow there). ``success`` requires the solver's success and ``v(t_end)`` on its
    fiber to ``max(RTOL_END_FIBER, END_FIBER_PER_TOL · max(rtol, atol))``.
    """
    v0, d = _check_target(arch, v0, delta)
    span = _check_span(t_span)
    _check_tol(rtol, atol)
    te = _check_t_eval(t_eval, span)
    start = fiber_newton(arch, v0, d, theta_guess)
    if not start.residual <= RTOL_START_FIBER:
        raise ValueError(
            f"v0 is not realised from theta_guess: Gauss–Newton from theta_guess stops at the "
            f"unit-scale fiber residual {start.residual:.3e} > RTOL_START_FIBER = "
            f"{RTOL_START_FIBER:g} (solve.fiber_newton); either v0 is not on M with invariants "
            "delta, or theta_guess is not close to the (v0, delta)-fiber (solve_fiber_point "
            "searches random starts)"
        )
    state: dict[str, Any] = {
        "theta": start.theta,
        "res": start.residual,
        "n": 0,
        "margin": 1.0,
        "t_margin": None,
    }
    note = _sheet_note(arch)
    if note is not None:
        warnings.warn(note, UserWarning, stacklevel=2)

    def rhs(t: float, y: np.ndarray) -> np.ndarray:
        v = y.reshape(arch.out_shape)
        res = fiber_newton(arch, v, d, state["theta"], max_iter=30)
        state["theta"] = res.theta
        state["res"] = max(state["res"], res.residual)
        state["n"] += 1
        J = jacobian(arch, res.theta)
        margin = _smooth_margin(J, arch.dim_M)
        if margin < state["margin"]:
            state["margin"], state["t_margin"] = margin, float(t)
        return -(J @ (J.T @ np.ravel(loss.grad(v))))  # K ∇ℓ with K = J Jᵀ

    # the end check needs v(t_end): a t_eval that stops before it gets t_end appended, and the
    # appended point is dropped from the returned trajectory
    extra = te is not None and te[-1] < span[1]
    sol = solve_ivp(
        rhs,
        span,
        v0.ravel(),
        method="DOP853",
        rtol=rtol,
        atol=atol,
        t_eval=np.append(te, span[1]) if extra else te,
    )
    v_end = sol.y[:, -1].reshape(arch.out_shape)  # v(t_end), or the last state reached
    t_out, y_out = sol.t, sol.y
    if extra and sol.t.size and sol.t[-1] == span[1]:
        t_out, y_out = sol.t[:-1], sol.y[:, :-1]
    vs = y_out.T.reshape(-1, *arch.out_shape)
    end = fiber_newton(arch, v_end, d, state["theta"])
    success, message = _end_status(bool(sol.success), str(sol.message), end.residual, rtol, atol)
    singular = None
    if state["margin"] < SINGULAR_MARGIN:
        singular = (
            f"the flow passed near the singular locus of mu: the smooth-point margin "
            f"sigma_dimM(J)/sigma_max(J) of the tracked fiber point fell to "
            f"{state['margin']:.1e} < SINGULAR_MARGIN = {SINGULAR_MARGIN:g} at t = "
            f"{state['t_margin']:.4g}. Sheets of the fiber meet there and K is not single "
            "valued; the tracked point may have changed sheet, and v(t) can depart from the "
            "parameter flow after that time."
        )
        warnings.warn(singular, UserWarning, stacklevel=2)
    return FunctionFlowResult(
        t=t_out,
        v=vs,
        loss=np.array([loss.value(v) for v in vs]),
        theta_last=end.theta,
        max_fiber_residual=float(state["res"]),
        n_rhs=int(state["n"]),
        success=success,
        message=message,
        sheet_note=note,
        min_smooth_margin=float(state["margin"]),
        t_min_margin=state["t_margin"],
        singular_note=singular,
        end_fiber_residual=float(end.residual),
    )


def _end_status(
    solved: bool, message: str, end_residual: float, rtol: float, atol: float
) -> tuple[bool, str]:
    """``(success, message)``: the solver's, and False where ``v(t_end)`` is off its fiber by more
    than ``max(RTOL_END_FIBER, END_FIBER_PER_TOL · max(rtol, atol))``."""
    limit = max(RTOL_END_FIBER, END_FIBER_PER_TOL * max(rtol, atol))
    if solved and not end_residual <= limit:
        return False, (
            f"{message} But v(t_end) is not realised on its (v, delta)-fiber: residual "
            f"{end_residual:.3e} > {limit:.1e} = max(RTOL_END_FIBER, END_FIBER_PER_TOL · "
            "max(rtol, atol)) from the last tracked fiber point."
        )
    return solved, message


def _smooth_margin(J: np.ndarray, dim_M: int) -> float:
    """``σ_{dim M}(J) / σ_max(J)`` from the eigenvalues of the small Gram matrix ``JᵀJ``.

    ``σ² = eig(JᵀJ)``; eigenvalues below zero by round-off count as 0. 0 for a zero ``J``.
    """
    lam = np.linalg.eigvalsh(J.T @ J)[::-1]
    if lam[0] <= 0:
        return 0.0
    return float(np.sqrt(max(lam[dim_M - 1], 0.0) / lam[0]))


def fc_balanced_flow(
    W0: Any,
    loss: FunctionLoss,
    t_span: tuple[float, float],
    *,
    depth: int,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    t_eval: Any = None,
) -> FunctionFlowResult:
    """Integrate the balanced FC flow ``Ẇ = −A_W(∇ℓ(W))`` (DOP853); ``depth`` is ``L``.

    Equals ``W_L⋯W_1`` along the parameter flow from a balanced initialisation (spec §4.5).
    """
    W0 = np.asarray(W0, dtype=np.float64)
    if W0.ndim != 2:
        raise ValueError(f"W0 has shape {W0.shape}: expected a matrix")
    if not (_is_int(depth) and depth >= 1):
        raise ValueError(f"depth = {depth!r}: expected a positive int L")
    depth = int(depth)
    span = _check_span(t_span)
    _check_tol(rtol, atol)
    t_eval = _check_t_eval(t_eval, span)
    n = {"n": 0}

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        W = y.reshape(W0.shape)
        n["n"] += 1
        return -fc_balanced_operator(W, loss.grad(W), depth=depth).ravel()

    sol = solve_ivp(rhs, span, W0.ravel(), method="DOP853", rtol=rtol, atol=atol, t_eval=t_eval)
    Ws = sol.y.T.reshape(-1, *W0.shape)
    return FunctionFlowResult(
        t=sol.t,
        v=Ws,
        loss=np.array([loss.value(W) for W in Ws]),
        theta_last=(),
        max_fiber_residual=0.0,
        n_rhs=n["n"],
        success=bool(sol.success),
        message=str(sol.message),
    )
