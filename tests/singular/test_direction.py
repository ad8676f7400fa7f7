"""`read_direction` on tiny inline cells with known orders and classes (spec §9.1)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from neuromanifold.singular import (
    Categorical,
    DirectionClass,
    DirectionReading,
    Gaussian,
    local_slopes,
    read_direction,
)
from neuromanifold.singular.classify import FLOOR_MARGIN

D = torch.float64
K_TOL = 0.05  # |k̂ − k| (issue 4 "Done when")
R2_MIN_CELLS = 0.99  # r² on the selected window (issue 4 "Done when")
SLOPE_TOL_REGIME = 0.05  # local log–log slope inside a regime, offset cell
# "t ≫ δ_off" as t ≥ 100·δ_off, "t ≪ δ_off" as t ≤ δ_off/100. The offset cell has F ∝ (δ_off + t)²
# exactly, local slope 2t/(t + δ_off), i.e. within 0.02 of 2 (resp. 0) in those regimes.
REGIME_SEPARATION = 100.0
# Measured errors (seeds 0-3 where a seed applies; 1 and 2 threads) and the bounds used:
RTOL_MAGNITUDE = 1e-14  # c_k = k²/σ² of the power cells: measured exactly 0 (k = 1…6)
ATOL_PERMUTED_K_HAT = 1e-12  # k̂ of a permuted copy: measured exactly 0
RTOL_OFFSET = 1e-13  # uᵀθ0 against √2·δ: measured ≤ 1.9e-16
ATOL_OVERLAP = 1e-13  # overlap of a direction with itself as the generator: measured exactly 0
# empirical-Fisher closed form: y − f(θ0 + t u) cancels to t·x·u, so the relative error grows
# like ε·|f|/t; measured t·(relative error) ≤ 3.8e-16 (seeds 0-9); bound EMP_CANCEL/t
EMP_CANCEL = 1e-13
ATOL_SNAP = 1e-15  # snap of [0.3, 0.5] along e_1: one subtraction of equal floats, exactly 0


def assert_order(r: DirectionReading, k: int) -> None:
    assert r.k == k, r.reason
    assert abs(r.k_hat - k) <= K_TOL
    assert r.r2 >= R2_MIN_CELLS


class Power(nn.Module):
    """Gaussian location anchor: output μ = θ^k for every sample."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.theta = nn.Parameter(torch.zeros((), dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.theta**self.k * torch.ones_like(x)


