"""Structured Jacobian blocks, Gram blocks and NTK of an LCN; the FC NTK operator.

LCN (spec §2.3). With ``R_l = Π_{m≠l} w_m(z^{S_{m−1}})``, the Jacobian block ``J_l = ∂v/∂w_l``
is multiplication by ``R_l`` composed with dilation by ``S_{l−1}``:

``(J_l)_{i,p} = R_l[i − p ⊙ S_{l−1}]``  (``R_l`` is 0 outside its support),

so column ``p`` of ``J_l`` is ``R_l`` placed at offset ``p ⊙ S_{l−1}``. Rows index ``v``
flattened in C order, columns index ``w_l`` flattened in C order; ``J = [J_1 | … | J_L]`` has shape
``(n_v, n_params)``. All ``R_l`` come from prefix/suffix products (``O(L)`` polynomial products).
``G_l = J_l J_lᵀ`` and ``K = J Jᵀ = Σ_l G_l`` (shape ``(n_v, n_v)``); ``v̇ = −K ∇ℓ(v)`` under
gradient flow. :func:`ntk` forms ``K`` as one dense product ``J Jᵀ`` or, for large 1-D LCNs, by
running sums along its diagonals in compiled code (:mod:`neuromanifold.linear._compiled`); the
prefix recursion of :mod:`neuromanifold.linear._gram` gives the same matrix for 1-D LCNs with
about 3× fewer multiply-adds, but was not faster end to end here (small products, see that
module), so it is not used by :func:`ntk`.

FC (spec §2.3, §4.5). ``K(Z) = Σ_j A_j A_jᵀ Z B_jᵀ B_j`` with ``A_j = W_L⋯W_{j+1}``,
``B_j = W_{j−1}⋯W_1``. As a matrix it acts on ``vec(Z)``, the **C-order** (row-major) flattening
``Z.ravel()``, where ``vec(A Z B) = (A ⊗ Bᵀ) vec(Z)``; hence ``K = Σ_j (A_jA_jᵀ) ⊗ (B_jᵀB_j)``.

References: Achour, Kohn, Rauhut, arXiv:2507.06367; Bah, Rauhut, Terstiege, Westdickenberg,
Inf. Inference 2022 (balanced operator ``A_W``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import FC, LCN, _is_int, real_array, validate_params
from neuromanifold.linear.polynomial import mul_dilated

__all__ = [
    "complement_products",
    "fc_balanced_operator",
    "fc_jacobian",
    "fc_ntk",
    "fc_ntk_apply",
    "gram_blocks",
    "jacobian",
    "jacobian_blocks",
    "mu_and_jacobian",
    "ntk",
]


def _check_lcn(arch: Any) -> LCN:
    if not isinstance(arch, LCN):
        raise TypeError(f"arch = {arch!r}: expected an LCN (use the fc_* functions for FC)")
    return arch


def _forward(arch: LCN, th: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """``v`` and ``[R_l]_l`` from validated parameters, by prefix and compact suffix products.

    Prefix ``P_l = Π_{m<l} w_m(z^{S_{m−1}})``. Suffix ``Q_l = Π_{m>l} w_m(z^{S_{m−1}})`` is a
    polynomial in ``y = z^{S_l}`` (every ``S_{m−1}``, ``m > l``, is a multiple of ``S_l``), kept
    undilated as ``q_l(y)`` with ``q_l = w_{l+1} · q_{l+1}(y^{s_{l+1}})``. Then
    ``R_l = P_l · q_l(z^{S_l})`` by :func:`mul_dilated`: ``O(L)`` products, none over zeros.
    """
    L = arch.L
    dil = arch.dilations  # S_{l−1} for layer l
    after = [*dil[1:], arch.total_stride]  # S_l for layer l (only l < L is used)
    pre = [np.ones((1,) * arch.D)]
    for w, S in zip(th[:-1], dil[:-1], strict=True):
        pre.append(mul_dilated(pre[-1], w, S))
    v = mul_dilated(pre[-1], th[-1], dil[-1])
    q = [np.ones((1,) * arch.D)] * L
    for l in range(L - 2, -1, -1):  # q_l from w_{l+1} and q_{l+1}, ratio s_{l+1} = S_{l+1}/S_l
        ratio = tuple(b // a for a, b in zip(after[l], after[l + 1], strict=True))
        q[l] = mul_dilated(th[l + 1], q[l + 1], ratio)
    R = [mul_dilated(p, ql, S) for p, ql, S in zip(pre, q, after, strict=True)]
    return v, R


def _blocks(arch: LCN, R: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Place each ``R_l`` at offsets ``p ⊙ S_{l−1}``: the columns of ``J_l``."""
    out_shape = arch.out_shape
    blocks = []
    for Rl, fshape, S in zip(R, arch.filters, arch.dilations, strict=True):
        Jl = np.zeros((*out_shape, int(np.prod(fshape))))
        for col, p in enumerate(np.ndindex(*fshape)):
            idx = tuple(
                slice(pi * si, pi * si + r) for pi, si, r in zip(p, S, Rl.shape, strict=True)
            )
            Jl[(*idx, col)] = Rl
        blocks.append(Jl.reshape(arch.n_v, -1))
    return blocks


