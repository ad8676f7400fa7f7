"""Rescaling-gauge detectors: ReLU-family units, LayerNorm/RMSNorm scale, GLU up projection.

Each builds a `UnitRescale` orbit for one block and its consumer blocks (or norm and its
consumers, or gated block) and proposes one certified curved-gauge candidate through
`rescale_candidate`; the orbit, its tangent, the certification by evaluation and the generator
budget are documented in `neuromanifold.singular.detectors.rescale`.
"""

from __future__ import annotations

from torch import nn

from neuromanifold.singular.blocks import is_supported_block
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, qualified
from neuromanifold.singular.detectors.glu import fused_glu_layout, glu_layout
from neuromanifold.singular.detectors.graph import (
    CHANNELWISE_LABELS,
    PASS_THROUGH,
    graph_scales_through,
    is_named_rmsnorm,
)
from neuromanifold.singular.detectors.graph_steps import SCALE, layout_step, power_degree
from neuromanifold.singular.detectors.one_sided import check_cap
from neuromanifold.singular.detectors.rescale import UnitRescale, rescale_candidate

__all__ = [
    "GLURescaleDetector",
    "NormScaleDetector",
    "ReLURescaleDetector",
    "chain_degree",
    "producer_keys",
]


def _check_max_units(value: object) -> int | None:
    return None if value is None else check_cap("max_units", value)


_HOMOGENEOUS = {
    "ReLU": 1,
    "LeakyReLU": 1,
    "PReLU": 1,
    "SquaredReLU": 2,
    "ReLUSquaredActivation": 2,
}
"""Positively homogeneous activations by class name and their degree p: ``φ(cz) = c^p φ(z)``
(a PReLU's too, whatever its learned slopes: ``z`` for ``z ≥ 0``, ``a·z`` below, so
``PReLU(cz) = c·PReLU(z)`` for ``c > 0``)."""


def chain_degree(steps: list[str]) -> int | None:
    """The degree p of the steps between a producer and its consumer (Identity/Dropout removed)
    when together they are positively homogeneous, ``φ(cz) = c^p φ(z)`` for ``c > 0``: degrees
    multiply under composition, so p is the product of the activations' degrees
    (`_HOMOGENEOUS`) and of the integer powers' (`graph_steps.power_degree`: ``F.relu(h) ** 2``
    is ``("ReLU", "Square")``, p = 2; a square alone is p = 2 as well), the channelwise pooling
    steps and a constant factor (``"Scale"``) counting 1. None when a step is not homogeneous of
    integer degree (Tanh, ``h ** 0.5``) or when there is no activation or power at all.

    >>> chain_degree(["ReLU", "Square"]), chain_degree(["ReLU", "MaxPool"]), chain_degree([])
    (2, 1, None)
    >>> chain_degree(["ReLU", "Scale"]), chain_degree(["Scale"])
    (1, None)
    >>> chain_degree(["Tanh", "Square"]) is None
    True
    """
    degree, acts = 1, 0
    for step in steps:
        if step in CHANNELWISE_LABELS or step == SCALE:
            continue
        p = _HOMOGENEOUS.get(step) or power_degree(step)
        if p is None:
            return None
        degree, acts = degree * p, acts + 1
    return degree if acts else None


_CHANNEL_NORMS = (
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
)
"""Norms whose affine map acts per channel (dimension 1)."""


def _channel_affine_width(module: nn.Module) -> int | None:
    """Channels ``C`` of a BatchNorm, GroupNorm or InstanceNorm with a learned affine map (its
    output channel ``c`` is ``γ_c x̂_c + β_c``, with ``x̂`` from running statistics in evaluation
    mode or from the sample's group or channel statistics), else None. A BatchNorm without
    running statistics normalises with the statistics of the batch even in evaluation mode, so a
    sample's output depends on the others: None (the read refuses such a model,
    `_validate.check_eval_mode`).

    >>> _channel_affine_width(nn.BatchNorm2d(3)), _channel_affine_width(nn.GroupNorm(2, 4))
    (3, 4)
    >>> _channel_affine_width(nn.InstanceNorm2d(5, affine=True))
    5
    >>> _channel_affine_width(nn.InstanceNorm2d(5)) is None
    True
    >>> _channel_affine_width(nn.BatchNorm1d(3, affine=False)) is None
    True
    >>> _channel_affine_width(nn.BatchNorm1d(3, track_running_stats=False)) is None
    True
    """
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        if not module.track_running_stats or module.running_mean is None:
            return None
    if isinstance(module, _CHANNEL_NORMS) and module.affine:
        return int(module.weight.shape[0])
    return None


