"""The detector registry: which detectors run, and which module types are covered.

`default_registry` holds, in priority order (closed forms first, so that a K-FAC candidate
duplicating a closed-form one is dropped in favour of the closed form): LayerNorm (graph
consumers, then consumers reached through token selection/pooling by the factor test), RMSNorm,
attention, attention key bias, attention value bias against the output bias, LayerNorm shift
against its consumers' biases, query/key-norm rescale, CE logit shift, BatchNorm shift and
rescale, ReLU rescale, norm scale, gated feed-forward dead dimension, gated up-projection
rescale, layer scale, embedding (unseen rows, mean shift), linear/conv K-FAC, attention
query/key pairs (``qk-pair``, read from the projections' K-FAC factors), grouped-conv K-FAC (per
group).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch import nn

from neuromanifold.singular.detectors.attention import AttentionDetector
from neuromanifold.singular.detectors.base import Detector
from neuromanifold.singular.detectors.batchnorm_scale import BatchNormScaleDetector
from neuromanifold.singular.detectors.batchnorm_shift import BatchNormShiftDetector
from neuromanifold.singular.detectors.embedding import EmbeddingDetector
from neuromanifold.singular.detectors.embedding_mean import EmbeddingMeanDetector
from neuromanifold.singular.detectors.gauges import LogitShiftDetector
from neuromanifold.singular.detectors.glu import GLUDetector
from neuromanifold.singular.detectors.grouped_conv import GroupedConvDetector
from neuromanifold.singular.detectors.groupnorm_shift import GroupNormShiftDetector
from neuromanifold.singular.detectors.key_bias import KeyBiasDetector
from neuromanifold.singular.detectors.layer_scale import LayerScaleDetector
from neuromanifold.singular.detectors.layernorm import (
    LayerNormDetector,
    LayerNormReachDetector,
    RMSNormDetector,
)
from neuromanifold.singular.detectors.linear import LinearDetector
from neuromanifold.singular.detectors.norm_shift import NormShiftDetector
from neuromanifold.singular.detectors.qk_norm import QKNormDetector
from neuromanifold.singular.detectors.qk_pair import QKPairDetector
from neuromanifold.singular.detectors.rescale_detectors import (
    GLURescaleDetector,
    NormScaleDetector,
    ReLURescaleDetector,
)
from neuromanifold.singular.detectors.value_bias import ValueBiasDetector

__all__ = ["DetectorRegistry", "default_registry"]


class DetectorRegistry:
    """An ordered collection of detectors (`Detector` protocol)."""

    def __init__(self, detectors: Iterable[Detector] = ()) -> None:
        self._detectors: list[Detector] = []
        for d in detectors:
            self.register(d)

    def register(self, detector: Detector) -> None:
        """Append ``detector``; TypeError if it does not follow the protocol."""
        if not isinstance(detector, Detector):
            raise TypeError(
                f"detector must have name, applies_to(module) and propose(name, module, ctx); "
                f"got {type(detector).__name__}"
            )
        self._detectors.append(detector)

    def __iter__(self) -> Iterator[Detector]:
        return iter(self._detectors)

    def __len__(self) -> int:
        return len(self._detectors)

    def for_module(self, module: nn.Module) -> list[Detector]:
        """Detectors that handle ``module``."""
        return [d for d in self._detectors if d.applies_to(module)]

    def covers(self, module: nn.Module) -> bool:
        """Whether any detector handles ``module``."""
        return any(d.applies_to(module) for d in self._detectors)


def default_registry() -> DetectorRegistry:
    """All built-in detectors in priority order (module docstring)."""
    return DetectorRegistry(
        [
            LayerNormDetector(),
            LayerNormReachDetector(),
            RMSNormDetector(),
            AttentionDetector(),
            KeyBiasDetector(),
            ValueBiasDetector(),
            NormShiftDetector(),
            QKNormDetector(),
            LogitShiftDetector(),
            BatchNormShiftDetector(),
            BatchNormScaleDetector(),
            GroupNormShiftDetector(),
            ReLURescaleDetector(),
            NormScaleDetector(),
            GLUDetector(),
            GLURescaleDetector(),
            LayerScaleDetector(),
            EmbeddingDetector(),
            EmbeddingMeanDetector(),
            LinearDetector(),
            QKPairDetector(),
            GroupedConvDetector(),
        ]
    )
