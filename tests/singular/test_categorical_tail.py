"""The categorical tests at a rare class (s22 audit MIN #1): with confident predictions a normal
approximation of the mean score flagged true parameters at 2.7·10⁻⁴ to 3·10⁻² (documented:
6·10⁻⁵); Bernstein's bound for bounded scores (`tail_threshold`) keeps the rate under it.

The model is bias-only (``x = 0``), so a label set acts only through its number ``K`` of rare
labels, ``K ∼ Binomial(N, p)``; the false-flag rate is then computed exactly, ``Σ_K P(K)·flag(K)``,
rather than estimated from draws."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import binom
from torch import nn

from neuromanifold.singular.chernoff import tail_threshold
from neuromanifold.singular.critical_check import NULL_RATE, critical_check
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.minimum_check import (
    FALSE_FLAG_RATE,
    MIN_Z,
    SLOPE_RATE,
    loss_along,
)

RARE = (0.01, 0.001)  # the rare class's probability at θ0
NORMAL_EXCESS = 4.0  # the normal rule's rate is at least this many times the documented one


def _bias_model(p_rare: float) -> nn.Module:
    model = nn.Linear(1, 2).double()
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([0.0, math.log(p_rare / (1 - p_rare))]))
    return model


def _labels(n: int, rare_at: list[int]) -> torch.Tensor:
    y = torch.zeros(n, dtype=torch.long)
    y[rare_at] = 1
    return y


@pytest.mark.parametrize("p_rare", RARE)
@pytest.mark.parametrize("n", [10, 30, 100])
def test_the_slope_test_keeps_its_rate_at_a_rare_class(p_rare: float, n: int) -> None:
    model, x = _bias_model(p_rare), torch.zeros(n, 1, dtype=torch.float64)
    u = {"bias": torch.tensor([1.0, -1.0], dtype=torch.float64)}
    rate = normal_rate = 0.0
    for k in range(n + 1):
        check = loss_along(model, {}, u, (x, _labels(n, list(range(k)))), Categorical())
        pk = float(binom.pmf(k, n, p_rare))
        rate += pk * bool(check["not_critical"] or check["curved_down"])
        normal_rate += pk * (abs(check["slope"]) > MIN_Z * check["slope_se"])
    assert rate <= SLOPE_RATE + FALSE_FLAG_RATE
    # the rule it replaces: a normal threshold of MIN_Z standard errors
    assert normal_rate > NORMAL_EXCESS * SLOPE_RATE


@pytest.mark.parametrize("p_rare", RARE)
def test_the_whole_gradient_check_keeps_its_rate_at_a_rare_class(p_rare: float) -> None:
    """30 samples: ``K_A`` rare labels on the even indices choose the direction, ``K_B`` on the
    odd ones test it; every pair (K_A, K_B) is evaluated."""
    n = 30
    model, x = _bias_model(p_rare), torch.zeros(n, 1, dtype=torch.float64)
    even, odd = list(range(0, n, 2)), list(range(1, n, 2))
    params = dict(model.named_parameters())
    rate = normal_rate = 0.0
    for ka in range(len(even) + 1):
        for kb in range(len(odd) + 1):
            y = _labels(n, even[:ka] + odd[:kb])
            check = critical_check(model, params, (x, y), Categorical())
            pk = float(binom.pmf(ka, len(even), p_rare) * binom.pmf(kb, len(odd), p_rare))
            rate += pk * check["not_critical"]
            normal_rate += pk * (check["z"] is not None and check["z"] > MIN_Z)
    assert rate <= NULL_RATE
    assert normal_rate > NORMAL_EXCESS * NULL_RATE


def test_bernstein_reduces_to_the_normal_rule_without_a_bound() -> None:
    """Unbounded (Gaussian) scores keep ``z·√V``; bounded ones ask for at least that, and for
    Bernstein's ``L·b/3 + √((L·b/3)² + 2LV)``, which grows with the bound."""
    assert tail_threshold(4.0, None, 10.0, MIN_Z) == MIN_Z * 2.0
    cuts = [tail_threshold(4.0, b, 10.0, MIN_Z) for b in (0.0, 0.5, 5.0)]
    assert cuts[0] == pytest.approx(math.sqrt(2 * 10.0 * 4.0))
    assert cuts[0] < cuts[1] < cuts[2]
    a = 10.0 * 5.0 / 3
    assert cuts[2] == pytest.approx(a + math.sqrt(a * a + 80.0))