def producer_keys(name: str, module: nn.Module) -> list[str]:
    """The tensors indexed by the unit along dimension 0: ``weight`` and, if present, ``bias``."""
    keys = [qualified(name, "weight")]
    if getattr(module, "bias", None) is not None:
        keys.append(qualified(name, "bias"))
    return keys


class ReLURescaleDetector:
    """Per-unit rescaling through a positively homogeneous activation (curved gauge).

    A Linear/conv block, or a BatchNorm/GroupNorm with an affine map (its channel ``c`` is
    ``γ_c x̂_c + β_c``: the scale and shift play the row and bias, as in a ResNet's
    BatchNorm → ReLU → conv), followed (through positively homogeneous activations and powers of
    total degree p, `chain_degree`: ReLU, LeakyReLU and PReLU p = 1, ``SquaredReLU``, Hugging Face's
    ``ReLUSquaredActivation`` and an inline ``F.relu(h) ** 2`` p = 2, and any channelwise
    pooling, spatial mean or singleton flatten, degree 1: `graph.CHANNELWISE`) by consumer
    blocks, one or several (a ResNet block's ``relu(stem(x))`` read by its first conv and its
    1×1 shortcut), each through steps of the same degree p and reading the same number of
    columns per unit: unit ``j``'s orbit ``(w_in, b_in, w_out) → (c w_in, c b_in, w_out/c^p)``,
    with ``w_out`` the columns of every consumer at once, has tangent
    ``(W1[j], b1[j], −p·W2[:, j] ∀ consumers)`` (`UnitRescale`;
    for a conv consumer ``W2[:, j]`` is input channel ``j`` of every output channel and kernel
    position; for a Linear reading a flattened feature map, channel ``j``'s block of columns),
    certified by evaluation (`certify`: a ReLU output that also enters a residual
    sum is no symmetry). Nothing is proposed when a consumer is not a supported block or reads
    the output through a step that is not positively homogeneous (Tanh, GELU). Candidate
    ``"relu-rescale"`` (`rescale_candidate`), on the producer and all its consumers.
    """

    name = "relu-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the unit tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Supported blocks and affine BatchNorm/GroupNorm (`_channel_affine_width`); proposes
        only when every consumer block reads it through homogeneous activations."""
        return is_supported_block(module) or _channel_affine_width(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the block and all its consumers, or
        nothing."""
        consumers = tuple(ctx.graph.consumers.get(name, ()))
        producers = producer_keys(name, module)
        units = ctx.params[producers[0]].shape[0]
        if units == 0:  # a layer of zero width: no unit to rescale
            return []
        found: set[tuple[int, int]] = set()  # (degree, block) of each consumer
        for c in consumers:
            via = ctx.graph.via.get((name, c))
            steps = [v for v in via or () if v not in PASS_THROUGH]
            degree = chain_degree(steps)
            if via is None or degree is None:
                return []
            if not is_supported_block(ctx.model.get_submodule(c)):
                return []
            cols = ctx.params[f"{c}.weight"].shape[1]
            block = cols // units if layout_step(steps) == "FlattenChannels" else 1
            if cols != units * block:
                return []
            found.add((degree, block))
        if len(found) != 1:  # no consumer, or consumers that need different orbits
            return []
        ((degree, block),) = found
        weights = tuple(f"{c}.weight" for c in consumers)
        orbit = UnitRescale(tuple(producers), weights, degree, block)
        return rescale_candidate(
            ctx,
            orbit,
            layers=(name, *consumers),
            detector="relu-rescale",
            max_units=self.max_units,
        )


def _norm_width(module: nn.Module) -> int | None:
    """Width ``d`` of a LayerNorm/RMSNorm over one trailing dimension with a scale, else None
    (an RMSNorm defined outside torch: the length of its one-dimensional ``weight``; an affine
    BatchNorm/GroupNorm/InstanceNorm: its channels)."""
    if is_named_rmsnorm(module):
        return int(module.weight.shape[0])
    if isinstance(module, _CHANNEL_NORMS):
        return _channel_affine_width(module)
    shape = tuple(module.normalized_shape)
    if len(shape) != 1 or getattr(module, "weight", None) is None:
        return None
    return int(shape[0])


def _consumer_weight(module: nn.Module, name: str, width: int) -> str | None:
    """The consumer weight whose columns read the norm's features: a Linear's or a supported
    convolution's ``weight`` (dimension 1: input features or channels) or a
    ``nn.MultiheadAttention``'s packed ``in_proj_weight``; None for any other consumer."""
    if type(module) is nn.Linear and module.in_features == width:
        return f"{name}.weight"
    if is_supported_block(module) and type(module) is not nn.Linear:
        return f"{name}.weight" if module.in_channels == width else None
    if isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
        if module.in_proj_weight.shape[1] == width:
            return f"{name}.in_proj_weight"
    return None


