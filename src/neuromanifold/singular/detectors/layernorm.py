"""LayerNorm detector: the closed-form kernel lifted to each consumer Linear (spec §6.4).

``LN(x) = γ ⊙ n(x) + β`` with ``𝟙ᵀn(x) = 0`` gives ``⟨γ⁻¹, LN(x)⟩ = ⟨γ⁻¹, β⟩`` for every input, so
for a consumer Linear with bias ``a* = (γ⁻¹, −⟨γ⁻¹, β⟩)`` satisfies ``⟨a*, ā⟩ = 0`` identically and
``ΔW̄ = g a*ᵀ`` changes nothing for any ``g``: an exact linear (flat) gauge, read from the
parameters alone. If any ``γ_i = 0``, the outputs ``LN(x)_i = β_i`` of those coordinates are
constants and ``a* ∝ (Σ_{γ_i=0} e_i, −Σ_{γ_i=0} β_i)`` is used instead (no ``γ⁻¹`` entries of
the other coordinates). A consumer Linear without a bias (``ā = LN(x)``, no constant coordinate)
has the kernel exactly when that constant vanishes: always for a norm without ``β``, else when
the unit ``a*``'s constant coordinate is at most ``NO_BIAS_TOL`` in size (e.g. ``β = 0`` at
initialisation); its lift is ``a*`` without the constant coordinate, renormalised.
``g`` is the top eigenvector of the consumer's ``G`` when factors exist (else ``e_0``).

When factors exist the candidate records ``closed_form_cos = ‖P_K a*‖`` (`kernel_cos`): the
cosine between the unit ``a*`` (in the consumer's ``ā`` coordinates) and its projection onto the
near-kernel ``K`` of the consumer's ``A`` (the eigenvectors `near_kernel` keeps), and
``kernel_dim = dim K``. When ``K`` has dimension 1 this is ``|cos(a*, bottom eigenvector of
A)|``; when the probe set spans fewer directions than the layer is wide, ``K`` is degenerate and
any single basis vector of it is arbitrary, but ``‖P_K a*‖`` is not. With an empty near-kernel
the bottom eigenvector stands in for ``K`` (``kernel_dim = 0``).

The direction moves only the consumer's weight and bias, so a candidate's ``layers`` is the
consumer alone; the LayerNorm whose kernel it is, whose parameters stay, is ``info["norm"]`` (and
the consumer ``info["consumer"]``). Until s17 ``layers`` also listed the norm (trial AD #6), and
`neuromanifold.singular.reading.Reading.by_layer` filed a flat gauge under a module it leaves
unchanged.

RMSNorm has no mean subtraction and hence no such direction: its detector proposes nothing. A
consuming ``nn.MultiheadAttention`` gets the lift on its packed ``in_proj`` (self-attention
assumed; the read's flat class confirms it).

References: Shirodkar & Narayanan, arXiv:2606.19491 (LayerNorm kernel diagnostic).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.graph import graph_passes_through
from neuromanifold.singular.detectors.linear import block_spectrum, lift
from neuromanifold.singular.detectors.link import BlockSpectrum

__all__ = [
    "NO_BIAS_TOL",
    "REACH_TOL",
    "LayerNormDetector",
    "LayerNormReachDetector",
    "RMSNormDetector",
    "kernel_cos",
    "kernel_cos_reference",
    "layernorm_kernel",
]

REACH_TOL = 1e-12
"""Factor test: ``a*ᵀ A a* ≤ REACH_TOL · tr A`` means ``⟨a*, ā⟩ = 0`` on every probe input."""
NO_BIAS_TOL = 1e-12
"""A bias-free consumer takes the kernel when the unit ``a*``'s constant coordinate
``|a*_d| ∝ |⟨γ⁻¹, β⟩|`` is at most this (exactly 0 without ``β`` or with ``β = 0``)."""


def kernel_cos(a_star: Tensor, spec: BlockSpectrum) -> tuple[float, int]:
    """``(‖P_K â‖, dim K)`` for ``â = a*/‖a*‖`` and ``K`` the near-kernel of ``A`` (``spec.ker_a``).

    ``‖P_K â‖ = ‖Kᵀ â‖`` for the orthonormal kernel columns ``K``; with ``spec.ker_a`` empty,
    ``K`` is the bottom eigenvector (``dim K`` reported as 0). Oracle: `kernel_cos_reference`.
    """
    a = a_star.double() / a_star.double().norm()
    basis = spec.ker_a_basis() if spec.ker_a else spec.a_vecs[:, :1]
    return float((basis.T @ a).norm()), len(spec.ker_a)


def kernel_cos_reference(a_star: Tensor, spec: BlockSpectrum) -> tuple[float, int]:
    """Brute-force oracle of `kernel_cos`: the projector ``P = K Kᵀ`` formed densely, then
    ``‖P â‖``."""
    a = a_star.double() / a_star.double().norm()
    idx = spec.ker_a if spec.ker_a else [0]
    basis = spec.a_vecs[:, idx]
    proj = basis @ basis.T
    return float(torch.linalg.vector_norm(proj @ a)), len(spec.ker_a)


def _consumer_kernel(a_star: Tensor, cons: nn.Linear) -> Tensor | None:
    """``a*`` in ``cons``'s input coordinates: as is with a bias; without one, its first ``d``
    coordinates renormalised if ``|a*_d| ≤ NO_BIAS_TOL``, else ``None`` (no exact kernel)."""
    if cons.bias is not None:
        return a_star
    if abs(float(a_star[-1])) > NO_BIAS_TOL:
        return None
    head = a_star[:-1]
    return head / head.norm()


def layernorm_kernel(gamma: Tensor, beta: Tensor | None) -> Tensor:
    """Unit ``a* ∝ (γ⁻¹, −⟨γ⁻¹, β⟩)``, length ``d + 1``; if any ``γ_i = 0``, instead
    ``a* ∝ (Σ_{γ_i=0} e_i, −Σ_{γ_i=0} β_i)`` (every ``γ⁻¹`` entry dropped).

    >>> ln = nn.LayerNorm(3).double()
    >>> with torch.no_grad():
    ...     _ = ln.weight.copy_(torch.tensor([1.0, 2.0, 4.0])); _ = ln.bias.fill_(0.5)
    >>> a = layernorm_kernel(ln.weight, ln.bias)
    >>> out = ln(torch.randn(5, 3, dtype=torch.float64))
    >>> bool((torch.cat([out, torch.ones(5, 1)], 1) @ a).abs().max() < 1e-12)
    True
    """
    g = gamma.double()
    b = torch.zeros_like(g) if beta is None else beta.double()
    zero = g == 0
    if zero.any():
        inv = zero.double()
        const = -(inv * b).sum()  # ⟨e_i, LN(x)⟩ = β_i where γ_i = 0
    else:
        inv = 1.0 / g
        const = -(inv * b).sum()
    v = torch.cat([inv, const.reshape(1)])
    return v / v.norm()


class LayerNormDetector:
    """The LN-kernel gauge on every LayerNorm → Linear pair (bias-free consumers when
    ``⟨γ⁻¹, β⟩ = 0``; module docstring)."""

    name = "layernorm"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.LayerNorm`` over one trailing dimension."""
        return isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One flat-gauge candidate per consumer Linear that has the kernel (module docstring)."""
        d = module.normalized_shape[0]
        gamma = ctx.param(name, "weight")
        beta = ctx.param(name, "bias")
        dev = next(iter(ctx.params.values())).device
        gamma = torch.ones(d, dtype=torch.float64, device=dev) if gamma is None else gamma
        a_star = layernorm_kernel(gamma, beta)
        mods = dict(ctx.model.named_modules())
        out = []
        for c in ctx.graph.consumers.get(name, ()):
            if not graph_passes_through(ctx.graph, name, c):
                continue  # e.g. an activation between: the kernel identity does not survive it
            cons = mods[c]
            if isinstance(cons, nn.MultiheadAttention):
                cand = _packed_candidate(name, c, cons, a_star, d)
                if cand is not None:
                    out.append(cand)
                continue
            if not isinstance(cons, nn.Linear) or cons.in_features != d:
                continue
            a_c = _consumer_kernel(a_star, cons)
            if a_c is None:
                continue
            spec = block_spectrum(ctx, c)
            g = torch.zeros(cons.out_features, dtype=torch.float64, device=a_star.device)
            g[0] = 1.0
            g = spec.g_top if spec is not None else g
            info = {"norm": name, "consumer": c}
            if spec is not None:
                info["closed_form_cos"], info["kernel_dim"] = kernel_cos(a_c, spec)
            out.append(
                Candidate(
                    layers=(c,),  # the norm is info["norm"]: its parameters stay
                    detector="ln-kernel",
                    u=normalise(lift(c, cons, g, a_c)),
                    gauge="flat",
                    info=info,
                )
            )
        return ctx.canonical(out)


def _packed_candidate(
    norm: str, name: str, mha: nn.MultiheadAttention, a_star: Tensor, d: int
) -> Candidate | None:
    """LN kernel lifted to the packed ``in_proj`` of a self-attention fed by the norm.

    ``[q; k; v] = W_in h + b_in`` with ``h = LN(x)``: ``ΔW_in = g a*[:d]ᵀ``, ``Δb_in = g a*[d]`` is
    exact for every ``g`` (uniform ``g`` here). Requires packed projections with a bias, and that
    the norm output feeds query, key and value (self-attention; checked by the caller's graph only
    for the query, so the read's flat-gauge class is the confirmation).
    """
    if not mha._qkv_same_embed_dim or mha.in_proj_bias is None or mha.embed_dim != d:
        return None
    prefix = f"{name}." if name else ""
    g = torch.ones(3 * d, dtype=torch.float64, device=a_star.device) / (3 * d) ** 0.5
    u = {
        f"{prefix}in_proj_weight": torch.outer(g, a_star[:d]),
        f"{prefix}in_proj_bias": g * a_star[d],
    }
    return Candidate(
        layers=(name,),
        detector="ln-kernel",
        u=normalise(u),
        gauge="flat",
        info={"norm": norm, "consumer": name},
    )


class LayerNormReachDetector:
    """LN kernel on Linear layers that read LayerNorm outputs through pooling the graph skips.

    The data-flow graph follows elementwise modules and row selections (``LN(z)[:, 0]``) but not
    a token mean or other pooling of LN outputs, so such a head is not a graph consumer, yet
    ``⟨a*, ā⟩ = 0`` still holds for it (selection and averaging preserve
    ``⟨γ⁻¹, ·⟩ = ⟨γ⁻¹, β⟩``). For a Linear with bias that is no
    graph consumer of a LayerNorm, this detector tests every LayerNorm of matching width on the
    Linear's own factor: ``a*ᵀ A a* ≤ REACH_TOL · tr A`` (exact on the probe set). On success it
    proposes the LN-kernel gauge once, listing all matches in ``info["matching_norms"]``. Norms
    with equal ``γ``, ``β`` (e.g. at initialisation) cannot be told apart by the test; the one
    named is then the last match registered before the Linear in ``named_modules()`` order (the
    final norm before a head, in the usual layouts), else the first match. The direction is the
    same for all of them.
    """

    name = "layernorm-reach"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.Linear`` with a bias."""
        return type(module) is nn.Linear and module.bias is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One flat-gauge candidate if some LayerNorm's kernel annihilates this layer's input."""
        if any(
            isinstance(ctx.model.get_submodule(p), nn.LayerNorm)
            and graph_passes_through(ctx.graph, p, name)
            for p in ctx.graph.producers.get(name, ())
        ):
            return []  # handled by LayerNormDetector from the graph
        spec = block_spectrum(ctx, name)
        bf = ctx.factors.blocks.get(name)
        if spec is None or bf is None:
            return []
        d = module.in_features
        trace = float(torch.trace(bf.A))
        matches = []
        for ln_name, ln in ctx.model.named_modules():
            if not isinstance(ln, nn.LayerNorm) or tuple(ln.normalized_shape) != (d,):
                continue
            gamma = ctx.param(ln_name, "weight")
            gamma = (
                torch.ones(d, dtype=torch.float64, device=bf.A.device) if gamma is None else gamma
            )
            a_star = layernorm_kernel(gamma, ctx.param(ln_name, "bias"))
            if float(a_star @ bf.A @ a_star) <= REACH_TOL * trace:
                matches.append((ln_name, a_star))
        if not matches:
            return []
        order = {n: i for i, (n, _) in enumerate(ctx.model.named_modules())}
        before = [m for m in matches if order[m[0]] < order[name]]
        ln_name, a_star = before[-1] if before else matches[0]
        cos, kdim = kernel_cos(a_star, spec)
        return ctx.canonical(
            [
                Candidate(
                    layers=(name,),
                    detector="ln-kernel",
                    u=normalise(lift(name, module, spec.g_top, a_star)),
                    gauge="flat",
                    info={
                        "norm": ln_name,
                        "consumer": name,
                        "via": "factor-test",
                        "matching_norms": [m[0] for m in matches],
                        "closed_form_cos": cos,
                        "kernel_dim": kdim,
                    },
                )
            ]
        )


class RMSNormDetector:
    """RMSNorm: covered, and by the theory proposes no kernel direction."""

    name = "rmsnorm"

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.RMSNorm``."""
        return isinstance(module, nn.RMSNorm)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """Always empty (no mean subtraction, no closed-form kernel)."""
        return []
