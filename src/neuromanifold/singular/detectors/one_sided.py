"""One-sided A modes (``kfac-A``): A-kernel directions that no upstream dead unit explains.

`one_sided_a` (fast, through the kernel's complement) and its oracle `one_sided_a_reference` (QR
of the upstream taps, SVD of the projected kernel basis) return the same canonical vectors,
including inside degenerate clusters (seeded probes projected and orthonormalised).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.link import BlockSpectrum, tap_span

__all__ = ["CLUSTER_TOL", "MAX_ONE_SIDED", "one_sided_a", "one_sided_a_reference"]

MAX_ONE_SIDED = 2
CLUSTER_TOL = 1e-8
"""Singular values within this of the largest form one (degenerate) cluster in `one_sided_a`."""
PROBE_SEED = 0


def _ker_ratios(spec: BlockSpectrum) -> list[float]:
    a_max = float(spec.alpha[-1])
    vals = spec.alpha[spec.ker_a].clamp_min(0.0)
    return (vals / a_max).tolist() if a_max > 0 else [0.0] * len(spec.ker_a)


def _probes(d: int, like: Tensor) -> Tensor:
    gen = torch.Generator(device=like.device).manual_seed(PROBE_SEED)
    return torch.randn(d, MAX_ONE_SIDED, generator=gen, dtype=like.dtype, device=like.device)


def _cluster_vectors(project, probes: Tensor, dim: int) -> list[Tensor]:
    """Canonical orthonormal vectors of a degenerate cluster: projected probes, Gram–Schmidt."""
    out: list[Tensor] = []
    for i in range(min(dim, probes.shape[1])):
        v = project(probes[:, i])
        for w in out:
            v = v - (w @ v) * w
        out.append(v / v.norm())
    return [_sign_fixed(v) for v in out]


def _sign_fixed(v: Tensor) -> Tensor:
    from neuromanifold.singular.factor_spectrum import _sign_fix

    return _sign_fix(v.unsqueeze(1))[:, 0]


def one_sided_a(
    spec: BlockSpectrum, module: nn.Module, upstream: list[Tensor]
) -> list[tuple[Tensor, float]]:
    """A-kernel directions outside the span of the upstream dead units' taps (``kfac-A``).

    Without upstream units: the first ``MAX_ONE_SIDED`` kernel eigenvectors with their ratios.
    With them: the leading left singular vectors (singular value ``> 0.5``) of
    ``rest = (I − SSᵀ) K``, ``K`` the kernel basis and ``S`` the (orthonormal) tap span, each with
    the largest kernel ratio. Computed without ``K``: ``rest restᵀ = P − WWᵀ`` with
    ``P = I − SSᵀ``, ``W = P L`` (``L`` the complement of ``K``), so the singular values are
    ``√(1 − σ_i(W)²)`` on ``W``'s left singular vectors and 1 on ``(S + L)^⊥``; cost
    ``O(d · |S| · |L|)``. The top cluster (singular values within `CLUSTER_TOL` of 1) is
    degenerate whenever the kernel is wide; its vectors are the seeded probes projected onto it
    and orthonormalised (`_cluster_vectors`), exactly as in `one_sided_a_reference`.
    """
    if not spec.ker_a:
        return []
    ratios = _ker_ratios(spec)
    if not upstream:
        return [(spec.a_vecs[:, i], ratios[n]) for n, i in enumerate(spec.ker_a[:MAX_ONE_SIDED])]
    top = max(ratios)
    span = tap_span(module, torch.stack(upstream, 1))  # all units at once: kron(G, I_taps)
    live = spec.live_a_basis()
    d = span.shape[0]
    w = live - span @ (span.T @ live)
    uw, sw, _ = torch.linalg.svd(w, full_matrices=False)
    nz = sw > sw.max() * 1e-12 if sw.numel() else sw > 0
    n_one = d - span.shape[1] - int(nz.sum())  # dimension of (S + L)^⊥
    sv = (1.0 - sw.pow(2)).clamp_min(0.0).sqrt()  # descending σ → ascending sv
    in_cluster = nz & (sv >= 1.0 - CLUSTER_TOL)
    u_nz, u_c = uw[:, nz], uw[:, in_cluster]

    def project(x: Tensor) -> Tensor:
        x = x - span @ (span.T @ x) - u_nz @ (u_nz.T @ x)
        return x + u_c @ (u_c.T @ x)

    dim = n_one + int(in_cluster.sum())
    vecs = _cluster_vectors(project, _probes(d, live), dim)
    order = [i for i in reversed(range(sw.numel())) if nz[i] and not in_cluster[i]]
    for i in order:  # ascending σ(W) = descending singular value of rest
        if len(vecs) >= MAX_ONE_SIDED or float(sv[i]) <= 0.5:
            break
        vecs.append(_sign_fixed(uw[:, i]))
    return [(v, top) for v in vecs[:MAX_ONE_SIDED]]


def one_sided_a_reference(
    spec: BlockSpectrum, module: nn.Module, upstream: list[Tensor]
) -> list[tuple[Tensor, float]]:
    """Brute-force oracle of `one_sided_a`: QR of the tap span and the SVD of ``rest``.

    The top cluster (singular values within `CLUSTER_TOL` of 1: directions of the kernel
    orthogonal to every upstream tap, degenerate whenever the kernel is wide) gets the same
    canonical vectors as the fast path; below it the singular vectors are distinct and returned
    sign-fixed.
    """
    if not spec.ker_a:
        return []
    ratios = _ker_ratios(spec)
    basis = spec.ker_a_basis()
    if not upstream:
        return [(basis[:, i], ratios[i]) for i in range(min(MAX_ONE_SIDED, basis.shape[1]))]
    span = torch.cat([tap_span(module, g) for g in upstream], 1)
    q, _ = torch.linalg.qr(span)
    rest = basis - q @ (q.T @ basis)
    left, sv, _ = torch.linalg.svd(rest, full_matrices=False)
    keep = sv > 0.5  # mostly outside the explained span
    n_keep = int(keep.sum())
    in_cluster = keep & (sv >= 1.0 - CLUSTER_TOL)
    n_c = int(in_cluster.sum())
    l_c = left[:, :n_c]
    vecs = _cluster_vectors(lambda x: l_c @ (l_c.T @ x), _probes(rest.shape[0], rest), n_c)
    vecs += [_sign_fixed(left[:, i]) for i in range(n_c, n_keep)]
    return [(v, max(ratios)) for v in vecs[:MAX_ONE_SIDED]]
