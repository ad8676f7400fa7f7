"""Sweeps along θ0 + t·u: grid policy, closed-form values, base shift, floor, serialisation."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from neuromanifold.singular import Categorical, Gaussian, Sweep, default_grid, read_direction, sweep
from neuromanifold.singular.sweep import EPS64, FLOOR_EPS_MULTIPLE, weight_scale

D = torch.float64
RTOL_EXACT = 1e-12
# the floor is the same product the module evaluates, reordered at most: equal to a few ulps
RTOL_SAME_PRODUCT = 1e-15


class Power(nn.Module):
    """Gaussian location anchor: output μ = θ^k for every sample."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.theta = nn.Parameter(torch.zeros((), dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.theta**self.k * torch.ones_like(x)


def test_default_grid_scaled_by_rms_of_touched_blocks() -> None:
    params = {
        "a": torch.tensor([3.0, 4.0], dtype=D),  # RMS over a and b together
        "b": torch.zeros(2, dtype=D),
        "c": torch.full((5,), 100.0, dtype=D),  # untouched: ignored
    }
    u = {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0, 1.0]), "c": torch.zeros(5)}
    rho = math.sqrt((9 + 16) / 4)
    assert weight_scale(params, u) == pytest.approx(rho, rel=RTOL_EXACT, abs=0)
    g = default_grid(params, u)
    assert g.shape == (32,) and g.dtype == D
    assert float(g[0]) == pytest.approx(1e-4 * rho, rel=RTOL_EXACT, abs=0)
    assert float(g[-1]) == pytest.approx(rho, rel=RTOL_EXACT, abs=0)
    ratios = g[1:] / g[:-1]
    torch.testing.assert_close(
        ratios, torch.full_like(ratios, 10 ** (4 / 31)), rtol=RTOL_EXACT, atol=0
    )


def test_default_grid_falls_back_to_one_for_zero_weights() -> None:
    g = default_grid({"w": torch.zeros(3, dtype=D)}, {"w": torch.ones(3)}, n=5, lo=1e-2, hi=1.0)
    assert float(g[0]) == pytest.approx(1e-2) and float(g[-1]) == pytest.approx(1.0)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_sweep_values_are_the_closed_form(k: int) -> None:
    model, sigma = Power(k), 0.3
    x = torch.ones(5, 1)
    sw = sweep(
        model, dict(model.named_parameters()), {"theta": torch.tensor(-2.0)}, x, Gaussian(sigma)
    )
    # u = −1 after normalisation: μ(θ0 + t u) = (−t)^k, F = k² t^{2(k−1)}/σ².
    for t, f in zip(sw.ts, sw.F, strict=True):
        expected = k**2 * t ** (2 * (k - 1)) / sigma**2
        assert abs(f - expected) <= RTOL_EXACT * expected
    assert sw.n_forward_passes == len(sw.ts) + 1
    assert sw.n_samples == 5
    assert sw.ts[0] == pytest.approx(1e-4)  # θ0 = 0 ⇒ ρ_W falls back to 1


def test_base_shift_moves_the_base_point() -> None:
    """μ = θ², θ0 = 0, base shift s: F(t) = 4(s + t)²."""
    model = Power(2)
    s = 0.25
    sw = sweep(
        model,
        dict(model.named_parameters()),
        {"theta": torch.tensor(1.0)},
        torch.ones(2, 1),
        Gaussian(),
        grid=[0.1, 0.2, 0.4],
        base_shift=s,
    )
    for t, f in zip(sw.ts, sw.F, strict=True):
        assert f == pytest.approx(4 * (s + t) ** 2, rel=RTOL_EXACT, abs=0)
    assert sw.base_shift == s


