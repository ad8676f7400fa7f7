"""Rescaling-gauge detectors: ReLU-family units, LayerNorm/RMSNorm scale, GLU up projection.

Each builds a `UnitRescale` orbit for one block pair (or norm and its consumers, or gated block)
and proposes one certified curved-gauge candidate through `rescale_candidate`; the orbit, its
tangent, the certification by evaluation and the generator budget are documented in
`neuromanifold.singular.detectors.rescale`.
"""

from __future__ import annotations

from torch import nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.glu import glu_layout
from neuromanifold.singular.detectors.graph import is_named_rmsnorm
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.detectors.rescale import UnitRescale, rescale_candidate

__all__ = ["GLURescaleDetector", "NormScaleDetector", "ReLURescaleDetector"]


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
