"""Brute-force torch oracles for the structured numpy paths (tests and benchmarks only).

* :func:`apply_network` / :func:`mu_reference` compose the layers literally as valid strided
  cross-correlations (``torch.nn.functional.conv{1,2,3}d``, no kernel flip) and read ``v`` off
  the composed map by feeding it the unit basis of an input of shape ``arch.out_shape``.
* :func:`mu_torch` is a differentiable float64 torch product of dilated polynomials; the Jacobian
  and NTK references differentiate it with ``torch.func.jacrev``.
* :func:`fc_ntk_reference` differentiates ``W_L⋯W_1`` with ``jacrev``.

Only ``D ≤ 3`` is supported here (torch has no ``conv4d``); ``D ≥ 4`` raises
``NotImplementedError``. The structured paths support every ``D``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from neuromanifold.linear.architecture import FC, LCN, validate_params

__all__ = [
    "apply_network",
    "fc_jacobian_reference",
    "fc_ntk_reference",
    "jacobian_reference",
    "mu_reference",
    "mu_torch",
    "ntk_reference",
]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _conv(D: int):
    if D not in _CONV:
        raise NotImplementedError(f"torch references support D ≤ 3 only, got D = {D}")
    return _CONV[D]


def apply_network(arch: LCN, theta: Sequence[Any], x: Any) -> np.ndarray:
    """Run the LCN literally: ``x`` of shape ``(batch, *signal)`` through every layer.

    Layer ``l`` computes ``(α_{w,s} x)_i = Σ_j w_j x_{i·s + j}`` (valid cross-correlation, per
    axis). Returns the output of the last layer, shape ``(batch, *out)``.
    """
    th = validate_params(arch, theta)
    conv = _conv(arch.D)
    xt = torch.as_tensor(np.asarray(x, dtype=np.float64))
    if xt.ndim != arch.D + 1:
        raise ValueError(
            f"x has shape {tuple(xt.shape)}: expected (batch, *signal) with {arch.D} signal axes"
        )
    h = xt.unsqueeze(1)
    for w, s in zip(th, arch.strides, strict=True):
        h = conv(h, torch.as_tensor(w).reshape(1, 1, *w.shape), stride=s)
    return h.squeeze(1).numpy()


def mu_reference(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """``v`` read from the literally composed network: ``v_j`` = output on the basis input ``e_j``.

    With an input of shape ``arch.out_shape`` the composed (stride ``S_L``) map has exactly one
    output, ``Σ_j v_j x_j``; feeding the unit basis returns ``v`` entry by entry.
    """
    n = arch.n_v
    basis = np.eye(n).reshape(n, *arch.out_shape)
    out = apply_network(arch, theta, basis)
    return out.reshape(n).reshape(arch.out_shape)


def mu_torch(arch: LCN, ws: Sequence[torch.Tensor]) -> torch.Tensor:
    """Differentiable ``μ``: ``v = Π_l w_l(z^{S_{l−1}})`` by torch full convolutions.

    Multiplying ``a`` by ``w(z^S)`` is a cross-correlation of the zero-padded ``a`` with the
    flipped ``w`` at dilation ``S``.
    """
    conv = _conv(arch.D)
    v = ws[0].reshape(1, 1, *ws[0].shape)
    for w, S in zip(ws[1:], arch.dilations[1:], strict=True):
        pad = tuple((k - 1) * s for k, s in zip(w.shape, S, strict=True))
        kernel = torch.flip(w, dims=tuple(range(w.ndim))).reshape(1, 1, *w.shape)
        v = conv(v, kernel, padding=pad, dilation=S)
    return v.reshape(v.shape[2:])


def _jacrev_blocks(arch: LCN, theta: Sequence[Any]) -> list[np.ndarray]:
    th = validate_params(arch, theta)
    ws = tuple(torch.as_tensor(w) for w in th)
    jac = torch.func.jacrev(lambda *a: mu_torch(arch, a), argnums=tuple(range(arch.L)))(*ws)
    return [j.reshape(arch.n_v, k).numpy() for j, k in zip(jac, arch.layer_sizes, strict=True)]


def jacobian_reference(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """Dense ``Jμ(θ)``, shape ``(n_v, n_params)``, by ``torch.func.jacrev`` (C-order flattening)."""
    return np.hstack(_jacrev_blocks(arch, theta))


def ntk_reference(arch: LCN, theta: Sequence[Any]) -> np.ndarray:
    """``K = Jμ Jμᵀ`` with the ``jacrev`` Jacobian, shape ``(n_v, n_v)``."""
    J = torch.as_tensor(jacobian_reference(arch, theta))
    return (J @ J.T).numpy()


def fc_jacobian_reference(arch: FC, Ws: Sequence[Any]) -> np.ndarray:
    """Jacobian of C-order ``vec(W_L⋯W_1)`` w.r.t. ``(vec W_1, …, vec W_L)`` by ``jacrev``."""
    mats = tuple(torch.as_tensor(W) for W in validate_params(arch, Ws))

    def prod(*a: torch.Tensor) -> torch.Tensor:
        W = a[0]
        for M in a[1:]:
            W = M @ W
        return W

    jac = torch.func.jacrev(prod, argnums=tuple(range(arch.L)))(*mats)
    n = arch.out_shape[0] * arch.out_shape[1]
    return np.hstack([j.reshape(n, k).numpy() for j, k in zip(jac, arch.layer_sizes, strict=True)])


def fc_ntk_reference(arch: FC, Ws: Sequence[Any]) -> np.ndarray:
    """FC NTK as a matrix on C-order ``vec(Z)``: ``J Jᵀ`` with the ``jacrev`` Jacobian."""
    J = fc_jacobian_reference(arch, Ws)
    return J @ J.T
