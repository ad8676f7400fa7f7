"""Orders of a genuine chain record that its read order does not determine (s30 trial TRIPLE F1).

The Fisher along a dead chain of n tensors measures only the sum k = Σ k_i of the components' orders
(spec §5). Orders are listed in the record's layer order, input side first. For k ≤ n + 1 the split
is forced ((1, …, 1) or (2, 1, …, 1): a squared-ReLU node death a·relu(b·)² is (2, 1) for (b, a));
from k = n + 2 on it is not: Lin–Sq–Lin–Sq–Lin (K ∝ c²b⁴a⁸) reads k = 7 over 3 tensors, truly (4, 2,
1), and Lin–Tanh–Lin–Sq–Lin (K ∝ c²b⁴a⁴) reads k = 5, truly (2, 2, 1). The default split (k − n + 1,
1, …, 1) then gives a lower bound on λ_block and possibly too low an m_block; the assembly says so,
and ``component_orders`` gives the architecture's orders. The closed form of K = Π x_i^{2k_i}
(`normal_crossing`) is the oracle.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from neuromanifold.singular.assembly import assemble_from_reading, loci_from_reading
from neuromanifold.singular.closed_forms import normal_crossing

SPLIT_NOTE = "fit the read (the Fisher along a chain measures their sum only)"


def _chain(k: int, n: int) -> list[dict]:
    layers = [f"l{i}" for i in range(n)]
    return [{"class": "genuine_singularity", "k": k, "layer": layers[0], "layers": layers}]


@pytest.mark.parametrize(
    ("k", "n", "truth"),
    [(7, 3, (4, 2, 1)), (5, 3, (2, 2, 1)), (4, 2, (2, 2)), (6, 4, (2, 2, 1, 1))],
)
def test_an_undetermined_split_is_noted_and_the_given_orders_give_the_closed_form(
    k: int, n: int, truth: tuple[int, ...]
) -> None:
    default = assemble_from_reading(_chain(k, n))
    assert (default.lam, default.m) == (Fraction(1, 2 * (k - n + 1)), 1)
    (note,) = [x for x in default.notes if SPLIT_NOTE in x]
    # the stated range: the default's λ is the least, the most even split's the most
    assert f"λ_block = {Fraction(1, 2 * (k - n + 1))} is a lower bound" in note
    assert f"the most even split gives {Fraction(1, 2 * -(-k // n))}" in note
    given = assemble_from_reading(_chain(k, n), component_orders={0: truth})
    closed = normal_crossing(truth)
    assert (given.lam, given.m) == (closed.lam, closed.m)
    assert default.lam <= given.lam <= Fraction(1, 2 * -(-k // n))
    assert not any(SPLIT_NOTE in x for x in given.notes)
    assert given.dominant_order == k  # ν and the dominant order stay those of the read order


@pytest.mark.parametrize(("k", "n"), [(3, 3), (4, 3), (2, 2), (3, 2), (2, 3), (5, 1)])
def test_a_forced_split_has_no_note(k: int, n: int) -> None:
    _, notes = loci_from_reading({"directions": _chain(k, n)})
    assert not any(SPLIT_NOTE in x for x in notes)


@pytest.mark.parametrize(
    ("orders", "message"),
    [
        ((1, 2), r"component_orders\[0\] must have 3 entries .* summing to its read order k=7"),
        ((1, 2, 3), r"component_orders\[0\] must have 3 entries .* summing to its read order k=7"),
        ((0, 3, 4), r"component_orders\[0\] must be integers >= 1"),
        ((1, 2.0, 4), r"component_orders\[0\] must be integers >= 1"),
        ((True, 2, 4), r"component_orders\[0\] must be integers >= 1"),
    ],
)
def test_bad_component_orders_are_refused(orders: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        assemble_from_reading(_chain(7, 3), component_orders={0: orders})


@pytest.mark.parametrize("key", ["0", 1, True])
def test_component_orders_keys_must_name_a_genuine_record(key: object) -> None:
    with pytest.raises(ValueError, match=r"component_orders key .*: expected the int index"):
        assemble_from_reading(_chain(7, 3), component_orders={key: (4, 2, 1)})


def test_component_orders_accept_numpy_integers() -> None:
    (key,) = np.flatnonzero([True])
    a = assemble_from_reading(_chain(7, 3), component_orders={key: np.array([4, 2, 1])})
    assert (a.lam, a.m) == (Fraction(1, 8), 1)


@pytest.mark.parametrize(("k", "n"), [(3, 2), (4, 3), (7, 3), (2, 2)])
def test_the_default_split_puts_the_rest_on_the_first_tensor(k: int, n: int) -> None:
    """Layer order, input side first: (k − n + 1, 1, …, 1), as `component_dims` are given."""
    (locus,), _ = loci_from_reading({"directions": _chain(k, n)})
    assert locus.orders == (k - n + 1,) + (1,) * (n - 1)


class _SquaredReLU(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) ** 2


def test_a_squared_relu_dead_unit_with_dims_in_layer_order_gives_its_closed_form() -> None:
    """s31 trial DISK #1: Linear(3, 5) → relu² → Linear(5, 2) with unit 0 dead (its 3 weights,
    its bias and its 2 outgoing weights zero) reads k = 3 over layers ["0", "2"]; K ≍ ‖a‖²‖b‖⁴
    for b ∈ R⁴ (weights and bias in) and a ∈ R² (out), components (order 2, dim 4) and (order 1,
    dim 2): λ_block = min(4/(2·2), 2/(2·1)) = 1 with both tied, m = 2. Before, the default put the
    order 2 on the last tensor and `component_dims={i: (4, 2)}` gave (1/2, 1)."""
    from neuromanifold.singular.family import Gaussian
    from neuromanifold.singular.read import read

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 5), _SquaredReLU(), torch.nn.Linear(5, 2)
    ).double()
    with torch.no_grad():
        model[0].weight[0] = 0.0
        model[0].bias[0] = 0.0
        model[2].weight[:, 0] = 0.0
    x = torch.randn(40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    reading = read(model, x, Gaussian(), progress=False)
    (i,) = [
        j for j, d in enumerate(reading.directions) if d.klass == "genuine_singularity" and d.k == 3
    ]
    assert list(reading.directions[i].layers) == ["0", "2"]
    a = assemble_from_reading(reading, component_dims={i: (4, 2)})
    (block,) = [b for b in a.blocks if b.orders == (2, 1)]
    assert (block.lam, block.m) == (Fraction(1), 2)