class Node(nn.Module):
    """One hidden node ``a·σ(b·x)`` with scalar a, b."""

    def __init__(self, act, a: float = 0.0, b: float = 0.0) -> None:
        super().__init__()
        self.act = act
        self.a = nn.Parameter(torch.tensor(a, dtype=D))
        self.b = nn.Parameter(torch.tensor(b, dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * self.act(self.b * x)


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_gaussian_anchor_recovers_k(k: int) -> None:
    model = Power(k)
    r = read_direction(
        model,
        params_of(model),
        {"theta": torch.tensor(1.0)},
        torch.ones(3, 1, dtype=D),
        Gaussian(0.5),
    )
    assert_order(r, k)
    assert r.lambda_dir == 1 / (2 * k)
    # magnitude c_k = k²/σ² exactly
    assert r.fit.magnitude == pytest.approx(k**2 / 0.25, rel=RTOL_MAGNITUDE, abs=0.0)
    expected = DirectionClass.LIVE if k == 1 else DirectionClass.GENUINE_SINGULARITY
    assert r.klass is expected


def test_regular_regression_is_live_order_one() -> None:
    torch.manual_seed(0)
    lin = nn.Linear(5, 2).to(D)
    r = read_direction(
        lin,
        params_of(lin),
        {"weight": torch.randn(2, 5, dtype=D)},
        torch.randn(64, 5, dtype=D),
        Gaussian(),
    )
    assert_order(r, 1)
    assert r.klass is DirectionClass.LIVE


def test_a_flat_gauge_reports_no_order_whatever_path_classed_it() -> None:
    """A slope-0 read below the live threshold is a flat gauge with no order (``k`` None, as for a
    sweep under the floor); its fit keeps k = 1, k̂ and the slope. The same regression read live
    keeps k = 1. So noise-level F that happens to clear 10×floor does not report an order."""
    torch.manual_seed(0)
    lin = nn.Linear(5, 2).to(D)
    u, x = {"weight": torch.randn(2, 5, dtype=D)}, torch.randn(64, 5, dtype=D)
    live = read_direction(lin, params_of(lin), u, x, Gaussian())
    assert live.klass is DirectionClass.LIVE and live.k == 1 and live.lambda_dir == 0.5
    tau = 2.0 * live.fit.magnitude
    flat = read_direction(lin, params_of(lin), u, x, Gaussian(), live_threshold=tau)
    assert flat.klass is DirectionClass.FLAT_GAUGE
    assert flat.k is None and flat.lambda_dir is None
    assert flat.fit.k == 1 and flat.k_hat == live.k_hat and flat.slope == live.slope
    assert DirectionReading.from_dict(json.loads(json.dumps(flat.to_dict()))).k is None


@pytest.mark.parametrize(
    ("name", "act", "k"),
    [
        ("relu", torch.relu, 2),
        ("tanh", torch.tanh, 2),
        ("gelu", F.gelu, 2),
        ("silu", F.silu, 2),
        ("relu_squared", lambda z: torch.relu(z) ** 2, 3),
    ],
)
def test_node_death_orders(name: str, act, k: int) -> None:
    torch.manual_seed(1)
    model = Node(act)
    u = {"a": torch.tensor(1.0, dtype=D), "b": torch.tensor(1.0, dtype=D)}
    r = read_direction(model, params_of(model), u, torch.randn(128, 1, dtype=D), Gaussian())
    assert_order(r, k)
    assert r.klass is DirectionClass.GENUINE_SINGULARITY


def dead_unit_mlp(delta: float, seed: int = 0):
    """ReLU MLP 3 → 5 → 2 whose unit 0 is dead: input row δ·r, output column δ·e."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)).to(D)
    r = torch.randn(3, dtype=D)
    r = r / r.norm()
    e = torch.tensor([0.6, 0.8], dtype=D)
    p = params_of(model)
    p["0.weight"][0] = delta * r
    p["0.bias"][0] = 0.0
    p["2.weight"][:, 0] = delta * e
    u = {"0.weight": torch.zeros(5, 3, dtype=D), "2.weight": torch.zeros(2, 5, dtype=D)}
    u["0.weight"][0] = r
    u["2.weight"][:, 0] = e
    return model, p, u


def test_node_death_inside_mlp_and_under_permutation() -> None:
    model, p, u = dead_unit_mlp(0.0)
    x = torch.randn(64, 3, dtype=D)
    r = read_direction(model, p, u, x, Gaussian())
    assert_order(r, 2)
    perm = torch.tensor([3, 0, 4, 1, 2])
    pp = {
        "0.weight": p["0.weight"][perm],
        "0.bias": p["0.bias"][perm],
        "2.weight": p["2.weight"][:, perm],
        "2.bias": p["2.bias"],
    }
    up = {"0.weight": u["0.weight"][perm], "2.weight": u["2.weight"][:, perm]}
    rp = read_direction(model, pp, up, x, Gaussian())
    assert rp.k == r.k
    assert rp.k_hat == pytest.approx(r.k_hat, rel=0.0, abs=ATOL_PERMUTED_K_HAT)


def test_offset_node_death_rate_only_above_offset_and_snap_recovers_k() -> None:
    delta = 1e-4
    model, p, u = dead_unit_mlp(delta)
    x = torch.randn(64, 3, dtype=D)
    grid = torch.logspace(-8, 0, 49, dtype=D)
    raw = read_direction(model, p, u, x, Gaussian(), grid=grid)
    offset = math.sqrt(2) * delta  # uᵀθ0 with u = (r, e)/√2 and θ0's unit-0 part δ·(r, e)
    assert raw.offset == pytest.approx(offset, rel=RTOL_OFFSET, abs=0.0)
    mid, s = local_slopes(raw.sweep.ts, raw.sweep.F)
    above, below = mid >= REGIME_SEPARATION * offset, mid <= offset / REGIME_SEPARATION
    assert above.sum() >= 6 and below.sum() >= 6
    assert np.all(np.abs(s[above] - 2.0) <= SLOPE_TOL_REGIME)
    assert np.all(np.abs(s[below]) <= SLOPE_TOL_REGIME)
    # Unsnapped, the asymptotic (t → 0) read is the regular point's k = 1, flagged invisible.
    assert raw.k == 1 and not raw.rate_visible
    before = {k: v.clone() for k, v in p.items()}
    snapped = read_direction(model, p, u, x, Gaussian(), grid=grid, snap=True)
    assert all(torch.equal(p[k], before[k]) for k in p)  # snapping never touches the caller's
    assert snapped.snapped and snapped.rate_visible
    assert snapped.offset == pytest.approx(offset, rel=RTOL_OFFSET, abs=0.0)
    assert_order(snapped, 2)
    assert snapped.klass is DirectionClass.GENUINE_SINGULARITY


def test_relu_rescale_straight_probe_is_curved_gauge() -> None:
    """a·ReLU(b x) at the live point (1.3, 0.7); probe along the rescale tangent (a, −b)."""
    model = Node(torch.relu, 1.3, 0.7)
    gen = {"a": torch.tensor(1.3, dtype=D), "b": torch.tensor(-0.7, dtype=D)}
    x = torch.randn(128, 1, dtype=D)
    r = read_direction(model, params_of(model), gen, x, Gaussian(), gauge_generators=[gen])
    assert r.k == 2  # the straight probe mimics order 2 …
    assert r.klass is DirectionClass.CURVED_GAUGE  # … and is classed as the gauge it is
    assert r.gauge_overlap == pytest.approx(1.0, rel=0.0, abs=ATOL_OVERLAP)


def test_empty_gauge_generators_mean_none_and_bad_ones_fail_before_the_sweep(monkeypatch) -> None:
    """s15 trial R #4: a `Cell`'s default ``gauge_generators=()`` raised "gauge_generators is
    empty" after the whole sweep. An empty sequence now reads as None; generators that cannot
    be compared with u fail before any forward pass."""
    model = Power(2)
    args = (model, params_of(model), {"theta": torch.tensor(1.0)}, torch.ones(4, 1, dtype=D))
    plain = read_direction(*args, Gaussian())
    empty = read_direction(*args, Gaussian(), gauge_generators=())
    assert (empty.k, empty.klass, empty.gauge_overlap) == (plain.k, plain.klass, None)
    import neuromanifold.singular.direction as direction

    def no_sweep(*a, **k):
        raise AssertionError("the sweep ran before the generators were checked")

    monkeypatch.setattr(direction, "sweep_prepared", no_sweep)
    with pytest.raises(ValueError, match="generator"):
        read_direction(*args, Gaussian(), gauge_generators=[{"theta": torch.tensor(float("nan"))}])


def test_relu_rescale_in_an_mlp_unit_is_curved_gauge_not_genuine() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(D)
    p = params_of(model)
    gen = {k: torch.zeros_like(v) for k, v in p.items()}
    gen["0.weight"][1], gen["0.bias"][1] = p["0.weight"][1], p["0.bias"][1]
    gen["2.weight"][:, 1] = -p["2.weight"][:, 1]
    x = torch.randn(64, 3, dtype=D)
    r = read_direction(model, p, gen, x, Categorical(), gauge_generators=[gen])
    assert r.klass is DirectionClass.CURVED_GAUGE
    assert_order(r, 2)


def test_layernorm_kernel_is_flat_gauge() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 3)).to(D)
    p = params_of(model)
    p["0.weight"] = torch.rand(6, dtype=D) + 0.5
    p["0.bias"] = torch.randn(6, dtype=D)
    a_star = 1 / p["0.weight"]
    g = torch.randn(3, dtype=D)
    u = {"1.weight": torch.outer(g, a_star), "1.bias": -g * (a_star * p["0.bias"]).sum()}
    r = read_direction(model, p, u, torch.randn(64, 6, dtype=D), Categorical())
    assert r.klass is DirectionClass.FLAT_GAUGE
    assert max(r.sweep.F) <= FLOOR_MARGIN * r.sweep.floor


def test_layernorm_kernel_rounded_to_float32_is_still_flat_gauge() -> None:
    """A gauge direction computed in float32 leaves an O(ε_32²) plateau: slope 0 far above the
    float64 floor, but below the live threshold, so it is not classed live."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 3)).to(D)
    p = params_of(model)
    p["0.weight"] = torch.rand(6, dtype=D) + 0.5
    p["0.bias"] = torch.randn(6, dtype=D)
    a_star = (1 / p["0.weight"]).float()
    g = torch.randn(3)
    b_star = -(a_star * p["0.bias"].float()).sum()
    u = {"1.weight": torch.outer(g, a_star), "1.bias": g * b_star}
    r = read_direction(model, p, u, torch.randn(64, 6, dtype=D), Categorical())
    # not at the float64 floor (measured 1.4e10-2.6e10 × floor, seeds 0-3): the flat cut of rule 1
    # does not apply, the live-threshold rule decides …
    assert max(r.sweep.F) > FLOOR_MARGIN * r.sweep.floor
    assert r.fit.k == 1
    assert r.klass is DirectionClass.FLAT_GAUGE  # … but at the float32 noise level


@pytest.mark.parametrize(
    ("name", "k", "klass"),
    [
        ("matrix_chain_L4_rotated", 4, DirectionClass.GENUINE_SINGULARITY),
        ("matrix_chain_L5_rotated", 5, DirectionClass.GENUINE_SINGULARITY),
        ("matrix_chain_L6_rotated", None, DirectionClass.UNRESOLVED),
    ],
)
def test_rotated_chain_rounded_to_float32_is_not_a_flat_gauge(name, k, klass) -> None:
    """s15 trial R #3: a float32 copy of the rotated chains (weights 6e-8 from the float64
    ones) read as flat gauges, "magnitude at noise level", although F rose as t^{2(L−1)} far
    above its noise plateau. Depth 4 and 5 read their order now; at depth 6 too few grid points
    lie 100× above the plateau to read one, and the direction is unresolved, not flat (the
    whole-model read, as the trial ran it)."""
    from neuromanifold import read
    from neuromanifold.cells import get_cell

    cell = get_cell(name)
    model = copy.deepcopy(cell.model).float()
    reading = read(model, cell.data.float(), cell.family, progress=False)
    (r,) = [d for d in reading.directions if d.detector == "duality"]  # the dead chain
    assert (r.klass, r.k) == (klass.value, k)
    assert ("flat at noise level" if k is not None else "not flat") in r.reason
    if k == 4:  # every layer of the chain shows the order too (s15 audit U #3: layer 3 read
        # k = 1 from its own noise plateau; at depth 5, layer 3's sweep has a t² branch at
        # F ~ 1e-25 below the t⁸ one, the order of the rounded point there, and reads k = 2)
        assert {layer: rate["k"] for layer, rate in r.info["per_layer"].items()} == dict.fromkeys(
            r.layers, k
        )


def test_per_layer_rates_use_the_reads_live_threshold() -> None:
    """s15 audit V #6: with live_threshold=1e-30 the float32 depth-4 chain reads live (its
    plateau is above that threshold). Layer 3, whose own plateau the default threshold reads past
    (k = 4, see the test above), keeps that plateau too (k = 1; it had read past it whatever the
    threshold); layers 0–2 read k = 4 by the ordinary window rule."""
    from neuromanifold import read
    from neuromanifold.cells import get_cell

    cell = get_cell("matrix_chain_L4_rotated")
    model = copy.deepcopy(cell.model).float()
    reading = read(model, cell.data.float(), cell.family, progress=False, live_threshold=1e-30)
    (r,) = [d for d in reading.directions if d.detector == "duality"]
    assert (r.klass, r.k) == ("live", 1)
    assert {layer: rate["k"] for layer, rate in r.info["per_layer"].items()} == {
        "0": 4,
        "1": 4,
        "2": 4,
        "3": 1,
    }


def test_logit_shift_is_flat_gauge() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).to(D)
    r = read_direction(
        model,
        params_of(model),
        {"2.bias": torch.ones(3, dtype=D)},
        torch.randn(32, 4, dtype=D),
        Categorical(),
    )
    assert r.klass is DirectionClass.FLAT_GAUGE


def test_reading_json_round_trip() -> None:
    model = Node(torch.tanh)
    gen = {"a": torch.tensor(1.0, dtype=D)}
    r = read_direction(
        model,
        params_of(model),
        {"a": torch.tensor(2.0), "b": torch.tensor(2.0)},
        torch.randn(16, 1, dtype=D),
        Gaussian(),
        gauge_generators=[gen],
    )
    d = json.loads(json.dumps(r.to_dict()))
    assert d["class"] == "genuine_singularity" and d["k"] == 2
    assert d["direction_norm"] == pytest.approx(2 * math.sqrt(2))
    again = DirectionReading.from_dict(d)
    assert again == r


def test_error_read_direction_bad_grid() -> None:
    model = Power(2)
    with pytest.raises(ValueError, match="grid must be strictly increasing"):
        read_direction(
            model,
            params_of(model),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1, dtype=D),
            Gaussian(),
            grid=[0.2, 0.1],
        )


