"""Conserved quantities of gradient flow: ``δ`` (LCN) and ``Δ`` (FC).

LCN (spec §2.2): ``δ_l = ‖w_{l+1}‖² − ‖w_l‖²``, ``l = 1..L−1`` (later minus earlier). By
multilinearity of ``μ``, ``⟨w_l, ∇_{w_l} L⟩ = ⟨v, ∇ℓ(v)⟩`` for every layer, so every
``‖w_l‖²`` moves at the same rate under gradient flow; this holds for every stride and every ``D``.

FC: ``Δ_l = W_{l+1}ᵀ W_{l+1} − W_l W_lᵀ ∈ R^{n_l×n_l}``; balanced means all ``Δ_l = 0``.

References: Kohn, Merkh, Montúfar, Trager, SIAGA 2022 (LCN); Arora, Cohen, Hazan, ICML 2018 (FC).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from neuromanifold.linear.architecture import real_array

__all__ = ["delta", "fc_delta", "sq_norms"]


def _as_arrays(theta: Sequence[Any], name: str) -> list[np.ndarray]:
    if isinstance(theta, np.ndarray) or not isinstance(theta, Sequence) or len(theta) == 0:
        raise TypeError(f"{name}: expected a non-empty sequence of per-layer arrays")
    out = [real_array(w, f"{name}[{i}]") for i, w in enumerate(theta)]
    for i, w in enumerate(out):
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{name}[{i}]: entries must be finite")
    return out


def sq_norms(theta: Sequence[Any]) -> np.ndarray:
    """``(‖w_1‖², …, ‖w_L‖²)`` (Frobenius norms for arrays of any shape), shape ``(L,)``."""
    return np.array([float(np.sum(w * w)) for w in _as_arrays(theta, "theta")])


def delta(theta: Sequence[Any]) -> np.ndarray:
    """``δ_l = ‖w_{l+1}‖² − ‖w_l‖²`` for ``l = 1..L−1``, shape ``(L − 1,)``.

    Plain float64 arithmetic: a layer norm beyond about ``1e154`` makes ``δ`` overflow to ``±inf``,
    and to NaN where both norms of a difference overflow (``inf − inf``; numpy warns). The Lemma and
    the closed-form NTK do not need ``δ(θ)``: they work from the logs of the norms
    (`neuromanifold.linear.rescale.log_sq_norms`).

    >>> delta([[1.0, 2.0], [1.0, -1.0]]).tolist()
    [-3.0]
    """
    return np.diff(sq_norms(theta))


def fc_delta(Ws: Sequence[Any]) -> list[np.ndarray]:
    """``Δ_l = W_{l+1}ᵀ W_{l+1} − W_l W_lᵀ`` for ``l = 1..L−1``, each ``(n_l, n_l)``.

    >>> [d.tolist() for d in fc_delta([np.diag([2.0, 1.0]), np.diag([0.5, 1.0])])]
    [[[-3.75, 0.0], [0.0, 0.0]]]
    """
    mats = _as_arrays(Ws, "Ws")
    for i, W in enumerate(mats):
        if W.ndim != 2:
            raise ValueError(f"Ws[{i}] has shape {W.shape}: expected a matrix")
    for i in range(len(mats) - 1):
        if mats[i + 1].shape[1] != mats[i].shape[0]:
            raise ValueError(
                f"Ws[{i + 1}] has shape {mats[i + 1].shape}: expected {mats[i].shape[0]} columns "
                f"to match Ws[{i}] of shape {mats[i].shape}"
            )
    return [mats[i + 1].T @ mats[i + 1] - mats[i] @ mats[i].T for i in range(len(mats) - 1)]
