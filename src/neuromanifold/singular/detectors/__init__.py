"""Pluggable detectors naming candidate dead directions per block.

A detector is one class (`Detector` protocol: ``name``, ``applies_to(module)``,
``propose(name, module, ctx)``) returning `Candidate` directions with a provenance label; see
`neuromanifold.singular.detectors.base` for how to add one and `default_registry` for the
built-ins (K-FAC/KFC linear and conv with the A–G duality join, LayerNorm kernel, RMSNorm,
attention QK rotation (and scales) and VO GL(d_h), the attention key bias, the value bias against
the output bias, a LayerNorm's shift against its consumers' biases, joint query/key dead
pairs, query/key-norm rescale, CE
logit shift, ReLU rescale, LayerNorm/RMSNorm scale, gated feed-forward dead dimensions and
up-projection rescale, unseen embedding rows).
"""

from neuromanifold.singular.detectors.attention import (
    AttentionDetector,
    QKRotation,
    VORescale,
    attention_layout,
)
from neuromanifold.singular.detectors.base import (
    Candidate,
    DetectionContext,
    Detector,
    parameter_aliases,
)
from neuromanifold.singular.detectors.embedding import EmbeddingDetector
from neuromanifold.singular.detectors.embedding_mean import EmbeddingMeanDetector
from neuromanifold.singular.detectors.gauges import LogitShiftDetector
from neuromanifold.singular.detectors.glu import GLUDetector, fused_glu_layout, glu_layout
from neuromanifold.singular.detectors.graph import ModelGraph, trace_graph
from neuromanifold.singular.detectors.grouped_conv import GroupedConvDetector
from neuromanifold.singular.detectors.groupnorm_shift import GroupNormShiftDetector
from neuromanifold.singular.detectors.key_bias import KeyBiasDetector
from neuromanifold.singular.detectors.layer_scale import LayerScaleDetector
from neuromanifold.singular.detectors.layernorm import (
    LayerNormDetector,
    LayerNormReachDetector,
    RMSNormDetector,
    layernorm_kernel,
)
from neuromanifold.singular.detectors.linear import LinearDetector, block_spectrum
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.near_kernel import near_kernel
from neuromanifold.singular.detectors.norm_shift import NormShiftDetector
from neuromanifold.singular.detectors.qk_norm import QKNormDetector, QKNormRescale
from neuromanifold.singular.detectors.qk_pair import QKPairDetector
from neuromanifold.singular.detectors.registry import DetectorRegistry, default_registry
from neuromanifold.singular.detectors.rescale import UnitRescale
from neuromanifold.singular.detectors.rescale_detectors import (
    GLURescaleDetector,
    NormScaleDetector,
    ReLURescaleDetector,
)
from neuromanifold.singular.detectors.value_bias import ValueBiasDetector

__all__ = [
    "AttentionDetector",
    "BlockSpectrum",
    "Candidate",
    "DetectionContext",
    "Detector",
    "DetectorRegistry",
    "EmbeddingDetector",
    "EmbeddingMeanDetector",
    "GLUDetector",
    "GLURescaleDetector",
    "GroupNormShiftDetector",
    "GroupedConvDetector",
    "KeyBiasDetector",
    "LayerNormDetector",
    "LayerNormReachDetector",
    "LayerScaleDetector",
    "LinearDetector",
    "LogitShiftDetector",
    "ModelGraph",
    "NormScaleDetector",
    "NormShiftDetector",
    "QKNormDetector",
    "QKNormRescale",
    "QKPairDetector",
    "QKRotation",
    "RMSNormDetector",
    "ReLURescaleDetector",
    "UnitRescale",
    "VORescale",
    "ValueBiasDetector",
    "attention_layout",
    "block_spectrum",
    "default_registry",
    "fused_glu_layout",
    "glu_layout",
    "layernorm_kernel",
    "near_kernel",
    "parameter_aliases",
    "trace_graph",
]
