"""One-sided A modes (``kfac-A``): A-kernel directions that no upstream dead unit explains.

`one_sided_a_modes` (fast, through the kernel's complement) and its oracle
`one_sided_a_modes_reference` (QR of the upstream taps, SVD of the projected kernel basis) return
the same canonical vectors, including inside degenerate clusters (seeded probes projected and
orthonormalised). Both keep at most ``max_modes`` vectors (default `MAX_ONE_SIDED`) and also
return how many qualified before that cap, so the detector can record a truncation
(`neuromanifold.singular.detectors.linear`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.bias_link import compensate
from neuromanifold.singular.detectors.link import BlockSpectrum, tap_span

__all__ = [
    "CLUSTER_TOL",
    "MAX_ONE_SIDED",
    "check_cap",
    "explained_span",
    "one_sided_a_modes",
    "one_sided_a_modes_reference",
]

MAX_ONE_SIDED = 2
"""Default cap on the one-sided modes proposed per side of one block (``kfac-A``, ``kfac-G``)."""
CLUSTER_TOL = 1e-8
"""Singular values within this of the largest form one degenerate cluster (`one_sided_a_modes`)."""
PROBE_SEED = 0


def _ker_ratios(spec: BlockSpectrum) -> list[float]:
    a_max = float(spec.alpha[-1])
    vals = spec.alpha[spec.ker_a].clamp_min(0.0)
    return (vals / a_max).tolist() if a_max > 0 else [0.0] * len(spec.ker_a)


def check_cap(name: str, value: object) -> int:
    """``value`` as a cap on proposed directions (an int ``≥ 1``); ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    return value


def _probes(d: int, like: Tensor, n: int) -> Tensor:
    gen = torch.Generator(device=like.device).manual_seed(PROBE_SEED)
    return torch.randn(d, n, generator=gen, dtype=like.dtype, device=like.device)


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
    from neuromanifold.singular.factor_spectrum import sign_fix

    return sign_fix(v.unsqueeze(1))[:, 0]


def explained_span(
    module: nn.Module, gs: Tensor, block: int = 1, shift: Tensor | None = None
) -> Tensor:
    """Orthonormal columns spanning the taps of the upstream units ``gs`` (``(C, k)``) in the
    block's ``ā`` (`tap_span`), each with its bias shift when ``shift`` is given
    (`neuromanifold.singular.detectors.bias_link.compensate`: a unit of constant output ``c``
    explains the kernel vectors ``(g ⊗ e_s, −β_s)``, not ``(g ⊗ e_s, 0)``)."""
    span = tap_span(module, gs, block)  # all units: kron(G, I_taps), orthonormal
    if shift is None:
        return span
    return torch.linalg.qr(compensate(span, shift))[0]


def one_sided_a_modes(
    spec: BlockSpectrum,
    module: nn.Module,
    upstream: list[Tensor],
    *,
    max_modes: int = MAX_ONE_SIDED,
    block: int = 1,
    shift: Tensor | None = None,
) -> tuple[list[tuple[Tensor, float]], int]:
    """A-kernel directions outside the span of the upstream dead units' taps (``kfac-A``;
    ``block``: a Linear's columns per upstream channel of a flattened feature map, `tap_span`;
    ``shift``: the block's bias shift ``q`` when its links are compensated, `explained_span`).

    Returns ``(modes, n_found)``: at most ``max_modes`` ``(vector, ratio)`` pairs and the number
    of directions that qualify before the cap (``n_found > len(modes)`` means it cut some).

    Without upstream units: the first ``max_modes`` kernel eigenvectors with their ratios
    (``n_found`` = the kernel's dimension).
    With them: the leading left singular vectors (singular value ``> 0.5``) of
    ``rest = (I − SSᵀ) K``, ``K`` the kernel basis and ``S`` the (orthonormal) tap span, each with
    the largest kernel ratio (``n_found`` = the number of such singular values). Computed
    without ``K``: ``rest restᵀ = P − WWᵀ`` with
    ``P = I − SSᵀ``, ``W = P L`` (``L`` the complement of ``K``), so the singular values are
    ``√(1 − σ_i(W)²)`` on ``W``'s left singular vectors and 1 on ``(S + L)^⊥``; cost
    ``O(d · |S| · |L|)``. The top cluster (singular values within `CLUSTER_TOL` of 1) is
    degenerate whenever the kernel is wide; its vectors are the seeded probes projected onto it
    and orthonormalised (`_cluster_vectors`), exactly as in `one_sided_a_modes_reference`.
    """
    if not spec.ker_a:
        return [], 0
    ratios = _ker_ratios(spec)
    if not upstream:
        kept = spec.ker_a[:max_modes]
        return [(spec.a_vecs[:, i], ratios[n]) for n, i in enumerate(kept)], len(spec.ker_a)
    top = max(ratios)
    span = explained_span(module, torch.stack(upstream, 1), block, shift)
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
    vecs = _cluster_vectors(project, _probes(d, live, max_modes), dim)
    order = [i for i in reversed(range(sw.numel())) if nz[i] and not in_cluster[i]]
    below = [i for i in order if float(sv[i]) > 0.5]  # ascending σ(W) = descending sv of rest
    vecs += [_sign_fixed(uw[:, i]) for i in below[: max(max_modes - len(vecs), 0)]]
    return [(v, top) for v in vecs[:max_modes]], dim + len(below)


def one_sided_a_modes_reference(
    spec: BlockSpectrum,
    module: nn.Module,
    upstream: list[Tensor],
    *,
    max_modes: int = MAX_ONE_SIDED,
    block: int = 1,
    shift: Tensor | None = None,
) -> tuple[list[tuple[Tensor, float]], int]:
    """Brute-force oracle of `one_sided_a_modes`: QR of the tap span and the SVD of ``rest``.

    The top cluster (singular values within `CLUSTER_TOL` of 1: directions of the kernel
    orthogonal to every upstream tap, degenerate whenever the kernel is wide) gets the same
    canonical vectors as the fast path; below it the singular vectors are distinct and returned
    sign-fixed.
    """
    if not spec.ker_a:
        return [], 0
    ratios = _ker_ratios(spec)
    basis = spec.ker_a_basis()
    if not upstream:
        kept = range(min(max_modes, basis.shape[1]))
        return [(basis[:, i], ratios[i]) for i in kept], basis.shape[1]
    span = torch.cat([tap_span(module, g, block) for g in upstream], 1)
    if shift is not None:
        span = compensate(span, shift)
    q, _ = torch.linalg.qr(span)
    rest = basis - q @ (q.T @ basis)
    left, sv, _ = torch.linalg.svd(rest, full_matrices=False)
    keep = sv > 0.5  # mostly outside the explained span
    n_keep = int(keep.sum())
    in_cluster = keep & (sv >= 1.0 - CLUSTER_TOL)
    n_c = int(in_cluster.sum())
    l_c = left[:, :n_c]
    probes = _probes(rest.shape[0], rest, max_modes)
    vecs = _cluster_vectors(lambda x: l_c @ (l_c.T @ x), probes, n_c)
    vecs += [_sign_fixed(left[:, i]) for i in range(n_c, n_keep)]
    return [(v, max(ratios)) for v in vecs[:max_modes]], n_keep
