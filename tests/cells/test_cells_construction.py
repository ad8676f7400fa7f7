"""Each cell has the structure its docstring claims, checked in closed form (no read involved)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.func import functional_call, jvp

from neuromanifold.cells import (
    CELLS,
    all_cells,
    ce_logit_shift,
    chain_product,
    conv_chain,
    conv_node_death,
    gaussian_location,
    layernorm_kernel,
    layernorm_kernel_vector,
    linear_regression,
    matrix_chain,
    mlp_node_death,
    node_death,
    node_death_offset,
    qk_rotation,
    relu_chain,
    relu_rescale,
    residual_path,
    rmsnorm_no_kernel,
    scalar_chain,
    swiglu_dead_dimension,
)
from neuromanifold.cells.deep_linear import _chain_model
from neuromanifold.singular.fisher import directional_fisher

ATOL_EXACT = 1e-12  # identities that hold exactly up to float64 rounding of O(1) quantities
RTOL_EXACT = 1e-10  # the same for quantities compared relative to their size
# Absolute float64 error of one JVP entry whose O(1) terms cancel down to a small value (rotated
# chains): a Fisher F = E‖J u‖² then carries an absolute error ≈ 2·√F·ATOL_JVP. Measured
# ≈ 1e-17 on the rotated matrix chains of depth 4 and 5 at t = 1e-2.
ATOL_JVP = 1e-14
T_VALUES = (1e-3, 1e-1, 0.7)
# residual_path(skip=True): relative distance of Δ/t² from the leading path at t = 1e-4 (an O(t)
# truncation error: measured 2.3e-4), and how closely that error scales like t between t = 1e-3
# and 1e-4 (measured deviation of the tenfold ratio: 1.1e-4 over seeds 0-2).
REL_ERR_SKIP_LEAD = 1e-2
RTOL_LINEAR_CONVERGENCE = 1e-2


def out_at(cell, t: float = 0.0, u=None, params=None):
    """Model output at ``params + t·u`` (defaults: the cell's base point and direction)."""
    base = cell.params if params is None else params
    u = cell.direction if u is None else u
    p = {k: v + t * u[k] if k in u else v for k, v in base.items()}
    return functional_call(cell.model, p, (cell.data,))


def fisher_along(cell, u, t_dir: float, *, sweep_u=None) -> float:
    """Brute-force Gaussian σ = 1 directional Fisher ``E‖J u‖²`` at ``θ0 + t·sweep_u``."""
    sweep_u = cell.direction if sweep_u is None else sweep_u
    p = {k: v + t_dir * sweep_u[k] if k in sweep_u else v for k, v in cell.params.items()}
    tangent = {k: u.get(k, torch.zeros_like(v)) for k, v in p.items()}
    _, jv = jvp(lambda q: functional_call(cell.model, q, (cell.data,)), (p,), (tangent,))
    return float(jv.reshape(jv.shape[0], -1).square().sum(1).mean())


@pytest.mark.parametrize("name", list(CELLS))
def test_every_cell_is_consistent(name: str) -> None:
    cell = CELLS[name]()
    assert cell.name == name
    model_params = dict(cell.model.named_parameters())
    assert set(model_params) == set(cell.params)
    for key, val in cell.params.items():
        assert val.dtype == torch.float64
        torch.testing.assert_close(model_params[key].detach(), val, rtol=0, atol=0)
    norm = math.sqrt(sum(float(v.square().sum()) for v in cell.direction.values()))
    assert abs(norm - 1.0) <= ATOL_EXACT
    out = out_at(cell)
    assert torch.isfinite(out).all()
    json.dumps(cell.to_dict())  # JSON-serialisable


def test_constructors_are_deterministic_and_seeded() -> None:
    a, b, c = linear_regression(seed=3), linear_regression(seed=3), linear_regression(seed=4)
    torch.testing.assert_close(a.params["weight"], b.params["weight"], rtol=0, atol=0)
    torch.testing.assert_close(a.data, b.data, rtol=0, atol=0)
    assert not torch.equal(a.params["weight"], c.params["weight"])


def test_constructors_leave_the_global_generator_alone() -> None:
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first = all_cells()
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(999)  # a different global stream gives the same cells
    for a, b in zip(first, all_cells(), strict=True):
        for key in a.params:
            torch.testing.assert_close(a.params[key], b.params[key], rtol=0, atol=0)
        torch.testing.assert_close(a.data, b.data, rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("sigma", [1.0, 0.5])
def test_gaussian_location_fisher_and_kl_closed_form(k: int, sigma: float) -> None:
    """The package's Fisher under the cell's own family (σ read from ``cell.family``)."""
    cell = gaussian_location(k=k, sigma=sigma)
    for t in T_VALUES:
        point = {key: v + t * cell.direction[key] for key, v in cell.params.items()}
        f = float(directional_fisher(cell.model, point, cell.direction, cell.data, cell.family))
        assert f == pytest.approx(k**2 * t ** (2 * (k - 1)) / sigma**2, rel=RTOL_EXACT, abs=0)
        kl = float(out_at(cell, t)[0, 0]) ** 2 / (2 * sigma**2)  # KL(N(t^k, σ²) ‖ N(0, σ²))
        assert f * t**2 == pytest.approx(2 * k**2 * kl, rel=RTOL_EXACT, abs=0)


@pytest.mark.parametrize("act", ["relu", "gelu", "tanh", "silu", "relu2"])
def test_node_death_output_along_probe(act: str) -> None:
    cell = node_death(activation=act)
    x = cell.data
    assert torch.equal(out_at(cell), torch.zeros_like(out_at(cell)))  # dead at the base point
    sigma = {
        "relu": torch.relu,
        "gelu": torch.nn.functional.gelu,
        "tanh": torch.tanh,
        "silu": torch.nn.functional.silu,
        "relu2": lambda z: torch.relu(z) ** 2,
    }[act]
    torch.testing.assert_close(
        x.sum(), torch.zeros((), dtype=torch.float64), atol=ATOL_EXACT, rtol=0
    )
    for t in T_VALUES:
        s = t / math.sqrt(2.0)
        torch.testing.assert_close(out_at(cell, t), s * sigma(s * x), atol=ATOL_EXACT, rtol=0)


def test_squared_relu_probe_is_an_exact_cubic() -> None:
    cell = node_death(activation="relu2")
    for t in T_VALUES:
        expect = (t / math.sqrt(2.0)) ** 3 * torch.relu(cell.data) ** 2
        torch.testing.assert_close(out_at(cell, t), expect, atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize("basis", ["canonical", "permuted"])
def test_swiglu_dead_dimension_output(basis: str) -> None:
    cell = swiglu_dead_dimension(basis=basis)
    j = cell.meta["dead_dim"]
    base = out_at(cell)
    assert torch.equal(base[:, j], torch.zeros_like(base[:, j]))
    xj = cell.data[:, j]
    for t in T_VALUES:
        s = t / math.sqrt(3.0)
        out = out_at(cell, t)
        torch.testing.assert_close(
            out[:, j], s**3 * xj**2 * torch.sigmoid(s * xj), atol=ATOL_EXACT, rtol=0
        )
        live = [i for i in range(base.shape[1]) if i != j]
        torch.testing.assert_close(out[:, live], base[:, live], atol=ATOL_EXACT, rtol=0)
    canon = swiglu_dead_dimension()
    torch.testing.assert_close(out_at(cell, 0.3), out_at(canon, 0.3), atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize("depth", [2, 3, 4, 5, 6])
def test_scalar_chain_closed_form(depth: int) -> None:
    cell = scalar_chain(depth=depth)
    for t in T_VALUES:
        expect = (t / math.sqrt(depth)) ** depth * cell.data
        torch.testing.assert_close(out_at(cell, t), expect, atol=ATOL_EXACT, rtol=RTOL_EXACT)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_relu_chain_closed_form(depth: int) -> None:
    cell = relu_chain(depth=depth)
    for t in T_VALUES:
        expect = (t / math.sqrt(depth)) ** depth * torch.relu(cell.data)
        torch.testing.assert_close(out_at(cell, t), expect, atol=ATOL_EXACT, rtol=RTOL_EXACT)


def _path_product(cell, depth: int):
    mats = [cell.components[f"layer{i + 1}"][f"{i}.weight"] for i in range(depth)]
    prod = mats[0]
    for m in mats[1:]:
        prod = m @ prod
    return prod


@pytest.mark.parametrize("depth", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("basis", ["canonical", "rotated", "permuted"])
def test_matrix_chain_product_closed_form(depth: int, basis: str) -> None:
    cell = matrix_chain(depth=depth, basis=basis)
    canon = matrix_chain(depth=depth)
    base = chain_product(cell.params, depth)
    # Hidden bases are invisible in the end-to-end map.
    torch.testing.assert_close(base, chain_product(canon.params, depth), atol=ATOL_EXACT, rtol=0)
    path = _path_product(cell, depth)
    torch.testing.assert_close(path, _path_product(canon, depth), atol=ATOL_EXACT, rtol=0)
    assert float(torch.linalg.matrix_norm(path)) == pytest.approx(1.0, abs=ATOL_EXACT)
    assert int(torch.linalg.matrix_rank(path)) == 1
    for t in T_VALUES:
        moved = {k: v + t * cell.direction[k] for k, v in cell.params.items()}
        expect = base + (t / math.sqrt(depth)) ** depth * path
        torch.testing.assert_close(chain_product(moved, depth), expect, atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize("depth", [2, 3, 4, 5])
def test_matrix_chain_per_layer_joint_modes_share_the_rate(depth: int) -> None:
    """A–G duality: at θ(t) every layer's joint mode has F = (t²/L)^(L−1)·E‖path x‖², all ℓ."""
    cell = matrix_chain(depth=depth, basis="rotated")
    path_x = cell.data @ _path_product(cell, depth).T
    scale = float(path_x.square().sum(1).mean())
    for layer in range(1, depth + 1):
        comp = cell.components[f"layer{layer}"]
        for t in (1e-2, 0.3):
            f, law = fisher_along(cell, comp, t), (t**2 / depth) ** (depth - 1) * scale
            assert f == pytest.approx(law, rel=RTOL_EXACT, abs=2 * math.sqrt(law) * ATOL_JVP)


def test_matrix_chain_zero_dead_rows_and_columns() -> None:
    cell = matrix_chain(depth=4, width=3)
    j = 2
    for i in range(4):
        w = cell.params[f"{i}.weight"]
        if i > 0:
            assert torch.equal(w[:, j], torch.zeros_like(w[:, j]))
        if i < 3:
            assert torch.equal(w[j], torch.zeros_like(w[j]))
    chain = _chain_model([2, 3, 4])
    assert [tuple(m.weight.shape) for m in chain] == [(3, 2), (4, 3)]
    assert all(isinstance(m, torch.nn.Linear) and m.bias is None for m in chain)


@pytest.mark.parametrize("basis", ["canonical", "rotated", "permuted"])
def test_mlp_node_death_only_the_dead_unit_moves(basis: str) -> None:
    cell = mlp_node_death(basis=basis)
    j = cell.meta["dead_unit"]
    x = cell.data
    w1, mix = cell.params["0.weight"], cell.params["3.weight"]
    assert torch.equal(w1[j], torch.zeros_like(w1[j]))
    assert float(cell.params["0.bias"][j]) == 0.0
    u_in, u_out = cell.direction["0.weight"][j], cell.direction["2.weight"][:, j]
    # Nothing but the dead unit is touched by the probe.
    assert float(cell.direction["0.weight"].square().sum()) == pytest.approx(
        u_in.square().sum().item(), rel=RTOL_EXACT
    )
    for t in T_VALUES:
        delta = out_at(cell, t) - out_at(cell)
        expect = torch.nn.functional.gelu(t * x @ u_in).unsqueeze(1) * (t * u_out) @ mix.T
        torch.testing.assert_close(delta, expect, atol=ATOL_EXACT, rtol=0)
    # Same function in every basis: the output Gram matrix is basis-free (rotated output space).
    canon = mlp_node_death()
    for t in (0.0, 0.5):
        a, b = out_at(cell, t), out_at(canon, t)
        torch.testing.assert_close(a @ a.T, b @ b.T, atol=ATOL_EXACT, rtol=0)


def test_layernorm_kernel_is_orthogonal_to_every_augmented_input() -> None:
    cell = layernorm_kernel()
    ln = cell.model[0]
    gamma, beta = cell.params["0.weight"], cell.params["0.bias"]
    a_star = layernorm_kernel_vector(gamma, beta)
    gen = torch.Generator().manual_seed(11)
    wild = torch.cat(
        [
            cell.data,
            1e3 * torch.randn(64, 6, generator=gen, dtype=torch.float64) - 50.0,
            1e-2 * torch.randn(64, 6, generator=gen, dtype=torch.float64),
        ]
    )
    with torch.no_grad():
        ln_out = ln(wild)
    aug = torch.cat([ln_out, torch.ones(wild.shape[0], 1, dtype=torch.float64)], dim=1)
    torch.testing.assert_close(
        aug @ a_star, torch.zeros(wild.shape[0], dtype=torch.float64), atol=ATOL_EXACT, rtol=0
    )
    base = out_at(cell)
    for t in (*T_VALUES, 10.0):
        torch.testing.assert_close(out_at(cell, t), base, atol=ATOL_EXACT * (1 + t), rtol=0)


def test_rmsnorm_analogue_moves_the_output_linearly() -> None:
    cell = rmsnorm_no_kernel()
    gamma = cell.params["0.weight"]
    with torch.no_grad():
        pairing = cell.model[0](cell.data) @ (1.0 / gamma)
    assert float(pairing.std()) > 0.1  # ⟨γ⁻¹, RMSNorm(x)⟩ is not constant: no kernel
    # The probe is the unit-norm (g γ⁻¹ᵀ, 0)/‖γ⁻¹‖ with g a unit vector.
    inv = 1.0 / gamma
    u = cell.direction["1.weight"]
    g = u @ inv
    g = g / torch.linalg.vector_norm(g)
    torch.testing.assert_close(u, torch.outer(g, inv) / inv.norm(), atol=ATOL_EXACT, rtol=0)
    # Output change t·g·Σ_i x_i/(rms(x)·‖γ⁻¹‖), rms(x) = √(mean x² + ε), ε = RMSNorm's default.
    x = cell.data
    assert cell.model[0].eps is None  # torch then uses finfo(dtype).eps
    rms = (x.square().mean(1) + torch.finfo(x.dtype).eps).sqrt()
    per_t = torch.outer(x.sum(1) / rms, g) / inv.norm()
    assert float(per_t.abs().max()) > 0.1
    for t in (*T_VALUES, 1.0, 2.0):
        torch.testing.assert_close(
            out_at(cell, t) - out_at(cell), t * per_t, atol=ATOL_EXACT, rtol=0
        )


def test_ce_logit_shift_leaves_softmax_unchanged() -> None:
    cell = ce_logit_shift()
    p0 = torch.softmax(out_at(cell), dim=-1)
    for t in (*T_VALUES, 5.0):
        torch.testing.assert_close(
            torch.softmax(out_at(cell, t), dim=-1), p0, atol=ATOL_EXACT, rtol=0
        )


@pytest.mark.parametrize("basis", ["canonical", "permuted"])
def test_relu_rescale_orbit_and_straight_probe(basis: str) -> None:
    cell = relu_rescale(basis=basis)
    j, nu = cell.meta["unit"], cell.meta["tangent_norm"]
    p = cell.params
    base = out_at(cell)
    for c in (0.5, 3.0):
        q = dict(p)
        q["0.weight"] = p["0.weight"].clone()
        q["0.weight"][j] *= c
        q["0.bias"] = p["0.bias"].clone()
        q["0.bias"][j] *= c
        q["2.weight"] = p["2.weight"].clone()
        q["2.weight"][:, j] /= c
        torch.testing.assert_close(out_at(cell, params=q), base, atol=ATOL_EXACT, rtol=0)
    unit = (
        torch.relu(cell.data @ p["0.weight"][j] + p["0.bias"][j]).unsqueeze(1) * p["2.weight"][:, j]
    )
    assert float(unit.abs().max()) > 0.1  # the unit is live
    for t in T_VALUES:
        torch.testing.assert_close(
            out_at(cell, t) - base, -((t / nu) ** 2) * unit, atol=ATOL_EXACT, rtol=0
        )


@pytest.mark.parametrize("basis", ["canonical", "rotated", "permuted"])
def test_qk_rotation_generator_is_a_rotation_tangent(basis: str) -> None:
    cell = qk_rotation(basis=basis)
    torch.testing.assert_close(
        out_at(cell, 0.3), out_at(qk_rotation(), 0.3), atol=ATOL_EXACT, rtol=0
    )
    wq, wk = cell.params["q_proj.weight"], cell.params["k_proj.weight"]
    dq, dk = cell.direction["q_proj.weight"], cell.direction["k_proj.weight"]
    skew = -dq @ torch.linalg.pinv(wq)  # δq = −S W_q with W_q of full row rank
    torch.testing.assert_close(skew, -skew.T, atol=ATOL_EXACT, rtol=0)
    torch.testing.assert_close(dk, -skew @ wk, atol=ATOL_EXACT, rtol=0)
    # W_qᵀW_k (what the scores see) is invariant to first order, moves at t² by δqᵀδk.
    torch.testing.assert_close(
        dq.T @ wk + wq.T @ dk, torch.zeros_like(wq.T @ wk), atol=ATOL_EXACT, rtol=0
    )
    assert float((dq.T @ dk).abs().max()) > 1e-3
    # The exact orbit (R = exp(S)) leaves the output unchanged.
    rot = torch.linalg.matrix_exp(0.7 * skew)
    q = dict(cell.params, **{"q_proj.weight": rot @ wq, "k_proj.weight": rot @ wk})
    torch.testing.assert_close(out_at(cell, params=q), out_at(cell), atol=ATOL_EXACT, rtol=0)
    x = cell.data
    for t in T_VALUES:
        qq, kk = wq + t * dq, wk + t * dk
        scores = x @ qq.T @ kk @ x.transpose(1, 2)
        expect = x @ (wq.T @ wk + t**2 * dq.T @ dk) @ x.transpose(1, 2)
        torch.testing.assert_close(scores, expect, atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize("skip", [True, False])
def test_residual_path_output_matches_path_expansion(skip: bool) -> None:
    blocks = 3
    cell = residual_path(skip=skip, blocks=blocks)
    m = blocks + 2
    u = cell.direction
    x = cell.data
    for t in T_VALUES:
        z = x @ (t * u["inp.weight"]).T
        for i in range(blocks):
            step = z @ (t * u[f"blocks.{i}.weight"]).T
            z = z + step if skip else step
        expect = z @ (t * u["out.weight"]).T
        torch.testing.assert_close(out_at(cell, t) - out_at(cell), expect, atol=ATOL_EXACT, rtol=0)
    # Leading coefficient of the shortest weighted path: t^κ with κ = 2 (skip) or m (plain).
    kappa = cell.meta["kappa"]
    assert kappa == (2 if skip else m)
    if skip:
        lead = x @ (u["out.weight"] @ u["inp.weight"]).T
    else:
        prod = u["inp.weight"]
        for i in range(blocks):
            prod = u[f"blocks.{i}.weight"] @ prod
        lead = x @ (u["out.weight"] @ prod).T
    assert float(lead.abs().max()) > 1e-3
    if not skip:
        # Plain: one path, the change is exactly t^m·lead (compared raw: dividing by t^m would
        # amplify the rounding of out(t) − out(0) by t^(−m)).
        for t in (0.7, 1.0, 2.0):
            delta = out_at(cell, t) - out_at(cell)
            torch.testing.assert_close(delta, t**kappa * lead, atol=ATOL_EXACT, rtol=0)
        return
    # Skip: the longer paths add a relative O(t) correction, so Δ/t² converges to lead linearly
    # in t: the relative error is small and shrinks tenfold when t does.
    errs = []
    for t in (1e-3, 1e-4):
        ratio = (out_at(cell, t) - out_at(cell)) / t**kappa
        errs.append(float(torch.linalg.matrix_norm(ratio - lead) / torch.linalg.matrix_norm(lead)))
    assert errs[1] < REL_ERR_SKIP_LEAD
    assert errs[1] == pytest.approx(errs[0] / 10, rel=RTOL_LINEAR_CONVERGENCE, abs=0)


@pytest.mark.parametrize("dim", [1, 2])
def test_conv_node_death_dead_channel(dim: int) -> None:
    cell = conv_node_death(dim=dim)
    j = cell.meta["dead_channel"]
    with torch.no_grad():
        hidden = cell.model[1](cell.model[0](cell.data))
    assert torch.equal(hidden[:, j], torch.zeros_like(hidden[:, j]))
    conv = torch.nn.functional.conv1d if dim == 1 else torch.nn.functional.conv2d
    a = cell.direction["0.weight"][j : j + 1]
    g = cell.direction["2.weight"][:, j : j + 1]
    for t in T_VALUES:
        pre = conv(cell.data, t * a)
        expect = conv(torch.tanh(pre), t * g).flatten(1)
        torch.testing.assert_close(out_at(cell, t) - out_at(cell), expect, atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize(("dim", "depth"), [(1, 3), (2, 2)])
@pytest.mark.parametrize("basis", ["canonical", "rotated", "permuted"])
def test_conv_chain_adds_the_path_network(dim: int, depth: int, basis: str) -> None:
    cell = conv_chain(dim=dim, depth=depth, basis=basis)
    path_params = {
        f"{i}.weight": cell.components[f"layer{i + 1}"][f"{i}.weight"] for i in range(depth)
    }
    path_out = functional_call(cell.model, path_params, (cell.data,))
    assert float(path_out.abs().max()) > 1e-3
    for t in T_VALUES:
        expect = (t / math.sqrt(depth)) ** depth * path_out
        torch.testing.assert_close(out_at(cell, t) - out_at(cell), expect, atol=ATOL_EXACT, rtol=0)
    canon = conv_chain(dim=dim, depth=depth)
    torch.testing.assert_close(out_at(cell, 0.2), out_at(canon, 0.2), atol=ATOL_EXACT, rtol=0)


def test_offset_cell_base_point_lies_on_the_probe_line() -> None:
    cell = node_death_offset(offset=1e-3)
    along = sum(float((cell.direction[k] * v).sum()) for k, v in cell.params.items())
    assert along == pytest.approx(cell.meta["offset"], rel=RTOL_EXACT, abs=0)
    assert cell.meta["offset"] == pytest.approx(math.sqrt(2.0) * 1e-3, rel=RTOL_EXACT, abs=0)
    snapped = {k: v - along * cell.direction[k] for k, v in cell.params.items()}
    for v in snapped.values():
        assert float(v.abs().max()) <= ATOL_EXACT
    assert cell.snap


def test_all_cells_have_unique_names_in_table_order() -> None:
    cells = all_cells(seed=1)
    assert [c.name for c in cells] == list(CELLS)
    assert len(set(CELLS)) == len(CELLS)
