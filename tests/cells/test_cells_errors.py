"""Bad input to the cell registry, the `Cell` container and the constructors fails clearly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from neuromanifold.cells import (
    CELLS,
    conv_chain,
    conv_node_death,
    gaussian_location,
    get_cell,
    matrix_chain,
    mlp_node_death,
    node_death,
    node_death_offset,
    qk_rotation,
    relu_chain,
    relu_rescale,
    residual_path,
    scalar_chain,
    swiglu_dead_dimension,
)
from neuromanifold.cells._cell import load, normalise, symmetric_normal
from neuromanifold.cells.planted import (
    PlantedSelfAttention,
    planted_deep_linear,
    planted_mlp,
    planted_transformer,
)


def test_get_cell_unknown_name_lists_the_valid_names() -> None:
    with pytest.raises(
        ValueError, match=r"unknown cell 'nope'; expected one of: .*node_death_relu"
    ):
        get_cell("nope")


def test_get_cell_passes_options() -> None:
    assert get_cell("linear_regression", n=10).data.shape == (10, 4)
    assert set(CELLS) >= {"node_death_relu", "qk_rotation", "layernorm_kernel"}


@pytest.fixture
def cell():
    return node_death(activation="tanh")


def test_cell_rejects_unknown_class(cell) -> None:
    with pytest.raises(ValueError, match=r"expected_class='bogus' is not one of"):
        dataclasses.replace(cell, expected_class="bogus")


def test_cell_rejects_order_for_a_gauge(cell) -> None:
    with pytest.raises(ValueError, match=r"expected_k=2 for gauge class 'flat_gauge'"):
        dataclasses.replace(cell, expected_class="flat_gauge")


def test_cell_requires_an_order_otherwise(cell) -> None:
    with pytest.raises(ValueError, match=r"expected_k=None for class 'genuine_singularity'"):
        dataclasses.replace(cell, expected_k=None)


def test_cell_rejects_float32_data(cell) -> None:
    with pytest.raises(TypeError, match=r"data must be a float64 Tensor, got .*float32"):
        dataclasses.replace(cell, data=cell.data.float())


def test_cell_rejects_float32_params(cell) -> None:
    bad = {k: v.float() for k, v in cell.params.items()}
    with pytest.raises(TypeError, match=r"params\['0.weight'\] has dtype torch.float32"):
        dataclasses.replace(cell, params=bad)


def test_cell_rejects_direction_with_unknown_key(cell) -> None:
    with pytest.raises(ValueError, match=r"direction has key 'w' that is not a parameter"):
        dataclasses.replace(cell, direction={"w": torch.ones(1, dtype=torch.float64)})


def test_cell_rejects_direction_with_wrong_shape(cell) -> None:
    with pytest.raises(ValueError, match=r"direction\['0.weight'\] has shape \(2,\)"):
        dataclasses.replace(
            cell, direction={"0.weight": torch.tensor([0.6, 0.8], dtype=torch.float64)}
        )


def test_cell_rejects_non_unit_direction(cell) -> None:
    with pytest.raises(ValueError, match=r"direction has norm 2.0; expected a unit vector"):
        dataclasses.replace(
            cell, direction={"0.weight": torch.full((1, 1), 2.0, dtype=torch.float64)}
        )


def test_cell_rejects_empty_direction(cell) -> None:
    with pytest.raises(ValueError, match=r"direction is empty"):
        dataclasses.replace(cell, direction={})


def test_cell_rejects_float32_direction(cell) -> None:
    with pytest.raises(TypeError, match=r"direction\['0.weight'\] has dtype torch.float32"):
        dataclasses.replace(cell, direction={"0.weight": torch.ones(1, 1)})


def test_cell_checks_generators_and_components(cell) -> None:
    bad = {"0.weight": torch.full((1, 1), 0.5, dtype=torch.float64)}
    with pytest.raises(ValueError, match=r"gauge_generators\[0\] has norm 0.5"):
        dataclasses.replace(cell, gauge_generators=(bad,))
    with pytest.raises(ValueError, match=r"components\['x'\] has norm 0.5"):
        dataclasses.replace(cell, components={"x": bad})


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda: gaussian_location(k=0), r"k=0; expected an integer order >= 1"),
        (lambda: node_death(activation="sigmoid"), r"activation='sigmoid'; expected one of"),
        (lambda: node_death_offset(offset=0.0), r"offset=0.0; expected a float in \(0, 1\)"),
        (lambda: scalar_chain(depth=1), r"depth=1; expected an integer >= 2"),
        (lambda: relu_chain(depth=1), r"depth=1; expected an integer >= 2"),
        (lambda: matrix_chain(depth=3, width=1), r"width=1; expected at least 2"),
        (lambda: matrix_chain(depth=3, basis="skewed"), r"basis='skewed'; expected 'canonical'"),
        (lambda: mlp_node_death(basis="skewed"), r"basis='skewed'; expected 'canonical'"),
        (lambda: mlp_node_death(width=1), r"width=1; expected at least 2"),
        (
            lambda: swiglu_dead_dimension(basis="rotated"),
            r"basis='rotated'; expected 'canonical' or 'permuted'",
        ),
        (lambda: swiglu_dead_dimension(d=1), r"d=1; expected d >= 2"),
        (lambda: relu_rescale(unit=9), r"unit=9; expected an index in \[0, 4\)"),
        (
            lambda: relu_rescale(basis="rotated"),
            r"basis='rotated'; expected 'canonical' or 'permuted'",
        ),
        (lambda: qk_rotation(basis="skewed"), r"basis='skewed'; expected 'canonical'"),
        (lambda: qk_rotation(d_head=1), r"d_head=1; expected >= 2"),
        # s26 audit CELLS #5: one token makes every QK direction flat, not a curved gauge
        (lambda: qk_rotation(tokens=1), r"tokens=1; expected >= 2 \(with one token"),
        (lambda: residual_path(blocks=0), r"blocks=0; expected an integer >= 1"),
        (lambda: conv_node_death(dim=3), r"dim=3; expected 1 \(Conv1d\) or 2 \(Conv2d\)"),
        (lambda: conv_chain(depth=1), r"depth=1; expected an integer >= 2"),
    ],
)
def test_constructor_errors(make, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make()


def test_seed_must_be_an_int() -> None:
    with pytest.raises(TypeError, match=r"seed must be an int, got float"):
        node_death(seed=1.5)


def test_helper_errors() -> None:
    with pytest.raises(ValueError, match=r"n=3 samples; expected an even number >= 2"):
        symmetric_normal(3, 1, gen=torch.Generator())
    with pytest.raises(ValueError, match=r"cannot normalise a direction of norm 0.0"):
        normalise({"w": torch.zeros(2, dtype=torch.float64)})
    lin = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match=r"missing \['bias'\], unknown \[\]"):
        load(lin, {"weight": torch.zeros(1, 2)})
    with pytest.raises(ValueError, match=r"params\['bias'\] has shape \(2,\); expected \(1,\)"):
        load(lin, {"weight": torch.zeros(1, 2), "bias": torch.zeros(2)})


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (
            lambda: planted_mlp(activation="sigmoid"),
            r"activation must be one of \['gelu', 'relu', 'relu2', 'tanh'\]; got 'sigmoid'",
        ),
        (lambda: planted_deep_linear(depth=1), r"depth must be at least 2; got 1"),
        (lambda: PlantedSelfAttention(6, 4), r"d_model 6 is not a multiple of n_heads 4"),
        (
            lambda: planted_transformer(norm="batch"),
            r"norm must be 'layernorm' or 'rmsnorm'; got 'batch'",
        ),
    ],
)
def test_planted_net_errors(make, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make()
