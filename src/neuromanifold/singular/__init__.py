"""Dead directions of trained networks (spec: ``dead_directions.md``).

The order read: output families, the directional Fisher ``uᵀF(θ)u`` by forward mode, sweeps along
``θ0 + t·u``, the rate fit ``F_u ∝ t^{2(k−1)}``, classification and `read_direction`.
"""

from neuromanifold.singular.classify import (
    GAUGE_OVERLAP_MIN,
    LIVE_REL,
    DirectionClass,
    classify,
    classify_with_reason,
    gauge_overlap,
)
from neuromanifold.singular.direction import (
    VISIBILITY_FACTOR,
    DirectionReading,
    read_direction,
    snap_base_point,
)
from neuromanifold.singular.family import Categorical, Gaussian, OutputFamily, family_from_dict
from neuromanifold.singular.fisher import directional_fisher, directional_fisher_reference
from neuromanifold.singular.rate import RateFit, fit_rate, local_slopes
from neuromanifold.singular.sweep import Sweep, default_grid, floor_from_scale, sweep

__all__ = [  # noqa: RUF022 (grouped by concept, sorted within groups)
    # output families
    "Categorical",
    "Gaussian",
    "OutputFamily",
    "family_from_dict",
    # directional Fisher (forward mode) and its oracle
    "directional_fisher",
    "directional_fisher_reference",
    # sweeps, grid, floor
    "Sweep",
    "default_grid",
    "floor_from_scale",
    "sweep",
    # rate fit
    "RateFit",
    "fit_rate",
    "local_slopes",
    # classification
    "GAUGE_OVERLAP_MIN",
    "LIVE_REL",
    "DirectionClass",
    "classify",
    "classify_with_reason",
    "gauge_overlap",
    # the read of one direction
    "VISIBILITY_FACTOR",
    "DirectionReading",
    "read_direction",
    "snap_base_point",
]