class NormScaleDetector:
    """Per-feature rescaling of a norm's scale against its consumers (curved gauge).

    ``LN(x)_j = γ_j n_j(x) + β_j`` (RMSNorm: no ``β``) is read only through column ``j`` of the
    consumers' weights, so ``(γ_j, β_j, W_c[:, j]) → (cγ_j, cβ_j, W_c[:, j]/c)`` for every consumer
    ``c`` at once leaves the model unchanged: tangent ``(γ_j, β_j, −W_c[:, j] ∀c)`` (spec §6.5,
    LayerNorm/RMSNorm scale). The same holds per channel for an affine BatchNorm or GroupNorm
    (``γ_c x̂_c + β_c``) read by convolutions (``W_c[:, j]``: input channel ``j``). A LayerNorm or
    RMSNorm must normalise one trailing dimension with a scale, and the norm's graph consumers
    (`ModelGraph`; through Identity/Dropout and constant factors only, `graph_scales_through`:
    ``W_c (m ⊙ LN(x))`` is as linear in ``γ_j`` as ``W_c LN(x)``) must be Linears, supported
    convolutions or packed ``nn.MultiheadAttention`` in-projections; the symmetry is certified by
    evaluation (`certify`: a norm output that also enters a residual sum, as in post-norm blocks,
    an attention reading other keys, or a scale entering other than as a factor, as Gemma's
    ``1 + w``, is no symmetry). RMSNorms defined outside torch are matched by name
    (`is_named_rmsnorm`). Candidate ``"norm-scale"``.
    """

    name = "norm-scale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the feature tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """``nn.LayerNorm``, ``nn.RMSNorm``, RMSNorms defined outside torch
        (`is_named_rmsnorm`, e.g. Hugging Face's ``LlamaRMSNorm``) and affine BatchNorm/GroupNorm
        (`_channel_affine_width`); proposes only under the conditions above."""
        return (
            isinstance(module, nn.LayerNorm | nn.RMSNorm)
            or is_named_rmsnorm(module)
            or _channel_affine_width(module) is not None
        )

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the norm and all its consumers, or nothing."""
        width = _norm_width(module)
        consumers = ctx.graph.consumers.get(name, ())
        if width is None or not consumers:
            return []
        weights = []
        for c in consumers:
            if not graph_scales_through(ctx.graph, name, c):
                return []
            key = _consumer_weight(ctx.model.get_submodule(c), c, width)
            if key is None:
                return []
            weights.append(key)
        orbit = UnitRescale(tuple(producer_keys(name, module)), tuple(weights), 1)
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
    (spec §6.5, SwiGLU rescaling). The layout comes from the child names (`glu_layout`, or
    `fused_glu_layout` for one fused gate-and-up projection, Phi-3's ``gate_up_proj``, whose up
    rows ``h + j`` are the units: `UnitRescale` with ``offset = h``); the symmetry is certified by
    evaluation (`certify`). The gate is rescaled only with a positively homogeneous ``φ``, which
    the names do not reveal, so it is not proposed. Candidate ``"glu-rescale"``.
    """

    name = "glu-rescale"

    def __init__(self, *, max_units: int | None = None) -> None:
        """``max_units``: cap on the unit tangents kept as generators (an int ``≥ 1``;
        ``None``: the ``MAX_GENERATOR_ENTRIES`` budget)."""
        self.max_units = _check_max_units(max_units)

    def applies_to(self, module: nn.Module) -> bool:
        """Modules with a recognised gate/up/down layout (`glu_layout`, `fused_glu_layout`)."""
        return glu_layout(module) is not None or fused_glu_layout(module) is not None

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        """One certified curved-gauge candidate for the block, or nothing."""
        separate = glu_layout(module)
        if separate is not None:
            (_, up, down), offset = separate, 0
        else:
            up, down = fused_glu_layout(module)
            offset = module.get_submodule(down).in_features
        up_name, down_name = qualified(name, up), qualified(name, down)
        producers = producer_keys(up_name, module.get_submodule(up))
        orbit = UnitRescale(tuple(producers), (qualified(down_name, "weight"),), 1, offset=offset)
        return rescale_candidate(
            ctx,
            orbit,
            layers=(up_name, down_name),
            detector="glu-rescale",
            max_units=self.max_units,
        )