def test_floor_is_eps_scaled_and_a_flat_direction_sits_below_it() -> None:
    """CE logit shift: F ≡ 0 exactly in exact arithmetic, below 10·floor in float64."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).to(D)
    sw = sweep(
        model,
        dict(model.named_parameters()),
        {"2.bias": torch.ones(3)},
        torch.randn(32, 4, dtype=D),
        Categorical(),
    )
    assert sw.random_fisher > 0
    assert sw.scale == max(sw.random_fisher, max(sw.F))
    assert sw.floor == pytest.approx(
        (FLOOR_EPS_MULTIPLE * EPS64) ** 2 * sw.scale, rel=RTOL_SAME_PRODUCT, abs=0
    )
    assert max(sw.F) <= 10 * sw.floor


class DeadUnitLogits(nn.Module):
    """``logits_c = a_c·tanh(bᵀx)`` at ``a = b = 0``: one dead unit feeding every class, so every
    tensor of the model is degenerate at θ0 (``F_r = 0``)."""

    def __init__(self, act=torch.tanh) -> None:
        super().__init__()
        self.act = act
        self.a = nn.Parameter(torch.zeros(3, dtype=D))
        self.b = nn.Parameter(torch.zeros(2, dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a[None, :] * self.act(x @ self.b)[:, None]


def _dead_unit_data() -> torch.Tensor:
    x = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), dtype=D)
    return torch.cat([x, -x])


def test_a_centring_residue_on_a_degenerate_block_reads_flat() -> None:
    """s34 trial CELLS D1: along (a: 𝟙, b: (0.3, 1)) every logit moves alike, the softmax never
    changes and F ≡ 0 in exact arithmetic; in float64 F is the centring's residue, growing like t²
    (1e-41 … 1e-33), and with F_r = 0 it set its own floor and read genuine k = 2. The uncentred
    moment F_g sets the scale now, and the direction reads flat."""
    model = DeadUnitLogits()
    params = dict(model.named_parameters())
    u = {"a": torch.ones(3, dtype=D), "b": torch.tensor([0.3, 1.0], dtype=D)}
    sw = sweep(model, params, u, _dead_unit_data(), Categorical())
    assert sw.random_fisher == 0.0 and sw.module_fisher is None  # every tensor is touched
    assert sw.uncentred_fisher is not None and sw.scale == sw.uncentred_fisher > 1e20 * max(sw.F)
    assert sw.n_forward_passes == len(sw.ts) + 2
    assert max(sw.F) <= 10 * sw.floor
    reading = read_direction(model, params, u, _dead_unit_data(), Categorical())
    assert reading.klass.value == "flat_gauge"


@pytest.mark.parametrize("scale", [1.0, 1e-12])
def test_an_order_two_direction_on_the_same_degenerate_block_keeps_its_order(scale: float) -> None:
    """The same dead unit, moved towards class 0 alone: the logits' differences grow like t², a
    node death of order 2. The block is degenerate (F_r = 0), so F_g is measured; F and F_g are of
    one size, F_g does not replace F_scale (x ×1e-12: F_g 4.3e-25, max F 2.9e-25; s34 review #2),
    and the order stands."""
    model = DeadUnitLogits()
    params = dict(model.named_parameters())
    u = {"a": torch.tensor([1.0, 0.0, 0.0], dtype=D), "b": torch.tensor([0.3, 1.0], dtype=D)}
    reading = read_direction(model, params, u, scale * _dead_unit_data(), Categorical())
    assert reading.klass.value == "genuine_singularity" and reading.k == 2
    sw = reading.sweep
    assert sw.random_fisher == 0.0 and sw.uncentred_fisher is not None
    assert sw.scale == max(sw.F) and sw.uncentred_fisher < 10 * max(sw.F)


@pytest.mark.parametrize("scale", [1e3, 1e8])
def test_a_centring_residue_of_large_logit_tangents_reads_flat(scale: float) -> None:
    """s34 review #1: with the dead unit's data ×1e8 (identity for tanh) the residue reached
    3e-17, above the absolute 1e-20 screen that gated F_g, and read genuine k = 2 again. The
    block's degeneracy is judged relative to F_scale now."""
    model = DeadUnitLogits(act=lambda z: z)
    params = dict(model.named_parameters())
    u = {"a": torch.ones(3, dtype=D), "b": torch.tensor([0.3, 1.0], dtype=D)}
    reading = read_direction(model, params, u, scale * _dead_unit_data(), Categorical())
    assert reading.klass.value == "flat_gauge"
    assert reading.sweep.scale == reading.sweep.uncentred_fisher > 1e20 * max(reading.sweep.F)


def _power3_sweep(grid: torch.Tensor):
    """The Power(3) anchor at θ = 0 along θ, Gaussian family, two samples."""
    model = Power(3)
    params = dict(model.named_parameters())
    return sweep(
        model, params, {"theta": torch.tensor(1.0)}, torch.ones(2, 1), Gaussian(), grid=grid
    )


def test_a_gaussian_degenerate_block_measures_no_uncentred_moment() -> None:
    """A Gaussian quadratic centres nothing: no F_g pass (a Power anchor at θ = 0 stays exact)."""
    sw = _power3_sweep(torch.logspace(-12, -9, 8, dtype=D))
    assert sw.uncentred_fisher is None and sw.n_forward_passes == len(sw.ts) + 1


def test_sweep_json_round_trip() -> None:
    sw = _power3_sweep(torch.logspace(-2, 0, 8, dtype=D))
    again = Sweep.from_dict(json.loads(json.dumps(sw.to_dict())))
    assert again == sw


def test_float32_sweep_is_recorded_as_upcast() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    sw = sweep(
        model,
        dict(model.named_parameters()),
        {"bias": torch.ones(2)},
        torch.randn(4, 3),
        Gaussian(),
        grid=[0.1, 1.0],
    )
    assert sw.upcast


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        ([0.0, 0.1, 1.0], "grid must be positive and finite"),
        ([0.1, 0.05, 1.0], r"grid must be strictly increasing; got t\[0\] = 0.1 ≥ t\[1\] = 0.05"),
        ([0.1], "grid must have at least 2 points"),
        ([0.1, math.inf], "grid must be positive and finite"),
    ],
)
def test_error_bad_grid(grid: list[float], match: str) -> None:
    model = Power(2)
    with pytest.raises(ValueError, match=match):
        sweep(
            model,
            dict(model.named_parameters()),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1),
            Gaussian(),
            grid=grid,
        )


