"""Dead directions of trained networks (spec: ``dead_directions.md``).

* The order read: output families, the directional Fisher ``uᵀF(θ)u`` by forward mode, sweeps
  along ``θ0 + t·u``, the rate fit ``F_u ∝ t^{2(k−1)}``, classification and `read_direction`.
* The whole-model read: K-FAC/KFC factors (`kfac_factors`), detectors
  (`neuromanifold.singular.detectors`), `Reading`; the function itself is
  ``neuromanifold.read`` (module `neuromanifold.singular.read`), data-parallel via `read_sharded`,
  memory-budgeted via `plan_memory`; the per-coordinate baseline `coordinate_scan`.
* Watanabe's triple (front door `neuromanifold.singular.watanabe`): ``λ_dir = 1/(2k)``, ``ν(k)``,
  closed forms, assembly of ``(λ, m)`` from typed loci; the SGLD local-learning-coefficient
  baseline `sgld_llc`; realized ``ν`` from posterior samples.
"""

from neuromanifold.singular.adapt import rewrite_as_read
from neuromanifold.singular.agreement import reading_differences
from neuromanifold.singular.assembly import Assembly, Locus, assemble, assemble_from_reading
from neuromanifold.singular.classify import (
    GAUGE_OVERLAP_MIN,
    LIVE_REL,
    DirectionClass,
    classify,
    classify_with_reason,
    gauge_overlap,
)
from neuromanifold.singular.closed_forms import (
    ClosedForm,
    deep_linear,
    normal_crossing,
    one_hidden_node,
    rrr,
)
from neuromanifold.singular.coordinate_scan import CoordinateScan, coordinate_scan
from neuromanifold.singular.critical_check import critical_check, critical_check_reference
from neuromanifold.singular.direction import (
    VISIBILITY_FACTOR,
    DirectionReading,
    read_direction,
    snap_base_point,
)
from neuromanifold.singular.distributed import read_sharded
from neuromanifold.singular.factors import (
    BlockFactors,
    Factors,
    block_fisher_reference,
    kfac_factors,
)
from neuromanifold.singular.family import Categorical, Gaussian, OutputFamily, family_from_dict
from neuromanifold.singular.fisher import directional_fisher, directional_fisher_reference
from neuromanifold.singular.llc_convergence import (
    calibrate_step,
    running_llc,
    settling_point,
)
from neuromanifold.singular.memory import MemoryPlan, plan_memory
from neuromanifold.singular.minimum_check import loss_along, loss_along_reference
from neuromanifold.singular.nu import lambda_dir, nu_quadrature
from neuromanifold.singular.rate import RateFit, fit_rate, local_slopes
from neuromanifold.singular.reading import DirectionRecord, NotCovered, Reading
from neuromanifold.singular.realized_nu import RealizedNu, realized_nu
from neuromanifold.singular.sgld import (
    SGLDConfig,
    SGLDResult,
    sgld_llc,
)
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
    # is θ0 a critical point of the labelled probe loss, a minimum along a direction; oracles
    "critical_check",
    "critical_check_reference",
    "loss_along",
    "loss_along_reference",
    # K-FAC / KFC factors and the whole-model read's results
    "BlockFactors",
    "Factors",
    "block_fisher_reference",
    "kfac_factors",
    "rewrite_as_read",
    "DirectionRecord",
    "NotCovered",
    "Reading",
    "read_sharded",
    "reading_differences",
    "MemoryPlan",
    "plan_memory",
    "CoordinateScan",
    "coordinate_scan",
    # Watanabe's triple: per-direction λ and ν, closed forms, assembly
    "lambda_dir",
    "nu_quadrature",
    "ClosedForm",
    "deep_linear",
    "normal_crossing",
    "one_hidden_node",
    "rrr",
    "Assembly",
    "Locus",
    "assemble",
    "assemble_from_reading",
    "RealizedNu",
    "realized_nu",
    # SGLD local learning coefficient (the baseline)
    "SGLDConfig",
    "SGLDResult",
    "calibrate_step",
    "running_llc",
    "settling_point",
    "sgld_llc",
]
