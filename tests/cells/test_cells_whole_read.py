"""The whole-model read (detectors + order read) finds each cell's answer on its own.

For the cells below, ``singular.read.read`` — given only the model, the probe inputs and the
family, not the cell's direction — reports a direction of the cell's expected class (and order).
Cells left out: the Gaussian location (no module to detect); linear regression and RMSNorm (nothing
dead: no candidate is the right answer); the offset node death, a width-one unit whose weights sit
at 1e-3 instead of 0: its 1×1 factors have nothing to be small relative to, so no near-kernel rule
can call the unit dead (a known limit of reading factors of width one; the cell's own probe
direction reads k = 2 after the snap, ``tests/cells/test_cells_read.py``). The residual-path
cells are also read in ``tests/singular/test_skip_links.py``, which checks the chain's layers and
k̂ as well.
"""

from __future__ import annotations

import pytest

from neuromanifold.cells import get_cell
from neuromanifold.singular.read import read

NAMED_BY_DETECTORS = [
    "node_death_relu",
    "node_death_gelu",
    "node_death_tanh",
    "node_death_silu",
    "node_death_relu2",
    "swiglu_dead_dimension",
    "scalar_chain_L2",
    "scalar_chain_L3",
    "scalar_chain_L4",
    "scalar_chain_L5",
    "scalar_chain_L6",
    "relu_chain_L3",
    "relu_chain_L4",
    "matrix_chain_L2",
    "matrix_chain_L2_rotated",
    "matrix_chain_L3",
    "matrix_chain_L3_rotated",
    "matrix_chain_L4",
    "matrix_chain_L4_rotated",
    "matrix_chain_L5",
    "matrix_chain_L5_rotated",
    "matrix_chain_L6",
    "matrix_chain_L6_rotated",
    "mlp_node_death_gelu",
    "mlp_node_death_gelu_rotated",
    "layernorm_kernel",
    "ce_logit_shift",
    "relu_rescale",
    "qk_rotation",
    "residual_path_skip",
    "residual_path_plain",
    "conv1d_node_death",
    "conv2d_node_death",
    "conv1d_chain_L3",
    "conv1d_chain_L3_rotated",
    "conv2d_chain_L2_rotated",
]


@pytest.mark.parametrize("name", NAMED_BY_DETECTORS, ids=NAMED_BY_DETECTORS)
def test_whole_model_read_finds_the_cell_answer(name: str) -> None:
    cell = get_cell(name)
    reading = read(cell.model, cell.data, cell.family, progress=False, per_layer=False)
    found = [
        (d.klass, d.k)
        for d in reading.directions
        if d.klass == cell.expected_class and (cell.expected_k is None or d.k == cell.expected_k)
    ]
    assert found, f"{name}: read found {[(d.klass, d.k) for d in reading.directions]}"
    assert not reading.not_covered
    # A gauge cell must never surface as a genuine singularity.
    if cell.expected_k is None:
        assert all(d.klass != "genuine_singularity" for d in reading.directions)
