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
from torch.func import jacfwd, jvp, vmap
from torch.overrides import TorchFunctionMode

import neuromanifold.singular.fisher as fisher_mod
import neuromanifold.singular.lane_activations as la
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
RTOL_FD = 1e-8  # central differences, step 1e-5: error about h² f''' = 1e-10 relative here

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


def _counting_functions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every call of a shared-tangent Function (its class name)."""
    calls: list[str] = []
    for fn in [*la._GELU.values(), la._SILU]:
        original = fn.apply

        def counted(x: torch.Tensor, original=original, name=fn.__name__) -> torch.Tensor:
            calls.append(name)
            return original(x)

        monkeypatch.setattr(fn, "apply", counted)
    return calls


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_swapped_module_tangents_and_gradients_are_torchs(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the depth the context is told (0: a plain call, 1: ``jvp``, 2: ``vmap`` of ``jvp``)
    the module runs the shared-tangent Function, and its tangents and gradients are torch's."""
    make, _, _ = ACTIVATIONS[name]
    module = make()
    x = points()[:2500].reshape(-1, 5)  # (500, 5)
    gen = torch.Generator().manual_seed(1)
    lanes = torch.randn(6, *x.shape, generator=gen, dtype=D)
    xg = x.clone().requires_grad_(True)

    def lane_jvp(t: torch.Tensor) -> torch.Tensor:
        return jvp(module, (x,), (t,))[1]

    def gradient() -> torch.Tensor:
        return torch.autograd.grad(module(xg), xg, lanes[1])[0]

    cases = {  # depth: (computation, tangent it is linear in)
        0: (gradient, lanes[1]),
        1: (lambda: lane_jvp(lanes[0]), lanes[0]),
        2: (lambda: vmap(lane_jvp)(lanes), lanes),
    }
    calls = _counting_functions(monkeypatch)
    plain_value = module(x)
    for depth, (compute, tangent) in cases.items():
        want = compute()
        assert not calls  # outside the context: torch's own forward
        with lane_activations(module, depth=depth) as swapped:
            assert swapped == 1
            got = compute()
            assert calls  # the shared-tangent Function ran
            assert torch.equal(module(x), plain_value)  # forward values are torch's own
        calls.clear()
        assert bool(((got - want).abs() <= ATOL_KERNEL * tangent.abs()).all())


def test_a_call_at_another_depth_runs_torchs_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial M #1: f''(0.3) of the swapped GELU under nested jvp was 0 (torch: 0.7285)."""
    g = nn.GELU()
    x0 = torch.tensor([0.3], dtype=D)
    one = torch.ones(1, dtype=D)

    def slope(x: torch.Tensor) -> torch.Tensor:
        return jvp(g, (x,), (one,))[1]

    want = jvp(slope, (x0,), (one,))[1]
    calls = _counting_functions(monkeypatch)
    with lane_activations(g, depth=1):
        got = jvp(slope, (x0,), (one,))[1]  # g runs two levels deep, not one
    assert not calls
    assert torch.equal(got, want) and float(want) > 0.7


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


class SelfDifferentiating(nn.Module):
    """Output ``J_x f(x)·1`` by ``torch.func.jvp`` inside ``forward`` (a derivative feature)."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.l1, self.act, self.l2 = nn.Linear(5, 9), act, nn.Linear(9, 3)

    def f(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.act(self.l1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return jvp(self.f, (x,), (torch.ones_like(x),))[1]


class KeywordCall(nn.Module):
    """Calls its activation as ``self.act(input=h)``, as torch allows."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.l1, self.act, self.l2 = nn.Linear(5, 9), act, nn.Linear(9, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.act(input=self.l1(x)))