def test_error_grid_not_numeric() -> None:
    model = Power(2)
    with pytest.raises(TypeError, match="grid must be a 1-D sequence of positive floats"):
        sweep(
            model,
            dict(model.named_parameters()),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1),
            Gaussian(),
            grid=["a", "b"],
        )


def test_error_default_grid_bounds() -> None:
    with pytest.raises(ValueError, match=r"grid bounds must satisfy 0 < lo < hi"):
        default_grid({"w": torch.ones(2)}, {"w": torch.ones(2)}, lo=1.0, hi=0.1)
    with pytest.raises(ValueError, match=r"grid size n must be an int ≥ 2"):
        default_grid({"w": torch.ones(2)}, {"w": torch.ones(2)}, n=1)


def test_error_base_shift_not_finite() -> None:
    model = Power(2)
    with pytest.raises(ValueError, match="base_shift must be a finite float"):
        sweep(
            model,
            dict(model.named_parameters()),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1),
            Gaussian(),
            base_shift=math.nan,
        )


class Branchy(nn.Module):
    """Data-dependent control flow on a parameter: cannot be vmapped over its parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sign = 1.0 if self.lin.weight.sum().item() > -1e9 else -1.0
        return sign * torch.tanh(self.lin(x))


RTOL_BATCHING = 1e-12  # vmap over t changes only the order of float64 reductions


def test_t_batching_and_chunking_do_not_change_values() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3)).to(D)
    p = dict(model.named_parameters())
    x = torch.randn(20, 4, dtype=D)
    u = {"0.weight": torch.randn(6, 4, dtype=D), "2.bias": torch.randn(3, dtype=D)}
    one = sweep(model, p, u, x, Categorical(), t_batch=1)
    assert not one.t_batched
    for kwargs in ({}, {"t_batch": 5, "chunk_size": 7}, {"t_batch": 32}):
        other = sweep(model, p, u, x, Categorical(), **kwargs)
        assert other.t_batched
        for a, b in zip(one.F, other.F, strict=True):
            assert b == pytest.approx(a, rel=RTOL_BATCHING, abs=0)


def test_t_batching_falls_back_when_the_model_cannot_be_vmapped() -> None:
    torch.manual_seed(0)
    model = Branchy().to(D)
    p = dict(model.named_parameters())
    x = torch.randn(5, 3, dtype=D)
    u = {"lin.weight": torch.ones(2, 3, dtype=D)}
    batched = sweep(model, p, u, x, Gaussian(), t_batch=8)
    looped = sweep(model, p, u, x, Gaussian(), t_batch=1)
    assert not batched.t_batched
    assert batched.F == looped.F


def test_error_bad_t_batch() -> None:
    model = Power(2)
    with pytest.raises(ValueError, match="t_batch must be a positive int; got 0"):
        sweep(
            model,
            dict(model.named_parameters()),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1),
            Gaussian(),
            t_batch=0,
        )


def _power_sweep(*, params=None, u=None, data=None) -> Sweep:
    model = Power(2)
    return sweep(
        model,
        dict(model.named_parameters()) if params is None else params,
        {"theta": torch.tensor(1.0)} if u is None else u,
        torch.ones(2, 1, dtype=D) if data is None else data,
        Gaussian(),
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"params": [1.0]}, TypeError, r"params must be a dict\[str, Tensor\] .* got list"),
        ({"params": {"theta": 1.0}}, TypeError, r"params\['theta'\] must be a Tensor; got float"),
        (
            {"params": {"theta": torch.zeros(2, dtype=D)}},
            ValueError,
            r"params\['theta'\] has shape \(2,\) but the model's parameter has shape \(\)",
        ),
        (
            {"data": (torch.ones(2, 1), torch.ones(2), torch.ones(2))},
            TypeError,
            r"data must be a Tensor of inputs or a pair \(x, y\); got a sequence of length 3",
        ),
        (
            {"data": (torch.ones(2, 1), [0.0, 1.0])},
            TypeError,
            "data labels y must be a Tensor; got list",
        ),
        (
            {"data": ([[1.0], [2.0]], torch.ones(2))},
            TypeError,
            "data inputs must be a Tensor with a leading sample dimension; got list",
        ),
        (
            {"data": torch.tensor([[1.0], [math.nan]], dtype=D)},
            ValueError,
            r"data inputs contain non-finite values \(nan or inf\)",
        ),
        (
            {"u": {"theta": 1.0}},
            TypeError,
            r"direction u\['theta'\] must be a Tensor; got float",
        ),
    ],
)
def test_error_bad_params_data_or_direction(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _power_sweep(**kwargs)


def test_error_default_grid_unknown_key() -> None:
    with pytest.raises(ValueError, match="direction u has key 'b' that is not in params"):
        default_grid({"w": torch.ones(2, dtype=D)}, {"b": torch.ones(2, dtype=D)})
