"""neuromanifold: the geometry of neural-network parametrizations.

Two halves share one vocabulary (Jacobian, NTK = J Jᵀ, Fisher = Jᵀ H J, invariants):

* :mod:`neuromanifold.linear` — linear (convolutional and fully connected) networks as
  polynomial maps: end-to-end filter, NTK in closed form, conserved invariants, fibers, and
  whether gradient flow is a Riemannian gradient flow on function space.
* :mod:`neuromanifold.singular` — dead directions of a trained network at one frozen
  checkpoint: detectors, the directional-Fisher order read, classification, Watanabe's triple.

This module re-exports the front door of each half; everything else lives in the subpackages
(:mod:`~neuromanifold.cells` constructed networks, :mod:`~neuromanifold.zoo` models and training,
:mod:`~neuromanifold.report` JSON/Markdown/PNG views, :mod:`~neuromanifold.io` loading).
"""

from neuromanifold.linear import (
    FC,
    LCN,
    delta,
    is_smooth_point,
    lcn_fiber,
    mu,
    ntk,
    ntk_from_function,
    run_survey,
)
from neuromanifold.singular import (
    Categorical,
    DirectionClass,
    Gaussian,
    Reading,
    assemble_from_reading,
    lambda_dir,
    read_direction,
    sgld_llc,
)
from neuromanifold.singular.nu import nu
from neuromanifold.singular.read import read

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 (grouped: version, linear networks, dead directions)
    "__version__",
    # linear networks as polynomial maps
    "FC",
    "LCN",
    "delta",
    "is_smooth_point",
    "lcn_fiber",
    "mu",
    "ntk",
    "ntk_from_function",
    "run_survey",
    # dead directions at a frozen checkpoint
    "Categorical",
    "DirectionClass",
    "Gaussian",
    "Reading",
    "read",
    "read_direction",
    # Watanabe's triple and the SGLD baseline
    "assemble_from_reading",
    "lambda_dir",
    "nu",
    "sgld_llc",
]
