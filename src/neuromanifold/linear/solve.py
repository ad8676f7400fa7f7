"""Points of the ``(v, δ)``-fiber by Gauss–Newton, and the NTK ``K_δ(v)`` rebuilt from ``(v, δ)``.

``Φ(θ) = (μ(θ), δ(θ))``. :func:`fiber_newton` solves ``Φ(θ) = (v, δ)`` in the least-squares sense
by Levenberg–Marquardt-damped Gauss–Newton on the residual
``F(θ) = (vec(μ(θ) − v), δ(θ) − δ)`` with Jacobian ``[Jμ; dδ]``,
``dδ_l = 2⟨w_{l+1}, ·⟩ − 2⟨w_l, ·⟩``.
At a regular point with non-zero filters ``dΦ`` has full column rank (spec §2.6), so convergence
is quadratic near the fiber. For ``v`` slightly off ``M`` (stages of an ODE solver) it converges
to the nearest least-squares point, i.e. it also projects onto ``M``.

Scale: ``Φ(cθ) = (c^L μ(θ), c² δ(θ))``, so the iteration runs at unit scale on
``(v/ρ^L, δ/ρ²)`` from ``θ0/ρ`` with ``ρ = (‖v‖₂^{2/L} + ‖δ‖₂)^{1/2}``
(:func:`~.rescale.fiber_scale`; ``ρ = 1`` only where ``v = 0`` and ``δ = 0``) and returns
``ρθ̃``. Residuals and tolerances are those of the unit-scale problem, i.e. relative to ``ρ^L``
for ``μ`` and to ``ρ²`` for ``δ``: the result for ``(c^L v, c² δ, cθ0)`` is ``c`` times the
result for ``(v, δ, θ0)``, and the least-squares point off ``M`` weighs ``μ`` and ``δ`` the same
way at every scale.

``K_δ(v)`` (spec §2.5) is the NTK at any fiber point; equivalently, for any factorisation ``u`` of
``v``: ``K_δ(v) = N(v) Σ_l G_l(û) / x_l`` with ``N = Π_l ‖u_l‖²``, ``û_l = u_l/‖u_l‖`` and ``x`` the
Lemma's squared norms (:func:`ntk_closed_form`). With all strides > 1 in 1-D, ``K`` is a
function of ``(v, δ)`` on the smooth locus only (spec §4.1). Where the fiber carries several
NTKs (stride one in 1-D, equal-shape swaps in D-D, and crossings such as spec §4.2 even with all
strides ``> 1``) the result depends on which point the solver reaches (e.g. on ``seed``);
:func:`~.fiber.lcn_fiber` lists all of them.

References: Achour, Kohn, Rauhut, arXiv:2507.06367, §2.5 of the library's spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import (
    LCN,
    Params,
    _is_int,
    flatten_params,
    real_array,
    unflatten_params,
)
from neuromanifold.linear.architecture import validate_params as _validate_params
from neuromanifold.linear.invariants import delta as _delta
from neuromanifold.linear.invariants import sq_norms as _sq_norms
from neuromanifold.linear.ntk import gram_blocks, mu_and_jacobian, ntk_at_fiber_point
from neuromanifold.linear.rescale import (
    _TINY,
    _norm,
    fiber_scale,
    lemma_log_squared_norms,
    lemma_squared_norms,
    log_sq_norms,
    rescale_to_delta,
)

__all__ = [
    "NewtonResult",
    "fiber_newton",
    "ntk_closed_form",
    "ntk_from_function",
    "solve_fiber_point",
]


@dataclass(frozen=True)
class NewtonResult:
    """Outcome of :func:`fiber_newton`.

    Attributes:
        theta: final parameters (tuple of per-layer arrays).
        residual: the unit-scale ``‖F‖_∞ = max(‖μ(θ) − v‖_∞ / ρ^L, ‖δ(θ) − δ‖_∞ / ρ²)``
            (module docstring), the largest relative violation of ``μ(θ) = v``, ``δ(θ) = δ``.
        iterations: number of Gauss–Newton iterations taken.
        converged: ``residual ≤ tolerance``.
        tolerance: the threshold ``tol`` that was applied (relative, like ``residual``).
        scale: ``ρ = (‖v‖₂^{2/L} + ‖δ‖₂)^{1/2}``, the scale the residual refers to.
    """

    theta: Params
    residual: float
    iterations: int
    converged: bool
    tolerance: float
    scale: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "theta": [w.tolist() for w in self.theta],
            "residual": self.residual,
            "iterations": self.iterations,
            "converged": self.converged,
            "tolerance": self.tolerance,
            "scale": self.scale,
        }


def _check_target(arch: LCN, v: Any, delta: Any) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN")
    v = real_array(v, "v")
    if v.shape != arch.out_shape:
        raise ValueError(f"v has shape {v.shape}: expected arch.out_shape = {arch.out_shape}")
    d = real_array(delta, "delta")
    if d.shape != (arch.L - 1,):
        raise ValueError(f"delta has shape {d.shape}: expected ({arch.L - 1},) = (L − 1,)")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(d))):
        raise ValueError("v and delta must be finite")
    return v, d


def _residual_and_jacobian(
    arch: LCN, x: np.ndarray, v: np.ndarray, d: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    theta = unflatten_params(arch, x)
    vt, J = mu_and_jacobian(arch, theta)
    F = np.concatenate([(vt - v).ravel(), _delta(theta) - d])
    Jd = np.zeros((arch.L - 1, arch.n_params))
    offs = np.concatenate([[0], np.cumsum(arch.layer_sizes)])
    for l in range(arch.L - 1):
        Jd[l, offs[l] : offs[l + 1]] = -2.0 * theta[l].ravel()
        Jd[l, offs[l + 1] : offs[l + 2]] = 2.0 * theta[l + 1].ravel()
    return F, np.vstack([J, Jd])


def fiber_newton(
    arch: LCN,
    v: Any,
    delta: Any,
    theta0: Sequence[Any],
    *,
    tol: float = 1e-13,
    max_iter: int = 100,
) -> NewtonResult:
    """Damped Gauss–Newton for ``μ(θ) = v``, ``δ(θ) = δ`` from ``theta0``.

    Each iteration solves ``min_s ‖J_F s + F‖² + λ‖s‖²`` (Levenberg–Marquardt, ``λ`` adapted:
    divided by 10 after an accepted step, multiplied by 10 after a rejected one, starting at 0,
    i.e. plain Gauss–Newton while it decreases ``‖F‖²``), all at unit scale (module docstring).
    Stops at ``‖F‖_∞ ≤ tol`` (unit-scale residual), when ``‖s‖ ≤ 8ε‖θ‖`` (a floating-point fixed
    point, e.g. the least-squares point for ``v`` off ``M``), or after ``max_iter`` iterations
    (rejected steps included).
    """
    v, d = _check_target(arch, v, delta)
    if not (_is_int(max_iter) and max_iter >= 1):
        raise ValueError(f"max_iter = {max_iter!r}: expected a positive int")
    max_iter = int(max_iter)
    if not tol > 0:
        raise ValueError(f"tol = {tol!r}: expected a positive float")
    rho = fiber_scale(v, d, arch.L)
    v, d = _unit(v, arch.L, rho), d / rho**2
    x = flatten_params(arch, theta0) / rho
    thresh = tol
    F, JF = _residual_and_jacobian(arch, x, v, d)
    cost = float(F @ F)
    lam = 0.0
    n = arch.n_params
    it = 0
    eps_step = 8 * np.finfo(float).eps
    lam_floor = 1e-12 * float(np.max(np.sum(JF * JF, axis=0)))
    while it < max_iter and np.max(np.abs(F)) > thresh:
        it += 1  # rejected (damping-increase) attempts count as iterations too
        if lam > 0:
            A = np.vstack([JF, np.sqrt(lam) * np.eye(n)])
            b = np.concatenate([-F, np.zeros(n)])
        else:
            A, b = JF, -F
        step = np.linalg.lstsq(A, b, rcond=None)[0]
        if np.linalg.norm(step) <= eps_step * np.linalg.norm(x):
            break  # floating-point fixed point (e.g. the least-squares point off M)
        x_new = x + step
        F_new, JF_new = _residual_and_jacobian(arch, x_new, v, d)
        cost_new = float(F_new @ F_new)
        if cost_new < cost:
            x, F, JF, cost = x_new, F_new, JF_new, cost_new
            lam = 0.0 if lam <= lam_floor else lam / 10.0
        else:
            lam = max(10.0 * lam, lam_floor)
    res = float(np.max(np.abs(F)))
    return NewtonResult(
        theta=unflatten_params(arch, rho * x),
        residual=res,
        iterations=it,
        converged=res <= thresh,
        tolerance=thresh,
        scale=rho,
    )


def _unit(v: np.ndarray, L: int, rho: float) -> np.ndarray:
    """``v / ρ^L``, dividing by ``ρ`` ``L`` times (``ρ^L`` itself may overflow or underflow)."""
    for _ in range(L):
        v = v / rho
    return v


def _random_start(arch: LCN, v: np.ndarray, d: np.ndarray, rng: np.random.Generator) -> Params:
    theta = [rng.standard_normal(s) for s in arch.filters]
    # at unit scale: match the overall scale Π‖w_l‖ ≈ ‖v‖, then the invariants exactly
    rho = fiber_scale(v, d, arch.L)
    vu, du = _unit(v, arch.L, rho), d / rho**2
    nv = float(np.linalg.norm(vu))
    target = nv ** (1.0 / arch.L) if nv > 0 else 1.0  # v = 0 exactly: unit filters
    theta = [w * (target / max(float(np.linalg.norm(w)), 1e-300)) for w in theta]
    return tuple(rho * w for w in rescale_to_delta(theta, du))


def _balanced_start(
    arch: LCN, v: np.ndarray, d: np.ndarray, rng: np.random.Generator, tol: float
) -> Params:
    """A random start solved on the balanced fiber over ``(v, 0)`` and moved to ``δ`` by the
    Lemma (exact: positive scalings with ``Π λ_l = 1`` keep ``μ``); where that solve does not
    converge, the random start moved to ``δ`` directly (:func:`_random_start`).

    At strongly unbalanced ``δ`` (layers of norm ``√1000`` next to one of ``10⁻²``) Gauss–Newton
    from random starts at ``δ`` itself did not converge (s14 trial O #1); the balanced problem is
    well conditioned, and every point over ``(v, δ)`` with ``v ≠ 0`` is the Lemma image of one
    over ``(v, 0)``."""
    zero = np.zeros_like(d)
    balanced = fiber_newton(arch, v, zero, _random_start(arch, v, zero, rng), tol=tol)
    if balanced.converged and all(np.any(w) for w in balanced.theta):
        return rescale_to_delta(balanced.theta, d)
    return _random_start(arch, v, d, rng)


def _guess_start(theta: Params, d: np.ndarray) -> Params | None:
    """``theta`` itself, or its Lemma image at ``δ`` (same ``μ``) when a squared layer norm of
    ``theta`` is not a normal float64 (layers of norm ``1e-170`` and ``1e170``: the Gauss–Newton
    residual ``δ(θ) − δ`` overflowed; s16 trial Z #3). ``None`` (the guess is not used, the random
    starts are) when no such image exists: a zero layer next to a layer whose squared norm
    overflows, or scalings that are not representable (s16 audit AA #6)."""
    with np.errstate(over="ignore", under="ignore"):
        a = _sq_norms(theta)
    if np.all(np.isfinite(a)) and np.all((a >= _TINY) | (a == 0)):
        return theta
    if not all(np.any(w) for w in theta):
        return None if not np.all(np.isfinite(a)) else theta
    try:
        return rescale_to_delta(theta, d)
    except ValueError:
        return None


def solve_fiber_point(
    arch: LCN,
    v: Any,
    delta: Any,
    *,
    theta_guess: Sequence[Any] | None = None,
    n_starts: int = 20,
    seed: int = 0,
    tol: float = 1e-13,
) -> NewtonResult:
    """A ``(v, δ)``-fiber point: :func:`fiber_newton` from ``theta_guess``, then random starts.

    Random starts are Gaussian filters scaled to ``Π‖w_l‖ = ‖v‖``, rescaled by the Lemma to ``δ``
    (drawn at unit scale, module docstring); where ``v ≠ 0`` each is first solved on the balanced
    fiber over ``(v, 0)`` and that point moved to ``δ`` by the Lemma (:func:`_balanced_start`).
    A guess whose squared layer norms are not normal float64 numbers starts from its Lemma image
    at ``δ`` (:func:`_guess_start`), and is left out when it has none.
    Returns the first converged result, else the one with the smallest (unit-scale) residual.
    ``n_starts`` (random starts) must be ``≥ 0``, and ``≥ 1`` without ``theta_guess``; ``seed``
    a non-negative int.
    """
    v, d = _check_target(arch, v, delta)
    if not (_is_int(n_starts) and n_starts >= 0):
        raise ValueError(f"n_starts = {n_starts!r}: expected an int >= 0 (random starts)")
    if n_starts == 0 and theta_guess is None:
        raise ValueError(
            "n_starts = 0 and no theta_guess: expected an int >= 1 (there is no start to try)"
        )
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed = {seed!r}: expected a non-negative int")
    rng = np.random.default_rng(int(seed))
    best: NewtonResult | None = None
    starts: list[Params] = []
    guess = None if theta_guess is None else _guess_start(_validate_params(arch, theta_guess), d)
    if guess is not None:
        starts.append(guess)
    for i in range(int(n_starts) + len(starts)):
        if i < len(starts):
            th0 = starts[i]
        elif np.any(v) and arch.L > 1:
            th0 = _balanced_start(arch, v, d, rng, tol)
        else:
            th0 = _random_start(arch, v, d, rng)
        res = fiber_newton(arch, v, d, th0, tol=tol)
        if res.converged:
            return res
        if best is None or res.residual < best.residual:
            best = res
    if best is None:  # n_starts = 0 and a guess that could not be used
        raise ValueError(
            "theta_guess cannot start Gauss–Newton (a zero layer next to a layer whose squared "
            "norm overflows float64, or scalings to δ that are not representable) and "
            "n_starts = 0: expected n_starts >= 1 or a representable guess"
        )
    return best


def ntk_from_function(
    arch: LCN,
    v: Any,
    delta: Any,
    *,
    theta_guess: Sequence[Any] | None = None,
    n_starts: int = 20,
    seed: int = 0,
    tol: float = 1e-13,
) -> np.ndarray:
    """``K_δ(v)``: the NTK at a fiber point found from ``(v, δ)`` alone, shape ``(n_v, n_v)``.

    Uses :func:`solve_fiber_point` (``ValueError`` for ``n_starts < 0``, or ``0`` without
    ``theta_guess``); raises ``RuntimeError`` (with the best residual) if no start converged.
    Scale-covariant: ``(c^L v, c² δ)`` gives ``c^{2L−2}`` times the NTK of ``(v, δ)``
    (``K = Jμ Jμᵀ`` and ``Jμ`` is homogeneous of degree ``L − 1``). Only one fiber point is
    found: where the fiber carries several NTKs (stride one, or a crossing such as spec §4.2 with
    strides > 1) the NTK returned depends on the start (use :func:`~.fiber.lcn_fiber` to see
    them all). ``v = 0`` raises ``ValueError``: every θ with a zero layer realises it, a
    continuum of fiber points whose NTKs differ, so K is no function of ``(v, δ)`` there (s30
    trial LINFLOW #2: two seeds gave NTKs 1.5 apart, silently).
    """
    res = solve_fiber_point(
        arch, v, delta, theta_guess=theta_guess, n_starts=n_starts, seed=seed, tol=tol
    )
    if not np.any(np.asarray(v, dtype=np.float64)):  # v was checked by solve_fiber_point
        raise ValueError(
            "v = 0: every parameter with a zero layer realises it, a continuum of fiber points "
            "with different NTKs, so K is not a function of (v, delta) there; lcn_fiber lists "
            "them (continuum=True)"
        )
    if not res.converged:
        raise RuntimeError(
            f"no fiber point found for the given (v, delta): best residual {res.residual:.3e} > "
            f"tolerance {res.tolerance:.3e} after {n_starts} random starts"
        )
    return ntk_at_fiber_point(arch, res.theta)


def ntk_closed_form(arch: LCN, u: Sequence[Any], delta: Any) -> np.ndarray:
    """``K_δ(v) = N(v) Σ_l G_l(û) / x_l`` from any factorisation ``u`` of ``v`` (spec §2.5).

    ``N = Π_l ‖u_l‖²``, ``û_l = u_l / ‖u_l‖``, ``x = lemma_squared_norms(‖u‖², δ)``. Where
    ``‖u_l‖²`` or ``N`` is not representable in float64 (small or large filters: ``N`` of three
    layers of norm ``1e-70`` underflows) or where ``x_l`` or ``N / x_l`` is subnormal, each
    ``N / x_l`` is taken from the logs of the norms; a coefficient that underflows there is
    dropped (its term is below round-off of the others), and ``ValueError`` is raised when all
    underflow or one overflows (``K`` itself is then not representable). ``L = 1``: ``K = I``.
    Spec §6:
    ``k = (2, 2)``, ``s = 2``, ``u = ((1, 2), (3, 1))`` with its own ``δ = 5`` gives ``K(u)``.

    >>> ntk_closed_form(LCN((2, 2), (2,)), [[1, 2], [3, 1]], [5.0]).round(12).tolist()[0]
    [10.0, 2.0, 3.0, 0.0]
    """
    th = _validate_params(arch, u)
    if arch.L == 1:  # μ is the identity: N / x_1 = 1 and K = G_1 = I, for every u (also 0)
        lemma_log_squared_norms(np.zeros(1), delta)  # δ must be empty
        return gram_blocks(arch, th)[0]
    log_a = log_sq_norms(th)
    zero = [i + 1 for i, x in enumerate(log_a) if x == -np.inf]
    if zero:
        raise ValueError(f"u layer {zero[0]} is the zero filter: expected non-zero filters")
    unit = [w / _norm(w) for w in th]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        a = _sq_norms(th)
        N = float(np.prod(a))
    c = None
    if np.all(np.isfinite(a)) and np.all(a >= _TINY) and _TINY <= N < np.inf:
        x = lemma_squared_norms(a, delta)
        with np.errstate(over="ignore", under="ignore"):
            c = N / x
        if not (np.all(x >= _TINY) and np.all(np.isfinite(c)) and np.all(c >= _TINY)):
            c = None  # x_l or N / x_l is not a normal float64 (lost bits, or ∞): use the logs
    if c is None:  # each coefficient N / x_l from the logs of the norms
        log_c = float(np.sum(log_a)) - lemma_log_squared_norms(log_a, delta)
        with np.errstate(over="ignore", under="ignore"):
            c = np.exp(log_c)
        if not (np.all(np.isfinite(c)) and np.any(c > 0)):
            raise ValueError(
                "K_δ(v) is not representable in float64: its coefficients N/x_l = "
                f"exp({log_c.tolist()}) all underflow or one overflows (rescale u: K has degree "
                "2(L − 1) in the scale of u)"
            )
    return sum(cl * G for G, cl in zip(gram_blocks(arch, unit), c, strict=True))