def _batched_single_oracle(model: nn.Module, seed: int = 0) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    model = model.to(D)
    x = torch.randn(7, 5, dtype=D) * 2
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    gen = torch.Generator().manual_seed(seed + 1)
    dirs = [
        {k: torch.randn(v.shape, generator=gen, dtype=D) for k, v in params.items()}
        for _ in range(3)
    ]
    fam = Gaussian()
    batched = directional_fisher(model, params, dirs, x, fam)
    single = torch.stack([directional_fisher(model, params, d, x, fam) for d in dirs])
    oracle = directional_fisher_reference(model, params, dirs, x, fam)
    return batched, single, oracle


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("kind", [SelfDifferentiating, KeywordCall])
def test_models_that_differentiate_themselves_or_pass_input_by_name(kind: type, name: str) -> None:
    """Trial M #1 (batched 0.28 where single = oracle = 0.43) and #2 (a TypeError)."""
    batched, single, oracle = _batched_single_oracle(kind(ACTIVATIONS[name][0]()))
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)
    torch.testing.assert_close(batched, oracle, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


def _clipped_forward(self: nn.GELU, input: torch.Tensor) -> torch.Tensor:
    return F.gelu(input.clamp(-1.0, 1.0), approximate=self.approximate)


def _clipped_gelu(input: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return torch._C._nn.gelu(input.clamp(-1.0, 1.0), approximate=approximate)


@pytest.mark.parametrize(
    "patch",
    [(nn.GELU, "forward", _clipped_forward), (F, "gelu", _clipped_gelu)],
    ids=["class-forward", "F.gelu"],
)
def test_a_patched_gelu_is_not_replaced(patch: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial M #3: the swap replaced a clipping shim by torch's GELU (batched 1.19 vs 0.17)."""
    monkeypatch.setattr(*patch)
    model = nn.Sequential(nn.Linear(5, 9), nn.GELU(), nn.Linear(9, 3))
    with lane_activations(model) as swapped:
        assert swapped == 0
    batched, single, oracle = _batched_single_oracle(model)
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)
    torch.testing.assert_close(batched, oracle, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


class _ClipGELU(TorchFunctionMode):
    """Clips GELU's input, as activation-clipping and fake-quant tools do."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.gelu, torch._C._nn.gelu):
            return func(args[0].clamp(-1.0, 1.0), *args[1:], **kwargs)
        return func(*args, **kwargs)


def test_a_torch_function_mode_or_a_patched_kernel_is_not_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """s14 audit P #2: under a clipping mode the batched Fisher read 0.125 where single and the
    oracle read 0.041; a patch of ``torch._C._nn.silu`` was swapped out the same way."""
    model = nn.Sequential(nn.Linear(5, 9), nn.GELU(), nn.Linear(9, 3))
    with _ClipGELU():
        with lane_activations(model) as swapped:
            assert swapped == 0
        batched, single, oracle = _batched_single_oracle(model)
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)
    torch.testing.assert_close(batched, oracle, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)
    kernel = torch._C._nn.silu
    monkeypatch.setattr(torch._C._nn, "silu", lambda x, *a, **k: kernel(x.clamp(-1.0, 1.0)))
    model = nn.Sequential(nn.Linear(5, 9), nn.SiLU(), nn.Linear(9, 3))
    with lane_activations(model) as swapped:
        assert swapped == 0
    batched, single, oracle = _batched_single_oracle(model)
    torch.testing.assert_close(batched, single, rtol=RTOL_GROUPING, atol=0.0)


class _Scaled(nn.Module):
    """``x ↦ l2(gelu(s · l1(x)))`` with ``s`` held by the caller (differentiated by it)."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.act, self.l2 = nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)
        self.s: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.act(self.s * self.l1(x)))


def test_a_batched_call_inside_a_callers_jacfwd() -> None:
    """s14 audit P #1: jacfwd of the batched Fisher in s gave [0.0083, −0.0005] where one
    direction at a time and finite differences gave [−0.0022, −0.0083]."""
    torch.manual_seed(0)
    model = _Scaled().to(D)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(5, 3, dtype=D)
    gen = torch.Generator().manual_seed(1)
    dirs = [
        {k: torch.randn(v.shape, generator=gen, dtype=D) for k, v in params.items()}
        for _ in range(2)
    ]

    def batched(s: torch.Tensor) -> torch.Tensor:
        model.s = s
        return directional_fisher(model, params, dirs, x, Gaussian())

    def single(s: torch.Tensor) -> torch.Tensor:
        model.s = s
        return torch.stack([directional_fisher(model, params, d, x, Gaussian()) for d in dirs])

    s0 = torch.tensor(1.3, dtype=D)
    torch.testing.assert_close(
        jacfwd(batched)(s0), jacfwd(single)(s0), rtol=RTOL_GROUPING, atol=0.0
    )
    h = 1e-5
    fd = (single(s0 + h) - single(s0 - h)) / (2 * h)
    torch.testing.assert_close(jacfwd(batched)(s0), fd, rtol=RTOL_FD, atol=0.0)
