"""Orders of a genuine chain record that its read order does not determine (s30 trial TRIPLE F1).

The Fisher along a dead chain of n tensors measures only the sum k = Σ k_i of the components'
orders (spec §5). For k ≤ n + 1 the split is forced ((1, …, 1) or (1, …, 1, 2)); from k = n + 2
on it is not: Lin–Sq–Lin–Sq–Lin (K ∝ c²b⁴a⁸) reads k = 7 over 3 tensors, truly (1, 2, 4), and
Lin–Tanh–Lin–Sq–Lin (K ∝ c²b⁴a⁴) reads k = 5, truly (1, 2, 2). The default split
(1, …, 1, k − n + 1) then gives a lower bound on λ_block and possibly too low an m_block; the
assembly says so, and ``component_orders`` gives the architecture's orders. The closed form of
K = Π x_i^{2k_i} (`normal_crossing`) is the oracle.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from neuromanifold.singular.assembly import assemble_from_reading, loci_from_reading
from neuromanifold.singular.closed_forms import normal_crossing

SPLIT_NOTE = "fit the read (the Fisher along a chain measures their sum only)"


def _chain(k: int, n: int) -> list[dict]:
    layers = [f"l{i}" for i in range(n)]
    return [{"class": "genuine_singularity", "k": k, "layer": layers[0], "layers": layers}]


@pytest.mark.parametrize(
    ("k", "n", "truth"),
    [(7, 3, (1, 2, 4)), (5, 3, (1, 2, 2)), (4, 2, (2, 2)), (6, 4, (1, 1, 2, 2))],
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
        assemble_from_reading(_chain(7, 3), component_orders={key: (1, 2, 4)})


def test_component_orders_accept_numpy_integers() -> None:
    (key,) = np.flatnonzero([True])
    a = assemble_from_reading(_chain(7, 3), component_orders={key: np.array([1, 2, 4])})
    assert (a.lam, a.m) == (Fraction(1, 8), 1)
