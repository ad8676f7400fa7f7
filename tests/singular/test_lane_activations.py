"""Shared-tangent GELU / SiLU (`neuromanifold.singular.lane_activations`).

The swap must change speed only: derivatives equal torch's autograd of its own kernels, tangents
and gradients through the swapped modules equal torch's (one tangent and under ``vmap`` over
several), the context restores the modules, and the batched directional Fisher of models with
these activations equals the per-sample-gradient oracle and the one-direction-at-a-time path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import jvp, vmap

import neuromanifold.singular.fisher as fisher_mod
from neuromanifold.singular import Categorical, Gaussian
from neuromanifold.singular.fisher import directional_fisher, directional_fisher_reference
from neuromanifold.singular.lane_activations import (
    gelu_derivative,
    lane_activations,
    silu_derivative,
)
from neuromanifold.zoo.models import ViTConfig, build_model

# f'(x) is a sum of two terms of size up to ~25 (the tanh form near x = −7) that cancel for
# x ≪ 0; evaluated in another order than torch's kernel it differs by a few ulps of the larger
# term (measured at most 5.1e-15 on 2·10⁵ points of [−40, 40]); relative error is meaningless
# where f'(x) cancels to ~0, so tangents are compared in absolute terms, per unit tangent.
ATOL_KERNEL = 1e-14
RTOL_GROUPING = 1e-12  # batched vs one direction at a time: summation order only
RTOL_ORACLE = 1e-10  # JVP vs per-sample gradients (as in test_fisher.py)
ATOL_ORACLE = 1e-14

D = torch.float64

ACTIVATIONS: dict[str, tuple[Callable[[], nn.Module], Callable, Callable]] = {
    "gelu": (nn.GELU, F.gelu, gelu_derivative),
    "gelu_tanh": (
        lambda: nn.GELU(approximate="tanh"),
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: gelu_derivative(x, "tanh"),
    ),
    "silu": (nn.SiLU, F.silu, silu_derivative),
}


def points() -> torch.Tensor:
    """Saturated tails, the bend near 0 and random values."""
    gen = torch.Generator().manual_seed(0)
    return torch.cat(
        [torch.linspace(-40, 40, 2001, dtype=D), torch.randn(500, generator=gen, dtype=D) * 3]
    )


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_derivative_is_torchs(name: str) -> None:
    _, fn, derivative = ACTIVATIONS[name]
    x = points().requires_grad_(True)
    (torch_grad,) = torch.autograd.grad(fn(x).sum(), x)
    torch.testing.assert_close(derivative(x.detach()), torch_grad, rtol=0.0, atol=ATOL_KERNEL)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_swapped_module_tangents_and_gradients_are_torchs(name: str) -> None:
    make, _, _ = ACTIVATIONS[name]
    module = make()
    x = points()[:2500].reshape(-1, 5)  # (500, 5)
    gen = torch.Generator().manual_seed(1)
    lanes = torch.randn(6, *x.shape, generator=gen, dtype=D)

    def lane_jvp(t: torch.Tensor) -> torch.Tensor:
        return jvp(module, (x,), (t,))[1]

    plain_value, plain_one, plain_many = module(x), lane_jvp(lanes[0]), vmap(lane_jvp)(lanes)
    xg = x.clone().requires_grad_(True)
    (plain_grad,) = torch.autograd.grad(module(xg), xg, lanes[1])
    with lane_activations(module) as swapped:
        assert swapped == 1
        shared_one, shared_many = lane_jvp(lanes[0]), vmap(lane_jvp)(lanes)
        (shared_grad,) = torch.autograd.grad(module(xg), xg, lanes[1])
        assert torch.equal(module(x), plain_value)  # forward values are torch's own
    pairs = [
        (shared_one, plain_one, lanes[0]),
        (shared_many, plain_many, lanes),
        (shared_grad, plain_grad, lanes[1]),
    ]
    for got, want, tangent in pairs:
        assert bool(((got - want).abs() <= ATOL_KERNEL * tangent.abs()).all())


class OwnGELU(nn.GELU):
    """A subclass with its own ``forward``: left alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * F.gelu(x)


def test_context_swaps_only_plain_modules_and_restores_them() -> None:
    patched = nn.SiLU()
    patched.forward = lambda x: x  # an instance forward the caller set: kept as it is
    model = nn.Sequential(
        nn.GELU(), nn.SiLU(), nn.GELU(approximate="tanh"), nn.SiLU(inplace=True), OwnGELU(), patched
    )
    with lane_activations(model) as swapped:
        assert swapped == 3
        assert ["forward" in vars(m) for m in model] == [True, True, True, False, False, True]
    assert ["forward" in vars(m) for m in model] == [False] * 5 + [True]
    assert patched.forward(torch.ones(1)).item() == 1.0
    with pytest.raises(RuntimeError, match="inside"):
        with lane_activations(model):
            raise RuntimeError("an error inside the context")
    assert ["forward" in vars(m) for m in model] == [False] * 5 + [True]


def activation_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(5, 9),
        nn.GELU(),
        nn.Linear(9, 8),
        nn.SiLU(),
        nn.Linear(8, 7),
        nn.GELU(approximate="tanh"),
        nn.Linear(7, 3),
    ).to(D)


def small_vit() -> nn.Module:
    return build_model(ViTConfig(dim=16, depth=1, heads=2), seed=0).to(D)


MODELS = {"mlp": (activation_mlp, (13, 5)), "vit": (small_vit, (6, 1, 8, 8))}
N_ACTIVATIONS = {"mlp": 3, "vit": 1}  # modules the batched call swaps
FAMILIES = {"gaussian": Gaussian(sigma=0.7), "categorical": Categorical()}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("name", list(MODELS))
def test_batched_fisher_with_shared_tangents_is_the_oracle(
    name: str, family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(*shape, dtype=D)
    gen = torch.Generator().manual_seed(2)
    dirs = [
        {k: torch.randn(v.shape, generator=gen, dtype=D) for k, v in params.items()}
        for _ in range(4)
    ]
    swaps: list[int] = []
    original = fisher_mod.lane_activations

    @contextlib.contextmanager
    def counting(m: nn.Module) -> Iterator[int]:
        with original(m) as swapped:
            swaps.append(swapped)
            yield swapped

    monkeypatch.setattr(fisher_mod, "lane_activations", counting)
    fam = FAMILIES[family]
    batched = directional_fisher(model, params, dirs, x, fam)
    assert swaps and all(n == N_ACTIVATIONS[name] for n in swaps)
    single = torch.stack([directional_fisher(model, params, d, x, fam) for d in dirs])
    ref = directional_fisher_reference(model, params, dirs, x, fam)
    assert bool((ref > 0).all())
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)
    torch.testing.assert_close(batched, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)
    assert all("forward" not in vars(m) for m in model.modules())
