"""The near-kernel rule: which eigenvalues of a K-FAC factor count as zero.

Eigenvalues with ``λ_i/λ_max < τ`` are kept only if a spectral gap of at least ``GAP`` (one
decade) separates the largest kept ratio from the smallest rejected one; without such a gap the
kept set shrinks from the top until one appears (possibly to nothing). A factor that vanishes
identically has every direction in its kernel. Spec: ``dead_directions.md`` §6.1 (detector
thresholds are this project's choice; see `neuromanifold.singular.detectors.linear`).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

__all__ = ["GAP", "below_tau_not_kept", "near_kernel", "near_kernel_reference"]

GAP = 10.0


def near_kernel(evals: Tensor, tau: float, *, gap: float = GAP) -> list[int]:
    """Indices (ascending eigenvalues) of the near-kernel: ratio ``< tau`` with a ``gap`` margin.

    Same selection as `near_kernel_reference`, in ``O(n log n)``: with the ratios sorted stably
    (``s_0 ≤ s_1 ≤ …``), the kept set is always a prefix of the sort order, so the smallest
    rejected ratio is ``s_m`` for a prefix of length ``m``; the prefix shrinks from the count
    below ``tau`` until ``s_{m-1} = 0`` or ``s_m ≥ gap · s_{m-1}``. Non-finite input falls back
    to the reference (its order of NaNs is Python's).

    >>> import torch
    >>> near_kernel(torch.tensor([0.0, 1e-9, 0.5, 1.0]), 1e-3)
    [0, 1]
    >>> near_kernel(torch.tensor([1e-5, 5e-5, 1.0]), 1e-3)  # both below τ, a decade before 1.0
    [0, 1]
    >>> near_kernel(torch.tensor([1e-5, 5e-4, 1e-3, 1.0]), 1e-3)  # 5e-4 → 1e-3 is no gap
    [0]
    >>> near_kernel(torch.zeros(2), 1e-3)  # a vanishing factor (e.g. G above a dead layer)
    [0, 1]
    """
    ev = evals.detach().double().clamp_min(0.0).reshape(-1).cpu().numpy()
    if not np.isfinite(ev).all():
        return near_kernel_reference(evals, tau, gap=gap)
    top = float(ev.max())
    if top <= 0.0:  # a factor that vanishes identically: every direction is in its kernel
        return list(range(ev.size))
    ratios = ev / top
    order = np.argsort(ratios, kind="stable")
    s = ratios[order]
    m = int(np.searchsorted(s, tau, side="left"))  # count of ratios < tau
    if m == 0:
        return []
    largest = s[:m]
    nxt = np.append(s[1:m], s[m] if m < s.size else np.inf)
    ok = (largest == 0.0) | (nxt >= gap * largest)
    hits = np.flatnonzero(ok)
    if hits.size == 0:
        return []
    return order[: int(hits[-1]) + 1].tolist()


def near_kernel_reference(evals: Tensor, tau: float, *, gap: float = GAP) -> list[int]:
    """Brute-force oracle of `near_kernel`: shrink the kept list one index at a time.

    >>> import torch
    >>> near_kernel_reference(torch.tensor([1e-5, 5e-4, 1e-3, 1.0]), 1e-3)
    [0]
    """
    ev = evals.double().clamp_min(0.0)
    top = float(ev.max())
    if top <= 0.0:
        return list(range(ev.numel()))
    ratios = (ev / top).tolist()
    order = sorted(range(len(ratios)), key=lambda i: ratios[i])
    kept = [i for i in order if ratios[i] < tau]
    while kept:
        largest = ratios[kept[-1]]
        rest = [ratios[i] for i in order if i not in kept]
        nxt = min(rest) if rest else float("inf")
        if largest == 0.0 or nxt >= gap * largest:
            return kept
        kept = kept[:-1]
    return []


def below_tau_not_kept(evals: Tensor, tau: float, kept: list[int]) -> tuple[int, float]:
    """``(n, smallest)``: how many ratios ``λ_i/λ_max < tau`` the near-kernel rule did not keep
    (``kept``: its indices), and the smallest of those ratios (``nan`` when ``n = 0``).

    These are eigenvalues below the threshold without the ``GAP`` margin: a smooth decay of a
    trained factor's spectrum to 1e-10 proposes nothing, which the read reports (its ``note``).

    >>> import torch
    >>> ev = torch.tensor([3.0**i * 1e-6 for i in range(8)] + [1.0], dtype=torch.float64)
    >>> # ratios 1e-6, 3e-6, … 2.2e-3 (steps of 3×, no decade gap), then 1
    >>> near_kernel(ev, 1e-3), below_tau_not_kept(ev, 1e-3, near_kernel(ev, 1e-3))
    ([], (7, 1e-06))
    """
    ev = evals.detach().double().clamp_min(0.0).reshape(-1).cpu()
    top = float(ev.max()) if ev.numel() else 0.0
    if top <= 0.0:
        return 0, float("nan")
    ratios = ev / top
    kept_set = set(kept)  # built once (a set per element was quadratic, s17 audit AG #5)
    below = [i for i in (ratios < tau).nonzero().flatten().tolist() if i not in kept_set]
    if not below:
        return 0, float("nan")
    return len(below), float(ratios[below].min())
