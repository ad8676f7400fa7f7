"""One-sided ReLU node deaths: the closed form states its caveat (s20 AO #1).

With inputs of one sign (or a bias that can switch the unit off), K = a²·E[σ(bx)²] vanishes on
the open half-plane where the unit is off, which touches θ0: the local λ is 0, not 1/2.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from neuromanifold.singular.closed_forms import one_hidden_node


@pytest.mark.parametrize(
    ("act", "lam", "m"), [("relu", Fraction(1, 2), 2), ("relu2", Fraction(1, 4), 1)]
)
def test_relu_closed_form_carries_the_one_sided_caveat(act: str, lam: Fraction, m: int) -> None:
    cf = one_hidden_node(act)
    assert (cf.lam, cf.m) == (lam, m)  # the values are unchanged
    assert "both sides of 0" in cf.caveat and "local λ there is 0" in cf.caveat
    assert cf.to_dict()["caveat"] == cf.caveat


@pytest.mark.parametrize("act", ["tanh", "gelu", "silu", "identity", 1])
def test_two_sided_activations_have_no_caveat(act: str | int) -> None:
    assert one_hidden_node(act).caveat == ""