def complement_products(arch: LCN, theta: Sequence[Any]) -> list[np.ndarray]:
    """``R_l = Π_{m≠l} w_m(z^{S_{m−1}})`` for every layer (via prefix/suffix products)."""
    _check_lcn(arch)
    return _forward(arch, validate_params(arch, theta))[1]


def mu_and_jacobian(arch: LCN, theta: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(μ(θ), Jμ(θ))`` from one set of prefix/suffix products.

    ``v`` has shape ``arch.out_shape``, the Jacobian ``(n_v, n_params)``.
    """
    _check_lcn(arch)
    v, R = _forward(arch, validate_params(arch, theta))
    return v, np.hstack(_blocks(arch, R))


def jacobian_blocks(arch: LCN, theta: Sequence[Any]) -> list[np.ndarray]:
    """``[J_l]_l`` with ``J_l = ∂v/∂w_l`` of shape ``(n_v, k_l)`` (C-order flattening of v and w_l).

    >>> [b.tolist() for b in jacobian_blocks(LCN((2, 2), (1,)), [[1, 2], [1, -1]])]
    [[[1.0, 0.0], [-1.0, 1.0], [0.0, -1.0]], [[1.0, 0.0], [2.0, 1.0], [0.0, 2.0]]]
    """
    return _blocks(arch, complement_products(arch, theta))


def jacobian(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """``Jμ(θ) = [J_1 | … | J_L]``, shape ``(n_v, n_params)``."""
    return np.hstack(jacobian_blocks(arch, theta))


def gram_blocks(arch: LCN, theta: Sequence[Any]) -> list[np.ndarray]:
    """``[G_l]_l`` with ``G_l = J_l J_lᵀ``, each ``(n_v, n_v)``; their sum is the NTK."""
    return [J @ J.T for J in jacobian_blocks(arch, theta)]


NTK_METHODS = ("auto", "gemm", "diagonal")
"""``ntk``'s methods: the dense product ``J Jᵀ`` ("gemm"), the compiled running sums along
diagonals of :mod:`neuromanifold.linear._compiled` ("diagonal", 1-D only), or "auto"."""

DIAGONAL_MIN_NV = 256
"""``method="auto"`` takes the diagonal kernel from this many coefficients of ``v`` on ..."""

DIAGONAL_MIN_MEAN_TAPS = 4
"""... when the layers have at least this many taps on average (``Σ_l k_l ≥ 4 L``). The kernel
costs about ``2 L`` multiply-adds per entry of the upper triangle, ``J Jᵀ`` about ``Σ_l k_l`` per
entry at a higher rate: measured on one core (2026-12-02, L = 4–8, s = 1–3, n_v ≥ 256), the
kernel was 1.02–2.1× faster than ``J Jᵀ`` from 4 taps on (2.1× at L = 8, k = 16, s = 2) and
0.83–1.08× with 2–3 taps (`benchmarks/ntk_structured_vs_autograd.py`, column ``gemm s``)."""


def _use_diagonal(arch: LCN, method: str) -> bool:
    from neuromanifold.linear import _compiled

    if method not in NTK_METHODS:
        raise ValueError(f"method = {method!r}: expected one of {', '.join(NTK_METHODS)}")
    if method == "gemm":
        return False
    if method == "diagonal":
        if arch.D != 1:
            raise ValueError(
                f"method = 'diagonal' needs a 1-D LCN, got D = {arch.D}; use 'gemm' or 'auto'"
            )
        return True
    return (
        arch.D == 1
        and arch.n_v >= DIAGONAL_MIN_NV
        and sum(f[0] for f in arch.filters) >= DIAGONAL_MIN_MEAN_TAPS * arch.L
        and _compiled.available()
    )


def ntk(arch: LCN, theta: Sequence[Any], *, method: str = "auto") -> np.ndarray:
    """The NTK ``K_θ = Jμ Jμᵀ = Σ_l G_l``, shape ``(n_v, n_v)`` (v flattened in C order).

    ``method="gemm"`` forms the dense product ``J Jᵀ``; ``"diagonal"`` sums each ``G_l`` along
    its diagonals with the compiled kernel (1-D LCNs; `neuromanifold.linear._compiled`, threads:
    ``torch.get_num_threads()``). The kernel's diagonal ``K_ii`` is summed directly; an
    off-diagonal entry agrees with ``J Jᵀ`` to an *absolute* error of about
    ``n_v · eps · max|K|``, so entries that ``J Jᵀ`` gives as exactly 0 may be rounding noise of
    that size. ``"auto"`` (default) takes the kernel for large 1-D networks with many taps per
    layer (`DIAGONAL_MIN_NV`, `DIAGONAL_MIN_MEAN_TAPS`) when it was built and no running sum can
    overflow, else ``J Jᵀ``; ``"diagonal"`` raises ValueError where a sum could overflow. Every
    method raises ValueError when an entry of ``K`` overflows float64 (``θ`` must be finite), and
    when all of ``K`` underflows to 0 although at most one filter is zero (K = 0 needs two).

    Spec §4.3: ``θ = ((1, 2), (1, −1))``, stride 1.

    >>> ntk(LCN((2, 2), (1,)), [[1, 2], [1, -1]]).tolist()
    [[2.0, 1.0, 0.0], [1.0, 7.0, 1.0], [0.0, 1.0, 5.0]]
    """
    _check_lcn(arch)
    with np.errstate(over="ignore", invalid="ignore"):  # checked below, said as a ValueError
        K = _ntk(arch, theta, method)
    if not np.all(np.isfinite(K)):
        th = validate_params(arch, theta)
        big = max(float(np.max(np.abs(w))) for w in th)
        raise NTKOverflowError(
            "ntk: K = Jμ Jμᵀ is not representable in float64 (an entry overflows; largest "
            f"|coefficient| of θ {big:.3g}); rescale θ ↦ cθ with c < 1: K is homogeneous of "
            f"degree 2(L − 1) = {2 * (arch.L - 1)} in the scale of θ "
            "(neuromanifold.linear.rescale.fiber_scale), or balance the layer norms with "
            "rescale_to_delta (same μ, other δ)"
        )
    if not np.any(K) and arch.L >= 2:
        # J = 0 only where two filters are zero (each column of J is a product of the other
        # layers' filters, and a product of non-zero polynomials is non-zero): else underflow
        th = validate_params(arch, theta)
        if sum(not np.any(w) for w in th) < 2:
            small = max(float(np.max(np.abs(w))) for w in th)
            raise NTKUnderflowError(
                "ntk: K = Jμ Jμᵀ underflows float64 to 0 although at most one filter is zero "
                f"(largest |coefficient| of θ {small:.3g}); rescale θ ↦ cθ with c > 1: K is "
                f"homogeneous of degree 2(L − 1) = {2 * (arch.L - 1)} in the scale of θ "
                "(neuromanifold.linear.rescale.fiber_scale)"
            )
    return K


class NTKOverflowError(ValueError):
    """An entry of ``K = Jμ Jμᵀ`` overflows float64 (raised by :func:`ntk`)."""


class NTKUnderflowError(ValueError):
    """``K = Jμ Jμᵀ`` underflows float64 to 0 at a ``θ`` where it is not 0 (raised by
    :func:`ntk`; s25 trial LIN #4: it returned the zero matrix, which the closed form and the
    command line refuse)."""


def ntk_at_fiber_point(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """:func:`ntk` at a point the caller found on the fiber over a given ``(v, δ)``: an overflow
    or underflow is said in terms of ``(v, δ)``, which the caller gave, rather than of ``θ``,
    which it did not. ``θ ↦ cθ`` maps the fiber over ``(v, δ)`` onto the fiber over
    ``(c^L v, c² δ)`` and ``K`` by ``c^{2(L−1)}``."""
    try:
        return ntk(arch, theta)
    except (NTKOverflowError, NTKUnderflowError) as err:
        over = isinstance(err, NTKOverflowError)
        what = "an entry of K overflows" if over else "K underflows to 0"
        L = arch.L
        raise ValueError(
            f"the NTK over this (v, δ) is not representable in float64: {what} at the fiber "
            f"points found (largest |coefficient| of θ "
            f"{max(float(np.max(np.abs(w))) for w in validate_params(arch, theta)):.3g}); "
            f"(v, δ) ↦ (c^{L} v, c² δ) scales K by c^{2 * (L - 1)}, so read the fiber of a "
            f"{'smaller' if over else 'larger'} (v, δ) (neuromanifold.linear.rescale.fiber_scale "
            "gives its scale)"
        ) from err


def _ntk(arch: LCN, theta: Sequence[Any], method: str) -> np.ndarray:
    """:func:`ntk` before its check that ``K`` is finite."""
    if _use_diagonal(arch, method):
        import torch

        from neuromanifold.linear._compiled import fits_running_sums, lcn_ntk_1d

        R = complement_products(arch, theta)
        d = [S[0] for S in arch.dilations]
        k = [f[0] for f in arch.filters]
        if method == "diagonal" or fits_running_sums(R, k):
            return lcn_ntk_1d(R, d, k, arch.n_v, threads=torch.get_num_threads())
        J = np.hstack(_blocks(arch, R))  # near DBL_MAX the running sums could overflow
        return J @ J.T
    J = jacobian(arch, theta)
    return J @ J.T


def _fc_prefixes(arch: FC, Ws: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``A_j = W_L⋯W_{j+1}`` and ``B_j = W_{j−1}⋯W_1`` for ``j = 1..L`` (empty product = I)."""
    if not isinstance(arch, FC):
        raise TypeError(f"arch = {arch!r}: expected an FC architecture")
    mats = validate_params(arch, Ws)
    L = arch.L
    B = [np.eye(arch.widths[0])]
    for j in range(L - 1):
        B.append(mats[j] @ B[-1])
    A = [np.eye(arch.widths[-1])]
    for j in range(L - 1, 0, -1):
        A.append(A[-1] @ mats[j])
    A.reverse()
    return A, B


def fc_jacobian(arch: FC, Ws: Sequence[Any]) -> np.ndarray:
    """Jacobian of C-order ``vec(W_L⋯W_1)`` w.r.t. ``(vec W_1, …, vec W_L)``: ``[A_j ⊗ B_jᵀ]_j``."""
    A, B = _fc_prefixes(arch, Ws)
    return np.hstack([np.kron(a, b.T) for a, b in zip(A, B, strict=True)])


def fc_ntk(arch: FC, Ws: Sequence[Any]) -> np.ndarray:
    """FC NTK as a matrix on C-order ``vec(Z)``: ``Σ_j (A_jA_jᵀ) ⊗ (B_jᵀB_j)``.

    Shape ``(n_L n_0, n_L n_0)``.

    An entry that is not representable in float64 raises :class:`NTKOverflowError`, as
    :func:`ntk` does (s30 trial LINFLOW #3: weights of 1e200 gave a matrix of inf and NaN).

    >>> fc_ntk(FC((1, 1, 1)), [[[2.0]], [[3.0]]]).tolist()
    [[13.0]]
    """
    with np.errstate(over="ignore", invalid="ignore"):  # checked below, said as a ValueError
        A, B = _fc_prefixes(arch, Ws)
        K = sum(np.kron(a @ a.T, b.T @ b) for a, b in zip(A, B, strict=True))
    if not np.all(np.isfinite(K)):
        big = max(float(np.max(np.abs(np.asarray(W, dtype=np.float64)))) for W in Ws)
        raise NTKOverflowError(
            "fc_ntk: K is not representable in float64 (an entry overflows; largest |entry| of "
            f"the weights {big:.3g}); rescale the weights W ↦ cW with c < 1: K is homogeneous "
            f"of degree 2(L − 1) = {2 * (len(Ws) - 1)} in their scale"
        )
    return K


def fc_ntk_apply(arch: FC, Ws: Sequence[Any], Z: Any) -> np.ndarray:
    """``K(Z) = Σ_j A_j A_jᵀ Z B_jᵀ B_j`` for ``Z`` of shape ``(n_L, n_0)`` (matrix-free)."""
    A, B = _fc_prefixes(arch, Ws)
    Z = real_array(Z, "Z")
    if Z.shape != arch.out_shape:
        raise ValueError(f"Z has shape {Z.shape}: expected {arch.out_shape} = (n_L, n_0)")
    if not np.all(np.isfinite(Z)):
        raise ValueError("Z must be finite (it holds NaN or inf)")
    return sum(a @ (a.T @ Z @ b.T) @ b for a, b in zip(A, B, strict=True))


_NULL_RTOL = 64 * np.finfo(float).eps


def _psd_power(S: np.ndarray, p: float) -> np.ndarray:
    """``S^p`` for symmetric PSD ``S``; ``S^0 = I``.

    Eigenvalues below ``64 ε λ_max`` are round-off of exact zeros (``WWᵀ`` of a rank-deficient
    ``W``) and are set to 0 before the power: a fractional power would amplify them
    (``(1e-16)^{1/3} ≈ 5e-6``).
    """
    lam, U = np.linalg.eigh(S)
    lam = np.where(lam > _NULL_RTOL * max(float(lam[-1]), 0.0), lam, 0.0)
    return (U * lam**p) @ U.T


def fc_balanced_operator(W: Any, Z: Any, *, depth: int) -> np.ndarray:
    """``A_W(Z) = Σ_{j=1}^{L} (WWᵀ)^{(L−j)/L} Z (WᵀW)^{(j−1)/L}`` (balanced FC metric operator).

    Under a balanced initialisation (all ``Δ_l = 0``) the FC flow obeys ``Ẇ = −A_W(∇ℓ(W))``.

    >>> round(float(fc_balanced_operator(np.array([[8.0]]), np.array([[1.0]]), depth=3)[0, 0]), 12)
    48.0
    """
    W = np.asarray(W, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64)
    if W.ndim != 2 or Z.shape != W.shape:
        raise ValueError(f"W {W.shape} and Z {Z.shape}: expected two matrices of equal shape")
    if not (_is_int(depth) and depth >= 1):
        raise ValueError(f"depth = {depth!r}: expected a positive int L")
    L = int(depth)
    left, right = W @ W.T, W.T @ W
    return sum(
        _psd_power(left, (L - j) / L) @ Z @ _psd_power(right, (j - 1) / L) for j in range(1, L + 1)
    )