@pytest.mark.parametrize(
    ("bad", "err"), [(-1.0, ValueError), (float("nan"), ValueError), ("1e-3", TypeError)]
)
def test_error_read_direction_bad_live_threshold(bad: object, err: type) -> None:
    lin = nn.Linear(2, 1).to(D)
    u = {"bias": torch.ones(1, dtype=D)}
    with pytest.raises(err, match=r"live_threshold must be a positive finite float"):
        read_direction(
            lin, params_of(lin), u, torch.randn(8, 2, dtype=D), Gaussian(), live_threshold=bad
        )


def test_error_read_direction_family_mismatch() -> None:
    model = Power(2)
    with pytest.raises(
        ValueError, match=r"Categorical family expects floating logits .* shape \(2, 1\)"
    ):
        read_direction(
            model,
            params_of(model),
            {"theta": torch.tensor(1.0)},
            torch.ones(2, 1, dtype=D),
            Categorical(),
        )


def test_empirical_fisher_at_a_perfect_fit_mimics_order_two() -> None:
    """Linear regression with y = X w0 exactly: the observed-label score vanishes at θ0, so
    F_emp(t) = t² E[(x·u)⁴]/σ⁴ (slope 2) while the true Fisher is constant (k = 1). This is why
    the empirical Fisher is an option, never the default (spec §7.2 step 4)."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 1, bias=False).to(D)
    p = params_of(lin)
    x = torch.randn(40, 3, dtype=D)
    y = (x @ p["weight"].T).detach()
    u = torch.randn(1, 3, dtype=D)
    u = u / u.norm()
    sigma = 0.5
    emp = read_direction(lin, p, {"weight": u}, (x, y), Gaussian(sigma), empirical=True)
    true = read_direction(lin, p, {"weight": u}, (x, y), Gaussian(sigma))
    moment4 = float(((x @ u.T) ** 4).mean())
    for t, f in zip(emp.sweep.ts, emp.sweep.F, strict=True):
        assert f == pytest.approx(t**2 * moment4 / sigma**4, rel=EMP_CANCEL / t, abs=0.0)
    assert emp.k == 2 and emp.sweep.empirical
    assert true.k == 1 and true.klass is DirectionClass.LIVE


def test_snap_base_point_takes_model_parameters_as_values() -> None:
    """s15 trial T: `snap_base_point(dict(model.named_parameters()), u)` raised torch's
    "requires_grad ... to a scalar" UserWarning and returned tensors attached to the caller's
    graph. It is a value computation: no warning, detached results, θ0* = θ0 − (uᵀθ0)u."""
    import warnings

    from neuromanifold.singular.direction import snap_base_point

    model = nn.Linear(2, 1, bias=False).to(D)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.3, 0.5]], dtype=D))
    u = {"weight": torch.tensor([[1.0, 0.0]], dtype=D)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snapped, s = snap_base_point(dict(model.named_parameters()), u)
    assert s == pytest.approx(0.3, abs=ATOL_SNAP) and not snapped["weight"].requires_grad
    assert snapped["weight"].ravel().tolist() == pytest.approx([0.0, 0.5], abs=ATOL_SNAP)


def test_unknown_family_names_the_key_it_read() -> None:
    from neuromanifold.singular.family import family_from_dict

    with pytest.raises(ValueError, match=r"unknown output family None \(the 'name' entry of"):
        family_from_dict({"kind": "poisson"})


class _RescaleBesideSquaredDeath(nn.Module):
    """A live ReLU unit (``l2(relu(l1 x))``, its rescale a curved gauge) beside a dead squared-ReLU
    unit ``a·relu(wᵀx)²`` at ``a = w = 0``, whose diagonal is an order-3 death."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.l1 = nn.Linear(3, 1).to(D)
        self.l2 = nn.Linear(1, 1, bias=False).to(D)
        self.w = nn.Parameter(torch.zeros(3, dtype=D))
        self.a = nn.Parameter(torch.zeros((), dtype=D))
        with torch.no_grad():
            self.l1.weight.copy_(torch.randn(1, 3, generator=g, dtype=D))
            self.l1.bias.fill_(0.3)
            self.l2.weight.fill_(1.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x))) + self.a * torch.relu(x @ self.w)[:, None] ** 2


