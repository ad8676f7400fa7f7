"""Constructed networks with known answers: the test oracle and the demo.

Every cell of the spec's test table (``dead_directions.md`` §9.1) is a named constructor returning
a `Cell`: model, float64 base point, the unit direction a detector would name, seeded probe inputs,
output family, and the order k or class the directional-Fisher read must return.

* Registry: `CELLS`, `cell_names`, `get_cell`, `all_cells`.
* Anchors: `gaussian_location` (μ = θ^k), `linear_regression` (live).
* Node deaths: `node_death` (ReLU, GELU, tanh, SiLU: k = 2; squared ReLU: k = 3),
  `node_death_offset` (snap), `swiglu_dead_dimension` (k = 3), `mlp_node_death` (live mixing).
* Depth: `scalar_chain`, `relu_chain`, `matrix_chain` (dead path, canonical/rotated/permuted
  hidden bases).
* Normalisation: `layernorm_kernel` (flat gauge), `rmsnorm_no_kernel` (live).
* Gauges: `ce_logit_shift` (flat), `relu_rescale` and `qk_rotation` (curved).
* Residual: `residual_path` (order = shortest weighted path). Convolution: `conv_node_death`,
  `conv_chain`.
* Planted networks for the whole-model read: `planted_mlp`, `planted_deep_linear`,
  `planted_conv`, `planted_conv_chain`, `planted_transformer`, `planted_embedding` (`PlantedNet`).
* Judging: `read_cell`, `read_cells`, `check_reading`, `CellResult`, `K_HAT_ATOL`, `R2_MIN`;
  plotting: `plot_reading`.
"""

from neuromanifold.cells._cell import (
    CLASS_CURVED_GAUGE,
    CLASS_FLAT_GAUGE,
    CLASS_GENUINE,
    CLASS_LIVE,
    Cell,
)
from neuromanifold.cells.anchors import gaussian_location, linear_regression
from neuromanifold.cells.attention import qk_rotation
from neuromanifold.cells.conv import conv_chain, conv_node_death
from neuromanifold.cells.deep_linear import chain_product, matrix_chain, scalar_chain
from neuromanifold.cells.dense import (
    mlp_node_death,
    node_death,
    node_death_offset,
    relu_chain,
    swiglu_dead_dimension,
)
from neuromanifold.cells.gauges import ce_logit_shift, relu_rescale
from neuromanifold.cells.norms import layernorm_kernel, layernorm_kernel_vector, rmsnorm_no_kernel
from neuromanifold.cells.planted import (
    PlantedNet,
    PlantedSelfAttention,
    planted_conv,
    planted_conv_chain,
    planted_deep_linear,
    planted_embedding,
    planted_mlp,
    planted_transformer,
)
from neuromanifold.cells.plot import plot_reading
from neuromanifold.cells.registry import CELLS, all_cells, cell_names, get_cell
from neuromanifold.cells.residual import residual_path
from neuromanifold.cells.table import (
    K_HAT_ATOL,
    R2_MIN,
    CellResult,
    check_reading,
    read_cell,
    read_cells,
)

__all__ = [
    "CELLS",
    "CLASS_CURVED_GAUGE",
    "CLASS_FLAT_GAUGE",
    "CLASS_GENUINE",
    "CLASS_LIVE",
    "K_HAT_ATOL",
    "R2_MIN",
    "Cell",
    "CellResult",
    "PlantedNet",
    "PlantedSelfAttention",
    "all_cells",
    "ce_logit_shift",
    "cell_names",
    "chain_product",
    "check_reading",
    "conv_chain",
    "conv_node_death",
    "gaussian_location",
    "get_cell",
    "layernorm_kernel",
    "layernorm_kernel_vector",
    "linear_regression",
    "matrix_chain",
    "mlp_node_death",
    "node_death",
    "node_death_offset",
    "planted_conv",
    "planted_conv_chain",
    "planted_deep_linear",
    "planted_embedding",
    "planted_mlp",
    "planted_transformer",
    "plot_reading",
    "qk_rotation",
    "read_cell",
    "read_cells",
    "relu_chain",
    "relu_rescale",
    "residual_path",
    "rmsnorm_no_kernel",
    "scalar_chain",
    "swiglu_dead_dimension",
]
