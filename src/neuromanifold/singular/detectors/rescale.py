"""Per-unit rescaling orbits: tangents, the group action, and certification by evaluation.

A hidden unit ``j`` whose value is produced elementwise by some tensors (their index ``j`` along
dimension 0: a Linear's row and bias entry, a norm's scale and shift entry) and read only by
consumer weights (their index ``j`` along dimension 1: a Linear's column) sits on the orbit

    producers[j] → c·producers[j],    consumers[:, j] → c^{−p}·consumers[:, j],    c > 0,

which leaves the model function unchanged when the unit passes through nothing or through a
positively homogeneous map of degree ``p`` (``φ(cz) = c^p φ(z)``: ReLU p = 1, squared ReLU
p = 2), or when it multiplies a gate elementwise (a GLU's up projection, p = 1). The tangent at
``c = 1`` is

    τ_j = (producers[j], −p·consumers[:, j])     (zeros elsewhere),

and the orbit is curved: along the straight line ``θ0 + t·τ_j`` the unit's contribution scales by
``(1 + t)^p (1 − p t) = 1 − p(p + 1)t²/2 + O(t³)`` (``1 − t²`` exactly for p = 1), so a straight
probe shows an apparent order 2 with no singularity present (spec §6.5).

Whether a module layout really carries this symmetry depends on how the unit's value is used
after the consumers read it: a ReLU output that also enters a residual sum, a norm output read by
anything but its consumers' weights, or a gated module whose ``forward`` is not
``down(φ(gate(x)) ⊙ up(x))`` break it. `certify` decides by evaluation instead of by layout: it
applies one group element with factors ``c_j ∈ {2, ½}`` (alternating over the units) and
compares the model's outputs on a few probe samples. Powers of two scale every floating-point
product exactly, so on a true orbit the outputs agree to rounding of identically ordered sums
(bitwise, in practice), and a broken one changes them by O(1) relative; ``CERTIFY_RTOL`` sits far
between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.utils._pytree import tree_leaves

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.glu import glu_layout
from neuromanifold.singular.detectors.graph import is_named_rmsnorm
from neuromanifold.singular.detectors.one_sided import check_cap

__all__ = [
    "CERTIFY_RTOL",
    "CERTIFY_SAMPLES",
    "MAX_GENERATOR_ENTRIES",
    "GLURescaleDetector",
    "NormScaleDetector",
    "ReLURescaleDetector",
    "UnitRescale",
    "certify",
    "relative_change",
    "rescale_candidate",
    "units_cap",
]

CERTIFY_RTOL = 1e-10
"""Largest ``max|f(g·θ) − f(θ)| / max|f(θ)|`` over the probe samples for which an orbit counts as
a symmetry (`certify`); exact orbits give 0 (power-of-two factors), broken ones O(1)."""
CERTIFY_SAMPLES = 8
"""Probe samples `certify` evaluates the model on (the first ones of the read's probe set)."""


@dataclass(frozen=True)
class UnitRescale:
    """The rescaling orbit of every unit of one layer (module docstring).

    Attributes:
        producers: parameter names indexed by the unit along dimension 0 (weight rows, bias,
            norm scale and shift entries); all of the same length ``n_units`` in that dimension.
        consumers: parameter names indexed by the unit along dimension 1 (weight columns).
        degree: ``p``, the degree of homogeneity between producer and consumer (1 or 2).
    """

    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    degree: int = 1

    def n_units(self, params: dict[str, Tensor]) -> int:
        """Number of units: the producers' length along dimension 0."""
        return int(params[self.producers[0]].shape[0])

    def strength(self, params: dict[str, Tensor]) -> Tensor:
        """``‖producers[0][j]‖ · ‖consumer columns_j‖`` per unit (shape ``(n_units,)``; the first
        producer is the weight or scale, biases and shifts do not count): large for a clearly
        live unit."""
        return self._row_norms(params, self.producers[:1], 0) * self._row_norms(
            params, self.consumers, 1
        )

    def tangent_norms(self, params: dict[str, Tensor]) -> Tensor:
        """``‖τ_j‖`` per unit (shape ``(n_units,)``); zero for a unit with nothing to rescale."""
        prod = self._row_norms(params, self.producers, 0)
        cons = self._row_norms(params, self.consumers, 1)
        return torch.sqrt(prod**2 + self.degree**2 * cons**2)

    def tangent(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """``τ_j``: ``producers[j]`` and ``−p·consumers[:, j]``, zero elsewhere in those tensors."""
        out: dict[str, Tensor] = {}
        for key in self.producers:
            d = torch.zeros_like(params[key])
            d[j] = params[key][j]
            out[key] = d
        for key in self.consumers:
            d = torch.zeros_like(params[key])
            d[:, j] = -self.degree * params[key][:, j]
            out[key] = d
        return out

    def tangent_reference(self, params: dict[str, Tensor], j: int) -> dict[str, Tensor]:
        """Oracle of `tangent`: ``d/dc_j act(params, c)`` at ``c = 𝟙`` by forward-mode AD."""
        ref = params[self.producers[0]]
        ones = torch.ones(self.n_units(params), dtype=ref.dtype, device=ref.device)
        e_j = torch.zeros_like(ones)
        e_j[j] = 1.0
        _, out = torch.func.jvp(lambda c: self.act(params, c), (ones,), (e_j,))
        return out

    def act(self, params: dict[str, Tensor], factors: Tensor) -> dict[str, Tensor]:
        """The group element: producers' unit ``j`` times ``c_j``, consumers' times
        ``c_j^{−p}`` (``factors`` = ``c``, shape ``(n_units,)``, positive)."""
        out: dict[str, Tensor] = {}
        for key in self.producers:
            p = params[key]
            out[key] = p * factors.reshape(-1, *([1] * (p.dim() - 1)))
        for key in self.consumers:
            w = params[key]
            out[key] = w * factors.pow(-self.degree).reshape(1, -1, *([1] * (w.dim() - 2)))
        return out

    @staticmethod
    def _row_norms(params: dict[str, Tensor], keys: tuple[str, ...], dim: int) -> Tensor:
        total = None
        for key in keys:
            p = params[key].double()
            sq = p.transpose(0, dim).reshape(p.shape[dim], -1).pow(2).sum(1)
            total = sq if total is None else total + sq
        return torch.sqrt(total)


def relative_change(ctx: DetectionContext, moved: dict[str, Tensor]) -> float:
    """``max|f(θ') − f(θ)| / max|f(θ)|`` over the model's floating-point output tensors on the
    first ``CERTIFY_SAMPLES`` probe samples, ``θ'`` = the parameters with ``moved`` substituted;
    ``inf`` when the output holds no floating-point tensor or a forward fails."""
    x = ctx.data[:CERTIFY_SAMPLES]

    def outputs(params: dict[str, Tensor]) -> list[Tensor]:
        out = functional_call(ctx.model, params, (x,))
        return [t for t in tree_leaves(out) if isinstance(t, Tensor) and t.is_floating_point()]

    try:
        with torch.no_grad():
            base = outputs(dict(ctx.params))
            acted = outputs({**dict(ctx.params), **moved})
    except (RuntimeError, ValueError, TypeError):  # a layout the model cannot run
        return float("inf")
    if not base or len(base) != len(acted):
        return float("inf")
    scale = max(float(t.abs().max()) for t in base if t.numel())
    diff = max(float((a - b).abs().max()) for a, b in zip(acted, base, strict=True) if a.numel())
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def certify(ctx: DetectionContext, orbit: UnitRescale) -> float:
    """`relative_change` under the group element with factors ``2, ½, 2, …`` over the units.

    The orbit is a symmetry of the model when this is at most ``CERTIFY_RTOL`` (module docstring).
    """
    n = orbit.n_units(ctx.params)
    factors = torch.ones(n, dtype=torch.float64, device=ctx.params[orbit.producers[0]].device)
    factors[0::2] = 2.0
    factors[1::2] = 0.5
    return relative_change(ctx, orbit.act(ctx.params, factors))


def rescale_candidate(
    ctx: DetectionContext,
    orbit: UnitRescale,
    *,
    layers: tuple[str, ...],
    detector: str,
    max_units: int | None = None,
    info: dict[str, Any] | None = None,
) -> list[Candidate]:
    """One curved-gauge candidate for ``orbit``, or none.

    None when no unit has a non-zero tangent or when `certify` finds the orbit is not a symmetry.
    Otherwise ``u`` is the normalised tangent of the unit of largest `UnitRescale.strength` (a
    clearly live unit, read to certify the curved-gauge class) and ``gauge_generators`` are the
    tangents of every unit with a non-zero tangent, strongest first, at most `units_cap`
    (``max_units``, or the ``MAX_GENERATOR_ENTRIES`` budget when ``None``;
    ``info["truncated"] = {"cap", "found", "kept", "of": "generators"}`` when the cap cuts).
    ``info`` also records ``unit``, ``degree``, ``generator_units`` and ``certified`` (the
    relative change `certify` measured).
    """
    strength = orbit.strength(ctx.params)
    tnorm = orbit.tangent_norms(ctx.params)
    j = int(torch.argmax(strength))
    if float(strength[j]) == 0.0:
        return []
    change = certify(ctx, orbit)
    if not change <= CERTIFY_RTOL:
        return []
    order = sorted(
        (i for i in range(tnorm.numel()) if float(tnorm[i]) > 0.0),
        key=lambda i: (-float(strength[i]), i),
    )  # strongest first: ``j`` leads
    cap = units_cap(orbit, ctx.params, max_units)
    units = order[:cap]
    gens = tuple(orbit.tangent(ctx.params, i) for i in units)
    extra = {
        **(info or {}),
        "unit": j,
        "degree": orbit.degree,
        "generator_units": units,
        "certified": change,
    }
    if len(order) > cap:
        extra["truncated"] = {
            "cap": cap,
            "found": len(order),
            "kept": len(units),
            "of": "generators",
        }
    cand = Candidate(
        layers=layers,
        detector=detector,
        u=normalise(gens[0]),
        gauge="curved",
        gauge_generators=gens,
        info=extra,
    )
    return ctx.canonical([cand])


MAX_GENERATOR_ENTRIES = 2**21
"""Default budget of a rescale candidate's ``gauge_generators``: units kept × entries of the
orbit's tensors (each generator is dense over them) at most this many float64 numbers (16 MiB).

`read` classes every candidate sharing a tensor with these generators against their span (a
dense SVD over the shared tensors per sweep), so the read's cost grows with the generators: a
256→256→256→10 ReLU MLP on 128 probes read in 1.7 s with 8 units per pair, 3.5 s with 16 (the
budget: 2·256² + 256 entries per unit), 6.2 s with 32 and 32 s with 64 (one thread). A norm of
width 32 read by three 32×32 projections (3 136 entries per unit) keeps all its units."""


def units_cap(orbit: UnitRescale, params: dict[str, Tensor], max_units: int | None) -> int:
    """Units a candidate may keep: ``max_units`` when given, else as many as
    ``MAX_GENERATOR_ENTRIES`` allows (at least 1)."""
    if max_units is not None:
        return max_units
    entries = sum(params[k].numel() for k in (*orbit.producers, *orbit.consumers))
    return max(1, MAX_GENERATOR_ENTRIES // entries)


def _check_max_units(value: object) -> int | None:
    return None if value is None else check_cap("max_units", value)


_HOMOGENEOUS = {"ReLU": 1, "LeakyReLU": 1, "SquaredReLU": 2, "ReLUSquaredActivation": 2}
"""Positively homogeneous activations by class name and their degree p: ``φ(cz) = c^p φ(z)``."""
_LINEAR_ELEMENTWISE = frozenset({"Identity", "Dropout"})
"""Elementwise modules that are linear maps in evaluation mode (allowed between a norm and its
consumers)."""


def _prefix(name: str) -> str:
    return f"{name}." if name else ""


class ReLURescaleDetector:
    """Per-unit rescaling through a positively homogeneous activation (curved gauge).

    A Linear/conv block followed (through one positively homogeneous activation of degree p: ReLU
    and LeakyReLU p = 1, ``SquaredReLU`` and Hugging Face's ``ReLUSquaredActivation`` p = 2) by a
    single consumer block: unit ``j``'s orbit ``(w_in, b_in, w_out) → (c w_in, c b_in,
    w_out/c^p)`` has tangent ``(W1[j], b1[j], −p·W2[:, j])`` (`UnitRescale`), certified by
    evaluation (`certify`: a ReLU output that also enters a residual sum is no symmetry).
    Candidate ``"relu-rescale"`` (`rescale_candidate`).
    """

    name = "relu-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the unit tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks (proposes only when followed by ReLU/LeakyReLU and one consumer)."""
        return is_supported_block(module)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the block pair, or nothing."""
        c = ctx.graph.single_consumer(name)
        via = ctx.graph.via.get((name, c)) if c is not None else None
        if via is None or len(via) != 1 or via[0] not in _HOMOGENEOUS:
            return []
        cons = ctx.model.get_submodule(c)
        if not is_supported_block(cons):
            return []
        w1 = ctx.params[f"{_prefix(name)}weight"]
        if ctx.params[f"{c}.weight"].shape[1] != w1.shape[0]:
            return []
        producers = [f"{_prefix(name)}weight"]
        if module.bias is not None:
            producers.append(f"{_prefix(name)}bias")
        orbit = UnitRescale(tuple(producers), (f"{c}.weight",), _HOMOGENEOUS[via[0]])
        return rescale_candidate(
            ctx, orbit, layers=(name, c), detector="relu-rescale", max_units=self.max_units
        )


def _norm_width(module: nn.Module) -> int | None:
    """Width ``d`` of a LayerNorm/RMSNorm over one trailing dimension with a scale, else None
    (an RMSNorm defined outside torch: the length of its one-dimensional ``weight``)."""
    if is_named_rmsnorm(module):
        return int(module.weight.shape[0])
    shape = tuple(module.normalized_shape)
    if len(shape) != 1 or getattr(module, "weight", None) is None:
        return None
    return int(shape[0])


def _consumer_weight(module: nn.Module, name: str, width: int) -> str | None:
    """The consumer weight whose columns read the norm's features: a Linear's ``weight`` or a
    ``nn.MultiheadAttention``'s packed ``in_proj_weight``; None for any other consumer."""
    if type(module) is nn.Linear and module.in_features == width:
        return f"{name}.weight"
    if isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
        if module.in_proj_weight.shape[1] == width:
            return f"{name}.in_proj_weight"
    return None


class NormScaleDetector:
    """Per-feature rescaling of a LayerNorm/RMSNorm scale against its consumers (curved gauge).

    ``LN(x)_j = γ_j n_j(x) + β_j`` (RMSNorm: no ``β``) is read only through column ``j`` of the
    consumers' weights, so ``(γ_j, β_j, W_c[:, j]) → (cγ_j, cβ_j, W_c[:, j]/c)`` for every consumer
    ``c`` at once leaves the model unchanged: tangent ``(γ_j, β_j, −W_c[:, j] ∀c)`` (spec §6.5,
    LayerNorm/RMSNorm scale). The norm must normalise one trailing dimension with a scale, and its
    graph consumers (`ModelGraph`; through Identity/Dropout only) must be Linears or packed
    ``nn.MultiheadAttention`` in-projections; the symmetry is certified by evaluation
    (`certify`: a norm output that also enters a residual sum, as in post-norm blocks, an
    attention reading other keys, or a scale entering other than as a factor, as Gemma's
    ``1 + w``, is no symmetry). RMSNorms defined outside torch are matched by name
    (`is_named_rmsnorm`). Candidate ``"norm-scale"``.
    """

    name = "norm-scale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the feature tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.LayerNorm``, ``nn.RMSNorm`` and RMSNorms defined outside torch
        (`is_named_rmsnorm`, e.g. Hugging Face's ``LlamaRMSNorm``); proposes only under the
        conditions above."""
        return isinstance(module, nn.LayerNorm | nn.RMSNorm) or is_named_rmsnorm(module)

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the norm and all its consumers, or nothing."""
        width = _norm_width(module)
        consumers = ctx.graph.consumers.get(name, ())
        if width is None or not consumers:
            return []
        weights = []
        for c in consumers:
            if not set(ctx.graph.via.get((name, c), ())) <= _LINEAR_ELEMENTWISE:
                return []
            key = _consumer_weight(ctx.model.get_submodule(c), c, width)
            if key is None:
                return []
            weights.append(key)
        producers = [f"{_prefix(name)}weight"]
        if getattr(module, "bias", None) is not None:
            producers.append(f"{_prefix(name)}bias")
        orbit = UnitRescale(tuple(producers), tuple(weights), 1)
        return rescale_candidate(
            ctx,
            orbit,
            layers=(name, *consumers),
            detector="norm-scale",
            max_units=self.max_units,
        )


class GLURescaleDetector:
    """Per-unit rescaling of a gated feed-forward block's up projection (curved gauge).

    In ``down(φ(gate(x)) ⊙ up(x))`` hidden unit ``j`` is ``φ(gate_j)·up_j``, linear in ``up_j``
    whatever ``φ`` is, so ``(W_up[j], b_up[j], W_down[:, j]) → (c W_up[j], c b_up[j],
    W_down[:, j]/c)`` leaves the block unchanged: tangent ``(W_up[j], b_up[j], −W_down[:, j])``
    (spec §6.5, SwiGLU rescaling). The layout comes from the child names (`glu_layout`); the
    symmetry is certified by evaluation (`certify`). The gate is rescaled only with a positively
    homogeneous ``φ``, which the names do not reveal, so it is not proposed. Candidate
    ``"glu-rescale"``.
    """

    name = "glu-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the unit tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Modules with a recognised gate/up/down layout (`glu_layout`)."""
        return glu_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the block, or nothing."""
        _, up, down = glu_layout(module)
        pre = _prefix(name)
        producers = [f"{pre}{up}.weight"]
        if module.get_submodule(up).bias is not None:
            producers.append(f"{pre}{up}.bias")
        orbit = UnitRescale(tuple(producers), (f"{pre}{down}.weight",), 1)
        return rescale_candidate(
            ctx,
            orbit,
            layers=(f"{pre}{up}", f"{pre}{down}"),
            detector="glu-rescale",
            max_units=self.max_units,
        )
