"""Dense NTK of a 1-D LCN by the prefix recursion, each ``K_l`` written once in polyphase blocks.

Let ``v_l = Π_{m≤l} w_m(z^{S_{m−1}})`` (length ``n_l``) and ``K_l`` the NTK of the first ``l``
layers. By the chain rule ``∂v_l/∂w_m = T_l ∂v_{l−1}/∂w_m`` for ``m < l`` and
``∂v_l/∂w_l[p] = z^{p s} v_{l−1}``, with ``s = S_{l−1}`` and ``T_l`` (``n_l × n_{l−1}``) the
multiplication by ``w_l(z^s)``. Hence ``K_1 = I_{k_1}`` and

``K_l = T_l K_{l−1} T_lᵀ + U_l U_lᵀ``,  ``U_l[:, p] = z^{p s} v_{l−1}``  (``n_l × k_l``).

Polyphase coordinates ``i = r s + a`` (``0 ≤ a < s``) make every factor small: ``T_l`` acts on
the block index only, ``(T_l X)[(r, a)] = Σ_q T_c[r, q] X[(q, a)]`` with the ``Q_n × Q_m``
Toeplitz matrix ``T_c[r, q] = w_l[r − q]`` (``Q = ⌈n/s⌉ ≤ Σ_l k_l``), and
``U_l[(r, a), p] = V[r − p, a]`` with ``V[q, a] = v_{l−1}[q s + a]``. So for each residue ``a``

``K_l[a::s, :] = [T_c | H_a] @ [Z_a ; U_lᵀ]``,  ``Z_a = K_{l−1}[a::s, :] T_lᵀ``,

with ``H_a[r, p] = V[r − p, a]``; ``Z_a`` is ``T_c`` applied to the column blocks of
``K_{l−1}[a::s, :]``. Work per entry of ``K_l``: ``Q_m + k_l`` multiply-adds (plus ``Q_m`` per
entry of ``Z_a``), against ``Σ_l k_l`` for the dense ``J Jᵀ``; the per-residue operands stay in
cache and ``K_l`` is written once. Intermediate ``K_l`` are zero-padded to a multiple of the next
dilation ``S_l``.

The products are done by ``torch.matmul`` on zero-copy views of the numpy buffers (float64).

Measured (``benchmarks/ntk_structured_vs_autograd.py``, one thread, L = 8, k = 16, s = 2,
``n_v = 3826``): about 3× fewer multiply-adds than ``J Jᵀ`` (``Q_m + k_L = 31`` per entry against
``Σ k_l = 128``), but only about 10–30 % less CPU time (it varies between runs), because the
``s = 128`` small products per step run far below BLAS peak and both paths pay the same ~20 ms
of page faults for the fresh 117 MB ``K``. With several torch threads the many small products
are much slower than the single BLAS call. Hence :func:`neuromanifold.linear.ntk` keeps the dense
product; this is an exact alternative, tested against it and against ``jacrev``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neuromanifold.linear.architecture import LCN
from neuromanifold.linear.polynomial import mul_dilated

__all__ = ["ntk_recursive_1d"]

_CHUNK_BYTES = 2**21  # per batch of residues: operands + output rows kept under ~2 MiB


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def _step(K: np.ndarray, v: np.ndarray, w: np.ndarray, s: int, nout: int) -> np.ndarray:
    """``T K Tᵀ + U Uᵀ`` of shape ``(nout, nout)`` from the padded ``K`` (``P × P``, ``s | P``)."""
    import torch

    P, m, k = K.shape[0], v.size, w.size
    Qm, Qn = P // s, -(-nout // s)
    npad = Qn * s
    Lm = np.zeros((s, Qn, Qm + k))  # [T_c | H_a] for every residue a
    V = np.zeros(Qm * s)
    V[:m] = v
    V = V.reshape(Qm, s)
    q = np.arange(Qm)
    for p in range(k):
        Lm[:, q + p, q] = w[p]
        Lm[:, q + p, Qm + p] = V.T
    per_res = 8 * ((Qm + k) * npad + Qn * nout + Qm * P)
    c = max(1, min(s, _CHUNK_BYTES // per_res))
    R = np.zeros((c, Qm + k, npad))  # [Z_a ; U_lᵀ] for a batch of residues
    for p in range(k):
        R[:, Qm + p, p * s : p * s + m] = v
    Y = np.empty((nout, nout))
    full, rem = divmod(nout, s)  # residues a < rem own one more row (block row `full`)
    tLm, tR, tY = torch.from_numpy(Lm), torch.from_numpy(R), torch.from_numpy(Y)
    tTc = tLm[0, :, :Qm]
    tK3 = torch.from_numpy(K).view(Qm, s, Qm, s)
    if c == 1:  # one residue at a time: its rows Y[a::s] in one product
        Rz, rhs = tR[0, :Qm].view(Qm, Qn, s), tR[0, :, :nout]
        for a in range(s):
            torch.matmul(tTc, tK3[:, a], out=Rz)
            rows = tY[a::s]
            torch.mm(tLm[a, : rows.shape[0]], rhs, out=rows)
        return Y
    tYv = tY[: full * s].view(full, s, nout).transpose(0, 1)  # (s, full, nout): rows a::s
    for a0 in range(0, s, c):
        a1 = min(s, a0 + c)
        b = a1 - a0
        torch.matmul(tTc, tK3[:, a0:a1].transpose(0, 1), out=tR[:b, :Qm].view(b, Qm, Qn, s))
        rhs = tR[:b, :, :nout]
        if full:
            torch.matmul(tLm[a0:a1, :full], rhs, out=tYv[a0:a1])
        if a0 < rem:
            e = min(a1, rem)
            last = tY[full * s + a0 : full * s + e].unsqueeze(1)
            torch.matmul(tLm[a0:e, full : full + 1], rhs[: e - a0], out=last)
    return Y


def ntk_recursive_1d(arch: LCN, th: Sequence[np.ndarray]) -> np.ndarray:
    """``K = Jμ Jμᵀ`` (``n_v × n_v``) of a 1-D LCN by the prefix recursion (module docstring).

    ``th`` are validated parameters. Equals :func:`neuromanifold.linear.ntk` up to round-off.

    >>> ntk_recursive_1d(LCN((2, 2), (1,)), [np.array([1.0, 2.0]), np.array([1.0, -1.0])]).tolist()
    [[2.0, 1.0, 0.0], [1.0, 7.0, 1.0], [0.0, 1.0, 5.0]]
    """
    if arch.D != 1:
        raise ValueError(f"arch.dim = {arch.D}: the recursive NTK is for 1-D LCNs only")
    ws = [np.asarray(w, dtype=np.float64).ravel() for w in th]
    S = [d[0] for d in arch.dilations]
    L, n = len(ws), ws[0].size
    if L == 1:
        return np.eye(n)
    P = _ceil_to(n, S[1])
    K = np.zeros((P, P))
    K[np.arange(n), np.arange(n)] = 1.0
    v = ws[0]
    for l in range(1, L):
        w, s = ws[l], S[l]
        n = v.size + (w.size - 1) * s
        nout = n if l == L - 1 else _ceil_to(n, S[l + 1])
        K = _step(K, v, w, s, nout)
        v = mul_dilated(v, w, (s,))
    return K
