"""The unique positive rescaling realising prescribed invariants (paper's Lemma 3), and balanced FC.

Lemma (spec §3). For non-zero filters ``u_1..u_L`` with squared norms ``a_l`` and any
``δ ∈ R^{L−1}`` there is exactly one ``λ ∈ R_{>0}^L`` with ``Π λ_l = 1`` and
``‖λ_{l+1}u_{l+1}‖² − ‖λ_l u_l‖² = δ_l``. Algorithm: the new squared norms ``x_l = λ_l² a_l``
satisfy ``x_l = x_1 + D_l`` (``D_l = Σ_{j<l} δ_j``) and ``Π x_l = P = Π a_l``. With offsets
``e_l = D_l − min_m D_m ≥ 0`` (computed **first**, exactly 0 for a minimising layer ``m``, each as
a correctly rounded sum of the δ's between ``m`` and ``l``, `_offsets`) and
``x_l = t + e_l``, the root ``t* > 0`` of ``Σ_l log(t + e_l) = log P`` is unique. It is found by
safeguarded Newton in ``u = log t``: ``h(u) = Σ_l log(e^u + e_l) − log P`` is increasing and convex
with ``h' ≥ 1``, so ``[u₀ − h(u₀)⁺, u₀ + h(u₀)⁻]`` brackets the root and Newton from the right end
decreases monotonically to it. Evaluating ``(t + c) + D_l`` instead loses precision when ``t ≪ c``.
A result that float64 cannot hold (``x_l`` or ``λ_l`` underflowing to 0 or overflowing to ``inf``,
e.g. squared norms ``1e-200``) raises ``ValueError``; ``λ`` is evaluated in logs when only ``x``
is out of range.

References: Achour, Kohn, Rauhut, arXiv:2507.06367, Lemma 3 (inspired by Kohn et al. 2022,
Cor. 5.14); Bah, Rauhut, Terstiege, Westdickenberg, Inf. Inference 2022 (balanced FC).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import FC, real_array
from neuromanifold.linear.invariants import sq_norms as _sq_norms

__all__ = [
    "fc_balanced_params",
    "fiber_scale",
    "lemma_log_squared_norms",
    "lemma_scalings",
    "lemma_squared_norms",
    "log_sq_norms",
    "rescale_to_delta",
]

_MAX_ITER = 200
# fc_balanced_params: singular values s_i > RTOL_FC_RANK · s_1 count towards rank W (relative to
# ‖W‖₂, so the verdict does not depend on the scale of W). A product of rank ≤ r computed in
# float64 has trailing s_i of order ε·s_1 (~1e-16), well below; the discarded part bounds the
# error of the returned factorisation, ‖W_L⋯W_1 − W‖₂ ≤ RTOL_FC_RANK · ‖W‖₂ (+ rounding).
RTOL_FC_RANK = 1e-12
#: ``log`` of the largest float64: ``math.exp`` raises OverflowError above it.
_LOG_MAX = math.log(np.finfo(np.float64).max)
#: smallest normal float64: squared norms below it have lost bits (subnormal) and take the logs
_TINY = float(np.finfo(np.float64).tiny)


def _validate(sq_norms: Any, delta: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(sq_norms, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"sq_norms has shape {a.shape}: expected a non-empty vector (L,)")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(
            f"sq_norms = {a.tolist()}: expected finite positive squared norms (non-zero filters)"
        )
    d = real_array(delta, "delta")
    if d.shape != (a.size - 1,):
        raise ValueError(f"delta has shape {d.shape}: expected ({a.size - 1},) = (L − 1,)")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"delta = {d.tolist()}: entries must be finite")
    return a, d


def _offsets(d: np.ndarray) -> np.ndarray:
    """``e_l = D_l − min_m D_m`` (shape ``(L,)``), each a correctly rounded sum of consecutive δ's.

    ``e_l = Σ_{m ≤ j < l} δ_j`` (``l > m``) or ``−Σ_{l ≤ j < m} δ_j`` (``l < m``) from a minimising
    layer ``m``, by ``math.fsum``: differences of the running sums ``D`` would keep only
    ``ulp(max|D|)`` of a small δ that follows a large one (δ = (−1e8, 0.3) gave
    ``x₃ − x₂ = 0.29999999702``; s15 trial R #1). ``m`` starts at the float argmin of ``D``; an
    exactly rounded negative offset (a near tie) moves it there until every offset is ``≥ 0``.
    """
    L = d.size + 1
    m = int(np.argmin(np.concatenate([[0.0], np.cumsum(d)])))
    while True:
        e = np.array(
            [math.fsum(d[m:l]) if l >= m else -math.fsum(d[l:m]) for l in range(L)],
            dtype=np.float64,
        )
        if e.min() >= 0.0:
            return e
        m = int(np.argmin(e))  # the exact sums' sign is right: a strictly lower D_m


def _lemma_log_root(log_a: np.ndarray, d: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(u*, e, log e)``: the root ``u* = log t*`` of ``h`` and the offsets (module docstring),
    from ``log_a = log ‖u_l‖²``.

    ``L ≥ 2``. ``u*`` is finite whenever ``log a`` and ``δ`` are finite, even where
    ``t* = e^{u*}`` (or ``a`` itself) is not representable in float64.
    """
    e = _offsets(d)
    log_e = np.full(e.shape, -np.inf)
    pos = e > 0
    log_e[pos] = np.log(e[pos])
    log_P = float(np.sum(log_a))

    def h(u: float) -> float:
        return float(np.sum(np.logaddexp(u, log_e))) - log_P

    def dh(u: float) -> float:
        with np.errstate(over="ignore"):  # exp → inf gives the exact limit 1 / (1 + inf) = 0
            return float(np.sum(1.0 / (1.0 + np.exp(log_e - u))))

    u0 = log_P / log_a.size
    h0 = h(u0)
    lo, hi = (u0 - h0, u0) if h0 > 0 else (u0, u0 - h0)  # h' ≥ 1 makes this a bracket
    u = hi
    for _ in range(_MAX_ITER):
        hu = h(u)
        if hu == 0.0:
            break
        if hu > 0:
            hi = u
        else:
            lo = u
        step = hu / dh(u)
        u_new = u - step
        if not (lo <= u_new <= hi):
            u_new = 0.5 * (lo + hi)
        if abs(u_new - u) <= 4 * np.finfo(float).eps * max(1.0, abs(u)):
            u = u_new
            break
        u = u_new
    return u, e, log_e


def _not_representable(func: str, a: np.ndarray, d: np.ndarray, detail: str) -> ValueError:
    return ValueError(
        f"{func}(sq_norms={a.tolist()}, delta={d.tolist()}): the result is not representable "
        f"in float64 ({detail}); the exact rescaling underflows to 0 or overflows to inf"
    )


def lemma_squared_norms(sq_norms: Any, delta: Any) -> np.ndarray:
    """New squared norms ``x`` (shape ``(L,)``): ``x_{l+1} − x_l = δ_l``, ``Π x_l = Π sq_norms``.

    Spec §3 exact example: ``‖u‖² = (1, 2, 3)``, ``δ = (1, −2)`` gives ``x = (2, 3, 1)``.
    Raises ``ValueError`` when ``x`` is not representable in float64 (``t* = e^{u*}`` is 0 or
    ``inf``, e.g. squared norms ``1e-200`` with ``δ ≈ 1e-3``), instead of returning a zero.

    >>> lemma_squared_norms([1.0, 2.0, 3.0], [1.0, -2.0]).round(12).tolist()
    [2.0, 3.0, 1.0]
    """
    a, d = _validate(sq_norms, delta)
    if a.size == 1:
        return a.copy()
    u, e, _ = _lemma_log_root(np.log(a), d)
    t = math.exp(u) if u < _LOG_MAX else math.inf
    if not 0.0 < t < math.inf:
        raise _not_representable("lemma_squared_norms", a, d, f"x_min = t* = exp({u:.6g}) = {t}")
    return t + e


def lemma_scalings(sq_norms: Any, delta: Any) -> np.ndarray:
    """The unique ``λ > 0`` (shape ``(L,)``) with ``Π λ_l = 1`` realising invariants ``δ``.

    ``λ_l = √(x_l / a_l)`` with ``x`` as in :func:`lemma_squared_norms`; where ``x`` or
    ``x / a`` is not representable but ``λ`` is (e.g. squared norms ``1e-200``), ``λ`` is
    evaluated in logs, ``log λ_l = (log(t* + e_l) − log a_l) / 2``. Raises ``ValueError`` when
    some ``λ_l`` is itself 0 or ``inf`` in float64. ``L = 1`` returns ``λ = (1,)``.

    >>> lemma_scalings([1.0, 2.0, 3.0], [1.0, -2.0]).round(12).tolist()  # (√2, √1.5, 1/√3)
    [1.414213562373, 1.224744871392, 0.57735026919]
    """
    a, d = _validate(sq_norms, delta)
    if a.size == 1:
        return np.ones(1)
    u, e, log_e = _lemma_log_root(np.log(a), d)
    t = math.exp(u) if u < _LOG_MAX else math.inf
    with np.errstate(over="ignore", under="ignore"):
        lam = np.sqrt((t + e) / a)
        if 0.0 < t < math.inf and np.all(lam > 0) and np.all(np.isfinite(lam)):
            return lam  # the direct evaluation √(x / a) with x from lemma_squared_norms
        log_lam = 0.5 * (np.logaddexp(u, log_e) - np.log(a))
        lam = np.exp(log_lam)
    if not (np.all(lam > 0) and np.all(np.isfinite(lam))):
        raise _not_representable(
            "lemma_scalings", a, d, f"log λ = {[float(f'{x:.6g}') for x in log_lam]}"
        )
    return lam


def log_sq_norms(theta: Sequence[Any]) -> np.ndarray:
    """``(log ‖w_1‖², …, log ‖w_L‖²)`` from overflow-free norms (shape ``(L,)``; ``−inf`` for a
    zero filter, ``nan`` for a filter with a non-finite entry). Finite for every non-zero finite
    filter, also where ``‖w_l‖²`` itself underflows to 0 or overflows to ``inf`` in float64
    (norms beyond about ``1e±154``).
    """
    out = []
    for n in map(_norm_of, theta):
        out.append(2.0 * math.log(n) if 0 < n < math.inf else (-math.inf if n == 0 else math.nan))
    return np.array(out)


def _norm_of(w: Any) -> float:
    x = np.asarray(w, dtype=np.float64)
    return _norm(x) if np.all(np.isfinite(x)) else math.nan


def lemma_log_squared_norms(log_sq_norms: Any, delta: Any) -> np.ndarray:
    """``log x`` (shape ``(L,)``), ``x`` the Lemma's squared norms (:func:`lemma_squared_norms`),
    from ``log ‖u_l‖²``: ``log x_l = log(t* + e_l) = logaddexp(u*, log e_l)``.

    Finite whenever the inputs are finite, even where ``x`` or ``‖u_l‖²`` is not representable
    in float64. ``L = 1`` returns the input.
    """
    log_a = np.asarray(log_sq_norms, dtype=np.float64)
    if log_a.ndim != 1 or log_a.size == 0 or not np.all(np.isfinite(log_a)):
        raise ValueError(
            f"log_sq_norms = {log_a.tolist()}: expected a non-empty vector of finite logs "
            "(non-zero filters)"
        )
    _, d = _validate(np.ones(log_a.size), delta)
    if log_a.size == 1:
        return log_a.copy()
    u, _, log_e = _lemma_log_root(log_a, d)
    return np.logaddexp(u, log_e)


def rescale_to_delta(theta: Sequence[Any], delta: Any) -> tuple[np.ndarray, ...]:
    """``(λ_l w_l)_l`` with ``λ`` from :func:`lemma_scalings`: same ``μ``, invariants ``δ``.

    Where some ``‖w_l‖²`` is not a normal float64 (norms beyond about ``1e±154``: 0, subnormal
    or ``inf``), ``λ`` comes from the logs of the norms, ``log λ_l = (log x_l − log ‖w_l‖²)/2``
    (:func:`lemma_log_squared_norms`; relative error about ``|log ‖w_l‖²| · ε``, 1e-13 at
    norms of 1e-170). ``L = 1``: ``λ = 1`` (the zero filter included). Raises ``ValueError`` for
    a non-finite entry, for a zero filter of a deeper network (no rescaling reaches another
    ``δ``) and where some ``λ_l w_l`` is not representable (it would underflow to a zero filter
    or overflow).

    >>> [w.round(12).tolist() for w in rescale_to_delta([[1.0, 0.0], [1.0, 1.0]], [0.0])]
    [[1.189207115003, 0.0], [0.840896415254, 0.840896415254]]
    """
    ws = [np.asarray(w, dtype=np.float64) for w in theta]
    bad = [i + 1 for i, w in enumerate(ws) if not np.all(np.isfinite(w))]
    if bad:
        raise ValueError(f"theta layer {bad[0]}: entries must be finite")
    if len(ws) == 1:
        _validate(np.ones(1), delta)
        return (ws[0].copy(),)
    log_a = log_sq_norms(ws)
    zero = [i + 1 for i, x in enumerate(log_a) if x == -math.inf]
    if zero:
        raise ValueError(
            f"theta layer {zero[0]} is the zero filter: expected non-zero filters (the Lemma "
            "rescales them by positive factors)"
        )
    with np.errstate(over="ignore", under="ignore"):
        a = _sq_norms(ws)
    if np.all(np.isfinite(a)) and np.all(a >= _TINY):
        lam = lemma_scalings(a, delta)
    else:  # a squared norm is not a normal float64: λ from the logs of the norms
        d = _validate(np.ones(len(ws)), delta)[1]
        log_lam = 0.5 * (lemma_log_squared_norms(log_a, d) - log_a)
        with np.errstate(over="ignore", under="ignore"):
            lam = np.exp(log_lam)
        if not (np.all(lam > 0) and np.all(np.isfinite(lam))):
            raise ValueError(
                f"rescale_to_delta: the scalings λ (log λ = {log_lam.tolist()}) are not "
                "representable in float64"
            )
    with np.errstate(over="ignore", under="ignore"):
        out = tuple(float(c) * w for c, w in zip(lam, ws, strict=True))
    lost = [i + 1 for i, x in enumerate(log_sq_norms(out)) if not math.isfinite(x)]
    if lost:
        raise ValueError(
            f"rescale_to_delta: layer {lost[0]} rescaled by λ = {float(lam[lost[0] - 1]):.6g} "
            "under- or overflows float64 (a zero or infinite filter would change μ)"
        )
    return out


def _norm(x: np.ndarray) -> float:
    """``‖x‖₂`` without overflow or underflow of the squares."""
    m = float(np.max(np.abs(x), initial=0.0))
    return m * float(np.linalg.norm(x / m)) if m > 0 else 0.0


def fiber_scale(v: Any, delta: Any, L: int) -> float:
    """``ρ = (‖v‖₂^{2/L} + ‖δ‖₂)^{1/2}``: the parameter scale of the fiber over ``(v, δ)``.

    ``μ`` is homogeneous of degree ``L`` and the invariants of degree 2: ``θ ↦ cθ`` maps the
    fiber over ``(v, δ)`` onto the fiber over ``(c^L v, c² δ)``, and ``ρ`` scales by ``c``. The
    fiber searches solve the problem at unit scale, ``(v / ρ^L, δ / ρ²)`` (then
    ``‖v/ρ^L‖^{2/L} + ‖δ/ρ²‖ = 1``), and map the points back by ``ρ``, so that their tolerances
    are relative and their verdicts do not depend on the scale of ``v``. ``δ`` may hold the FC
    matrices ``Δ_l`` (all entries count). Where ``v = 0`` and ``δ = 0`` exactly there is no scale
    and ``ρ = 1`` (the only fiber point is then ``θ = 0`` for an LCN).

    >>> fiber_scale([3.0, 4.0], [0.0], 2), fiber_scale([1e-12, 0.0, 0.0, 0.0], [0.0], 2)
    (2.23606797749979, 1e-06)
    """
    if not (isinstance(L, int) and L >= 1):
        raise ValueError(f"L = {L!r}: expected a positive int (the depth)")
    parts = delta if isinstance(delta, (list, tuple)) else [delta]
    dd = [np.ravel(np.asarray(x, dtype=np.float64)) for x in parts]
    p = _norm(np.ravel(np.asarray(v, dtype=np.float64))) ** (1.0 / L)
    q = math.sqrt(_norm(np.concatenate(dd) if dd else np.zeros(0)))
    if not (math.isfinite(p) and math.isfinite(q)):
        raise ValueError("v and delta must be finite")
    m = max(p, q)
    if m == 0.0:
        return 1.0
    return m * math.sqrt((p / m) ** 2 + (q / m) ** 2)


def _orthonormal_columns(n: int, r: int, rng: np.random.Generator | None) -> np.ndarray:
    if rng is None:
        return np.eye(n, r)
    q, rr = np.linalg.qr(rng.standard_normal((n, r)))
    return q * np.sign(np.diag(rr))


def fc_balanced_params(
    arch: FC, W: Any, *, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, ...]:
    """A balanced factorisation (all ``Δ_l = 0``) of ``W`` (shape ``(n_L, n_0)``) for ``arch``.

    With ``W = U Σ Vᵀ`` truncated to ``r = min(widths)`` and orthonormal ``O_l ∈ R^{n_l×r}``
    (``O_0 = V``, ``O_L = U``; the hidden ones random if ``rng`` is given, else ``I[:, :r]``):
    ``W_l = O_l Σ^{1/L} O_{l−1}ᵀ``. Requires ``rank W ≤ r`` (``ValueError`` otherwise), the rank
    counting ``s_i > RTOL_FC_RANK · s_1``, i.e. relative to ``‖W‖₂`` (``W = 0`` has rank 0).
    """
    if not isinstance(arch, FC):
        raise TypeError(f"arch = {arch!r}: expected an FC architecture")
    W = np.asarray(W, dtype=np.float64)
    if W.shape != arch.out_shape:
        raise ValueError(f"W has shape {W.shape}: expected {arch.out_shape} = (n_L, n_0)")
    r = arch.rank_bound
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    floor = RTOL_FC_RANK * s[0] if s.size else 0.0
    if np.any(s[r:] > floor):
        raise ValueError(
            f"W has rank {int(np.sum(s > floor))} > min(widths) = {r} (singular values above "
            f"RTOL_FC_RANK · ‖W‖₂ = {floor:.3g}): no factorisation through the hidden widths"
        )
    root = s[:r] ** (1.0 / arch.L)
    O = [Vt[:r].T]
    O += [_orthonormal_columns(n, r, rng) for n in arch.widths[1:-1]]
    O.append(U[:, :r])
    return tuple((O[l + 1] * root) @ O[l].T for l in range(arch.L))