@pytest.mark.parametrize("c", [0.1, 0.45])
def test_a_gauge_share_below_the_curved_cut_is_said_to_leak_order_two(c: float) -> None:
    """s34 trial CELLS D3: u = c·(the rescale tangent, supplied) + √(1 − c²)·(the order-3
    diagonal) reads k = 2, the gauge part's t², and its reason gave the overlap only. It now says
    the order 2 can be the gauge part's; u projected off the generator reads 3, the pure diagonal
    reads 3 with no such clause."""
    model = _RescaleBesideSquaredDeath().eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    gen = {"l1.weight": params["l1.weight"], "l1.bias": params["l1.bias"]}
    gen["l2.weight"] = -params["l2.weight"]
    norm = math.sqrt(sum(float((v * v).sum()) for v in gen.values()))
    gen = {k: v / norm for k, v in gen.items()}
    v = torch.tensor([0.6, -0.48, 0.64], dtype=D)  # unit
    dead = {"w": v / math.sqrt(2), "a": torch.tensor(2**-0.5, dtype=D)}
    x = torch.randn(128, 3, generator=torch.Generator().manual_seed(6), dtype=D)
    s = math.sqrt(1 - c * c)
    mixed = {**{k: c * g for k, g in gen.items()}, **{k: s * d for k, d in dead.items()}}
    r = read_direction(model, params, mixed, x, Gaussian(), gauge_generators=[gen])
    assert (r.klass, r.k) == (DirectionClass.GENUINE_SINGULARITY, 2)
    assert r.gauge_overlap == pytest.approx(c, rel=1e-9)
    assert f"u overlaps the supplied gauge tangents by {c:.3g}" in r.reason
    along = sum(float((mixed[k] * g).sum()) for k, g in gen.items())
    rest = {k: m - along * gen[k] if k in gen else m for k, m in mixed.items()}
    projected = read_direction(model, params, rest, x, Gaussian(), gauge_generators=[gen])
    assert (projected.klass, projected.k) == (DirectionClass.GENUINE_SINGULARITY, 3)
    pure = read_direction(model, params, dead, x, Gaussian(), gauge_generators=[gen])
    assert (pure.klass, pure.k) == (DirectionClass.GENUINE_SINGULARITY, 3)
    assert "overlaps the supplied gauge tangents" not in pure.reason
