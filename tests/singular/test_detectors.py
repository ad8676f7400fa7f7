"""Detectors: near-kernel rule, duality chains, closed-form gauges, registry protocol."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from neuromanifold.cells.planted import (
    planted_deep_linear,
    planted_embedding,
    planted_mlp,
    planted_transformer,
)
from neuromanifold.singular.classify import gauge_overlap
from neuromanifold.singular.detectors import (
    Candidate,
    DetectionContext,
    DetectorRegistry,
    LinearDetector,
    block_spectrum,
    default_registry,
    layernorm_kernel,
    near_kernel,
    trace_graph,
)
from neuromanifold.singular.detectors.base import normalise
from neuromanifold.singular.detectors.layernorm import kernel_cos, kernel_cos_reference
from neuromanifold.singular.detectors.linear import TAU_A
from neuromanifold.singular.detectors.near_kernel import near_kernel_reference
from neuromanifold.singular.detectors.rescale_detectors import ReLURescaleDetector
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Categorical, Gaussian

ATOL_EXACT = 1e-12
# eigenvectors from eigh carry an error of order ε·‖A‖/gap (a few 1e-12 for these factors)
ATOL_EIGVEC = 1e-10
COS_LN = 0.9999  # spec §9.3: |cos| to the closed-form LayerNorm kernel
# |⟨u_one-sided, u_chain⟩| of a one-sided mode left beside a duality chain: orthogonal eigenvectors
# of one factor (measured ≤ 1.4e-17 on the depth-4 chain)
OVERLAP_EXPLAINED = 1e-12
# ‖P_span t̂‖ of a unit tangent that is itself one of the generators: 1 up to the SVD's rounding
ATOL_SPAN = 1e-12


def _context(p, n: int | None = None) -> DetectionContext:
    return DetectionContext.from_model(p.model, p.data if n is None else p.data[:n], p.family)


def _propose(ctx: DetectionContext) -> list[Candidate]:
    reg = default_registry()
    return [
        c
        for name, mod in ctx.model.named_modules()
        for det in reg.for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]


def test_near_kernel_threshold_and_gap() -> None:
    assert near_kernel(torch.tensor([1.0, 2.0, 3.0]), 1e-3) == []
    assert near_kernel(torch.tensor([0.0, 0.0, 1.0]), 1e-3) == [0, 1]
    # 2e-4 and 9e-4 are both below τ but only a decade above 9e-4 would make the set clean
    assert near_kernel(torch.tensor([2e-4, 9e-4, 2e-3, 1.0]), 1e-3) == []
    assert near_kernel(torch.zeros(3), 1e-3) == [0, 1, 2]


@pytest.mark.parametrize("seed", range(6))
def test_near_kernel_matches_the_shrinking_reference(seed: int) -> None:
    """Fast prefix selection against the one-at-a-time reference: ties, zeros, gaps, no gaps."""
    g = torch.Generator().manual_seed(seed)
    n = 40
    logs = -12 * torch.rand(n, generator=g, dtype=torch.float64)
    ev = 10.0**logs
    ev[torch.randperm(n, generator=g)[:5]] = 0.0  # exact zeros
    ev[torch.randperm(n, generator=g)[:6]] = float(ev[0])  # ties
    ev[torch.randperm(n, generator=g)[:3]] = -1e-14  # tiny negatives (clamped)
    for tau in (1e-1, 1e-3, 1e-6, 1e-9):
        for gap in (1.0, 10.0, 1e3):
            assert near_kernel(ev, tau, gap=gap) == near_kernel_reference(ev, tau, gap=gap)
    dense = torch.linspace(1e-3, 1.0, 200, dtype=torch.float64)  # no decade gap anywhere
    assert near_kernel(dense, 1e-1) == near_kernel_reference(dense, 1e-1) == []


@pytest.mark.parametrize("depth", [2, 4])
def test_duality_chain_spans_every_layer_in_the_kernels(depth: int) -> None:
    """Each block of the chain writes into ker W_{ℓ+1} and reads from ker of range(W_{ℓ−1})ᵀ."""
    p = planted_deep_linear(depth=depth, seed=depth)
    ctx = _context(p)
    cands = [c for c in _propose(ctx) if c.detector == "duality"]
    assert len(cands) == 1
    (c,) = cands
    assert c.layers == tuple(str(i) for i in range(depth))
    ws = [ctx.params[f"{i}.weight"] for i in range(depth)]
    for ell in range(depth):
        block = c.u[f"{ell}.weight"]
        assert float(block.norm()) == pytest.approx(depth**-0.5, abs=ATOL_EXACT)
        if ell + 1 < depth:  # the written direction is never read by the next layer
            assert float((ws[ell + 1] @ block).abs().max()) < ATOL_EIGVEC
        if ell > 0:  # the read direction is never written by the previous layer
            assert float((block @ ws[ell - 1]).abs().max()) < ATOL_EIGVEC
        # the rank-one block's out / in vectors lie in the near-kernels of this block's G / A
        out_vecs, sv, in_vecs = torch.linalg.svd(block)
        assert float(sv[1]) < ATOL_EIGVEC * float(sv[0])
        spec = block_spectrum(ctx, str(ell))
        if ell + 1 < depth:
            ker_g = spec.g_vecs[:, spec.ker_g]
            assert float((ker_g.T @ out_vecs[:, 0]).norm()) == pytest.approx(1.0, abs=ATOL_EIGVEC)
        if ell > 0:
            ker_a = spec.a_vecs[:, spec.ker_a]
            assert float((ker_a.T @ in_vecs[0]).norm()) == pytest.approx(1.0, abs=ATOL_EIGVEC)
    # kernel directions explained by the chain are not proposed again one-sided
    one_sided = [x for x in _propose(ctx) if x.detector in ("kfac-A", "kfac-G")]
    if depth == 2:  # ker G of block 0 and ker A of block 1 are the chain's one vector: no others
        assert [len(block_spectrum(ctx, b).ker_g) for b in ("0", "1")] == [1, 0]
        assert [len(block_spectrum(ctx, b).ker_a) for b in ("0", "1")] == [0, 1]
        assert one_sided == []
    else:  # random products of square matrices also have small, live singular values: those remain
        assert one_sided
        assert all(x.overlap(c) < OVERLAP_EXPLAINED for x in one_sided)


def test_mlp_node_death_chain_touches_the_dead_unit() -> None:
    p = planted_mlp(activation="gelu", seed=3)
    ctx = _context(p)
    (c,) = [c for c in _propose(ctx) if c.detector == "duality"]
    j = p.dead["0"]
    rows = c.u["0.weight"].norm(dim=1)
    cols = c.u["2.weight"].norm(dim=0)
    assert float(rows[j]) == pytest.approx(float(rows.norm()), abs=ATOL_EIGVEC)
    assert float(cols[j]) == pytest.approx(float(cols.norm()), abs=ATOL_EIGVEC)


def test_layernorm_kernel_matches_measured_bottom_direction() -> None:
    """Companion §9.3: bottom eigenvector of the centred post-LN covariance is γ⁻¹/‖γ⁻¹‖."""
    p = planted_transformer(n=16, seq=3)
    ln = p.model.ln1
    out = ln(p.data).reshape(-1, ln.normalized_shape[0]).detach()
    cov = torch.cov(out.T)
    _, vecs = torch.linalg.eigh(cov)
    inv = 1.0 / ln.weight.detach()
    assert float((vecs[:, 0] @ inv).abs() / inv.norm()) >= COS_LN
    a_star = layernorm_kernel(ln.weight.detach(), ln.bias.detach())
    aug = torch.cat([out, torch.ones(out.shape[0], 1, dtype=out.dtype)], 1)
    assert float((aug @ a_star).abs().max()) < ATOL_EXACT


@pytest.mark.parametrize(
    ("gamma", "beta"),
    [((0.0, 2.0, 4.0), (0.3, 0.5, 0.5)), ((0.0, 2.0, 0.0), (0.3, 0.5, -0.7))],
)
def test_layernorm_kernel_with_zero_gains(gamma, beta) -> None:
    """Where some ``γ_i = 0`` the outputs ``LN(x)_i = β_i`` are constants: the kernel is
    ``a* ∝ (Σ_{γ_i=0} e_i, −Σ_{γ_i=0} β_i)`` (the ``γ⁻¹`` entries of the others are dropped)."""
    ln = nn.LayerNorm(3).double()
    with torch.no_grad():
        ln.weight.copy_(torch.tensor(gamma))
        ln.bias.copy_(torch.tensor(beta))
    a_star = layernorm_kernel(ln.weight.detach(), ln.bias.detach())
    zero = torch.tensor(gamma, dtype=torch.float64) == 0
    want = torch.cat([zero.double(), -(zero.double() * torch.tensor(beta)).sum().reshape(1)])
    torch.testing.assert_close(a_star, want / want.norm(), atol=ATOL_EXACT, rtol=0)
    x = torch.randn(20, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = ln(x).detach()
    aug = torch.cat([out, torch.ones(out.shape[0], 1, dtype=out.dtype)], 1)
    assert float((aug @ a_star).abs().max()) < ATOL_EXACT


def test_every_layernorm_linear_pair_gets_the_kernel_and_rmsnorm_none() -> None:
    ctx = _context(planted_transformer(n=16, seq=3))
    ln = [c for c in _propose(ctx) if c.detector == "ln-kernel"]
    pairs = {(c.info["norm"], c.info["consumer"]) for c in ln}
    assert pairs == {
        ("ln1", "attn.q_proj"),
        ("ln1", "attn.k_proj"),
        ("ln1", "attn.v_proj"),
        ("ln2", "fc1"),
    }
    assert all(c.info["closed_form_cos"] >= COS_LN and c.gauge == "flat" for c in ln)
    ctx_rms = _context(planted_transformer(norm="rmsnorm", n=16, seq=3))
    assert not [c for c in _propose(ctx_rms) if c.detector == "ln-kernel"]
    out = ctx_rms.model.ln1(ctx_rms.data).reshape(-1, 8).detach()
    ev = torch.linalg.eigvalsh(torch.cov(out.T))
    # no kernel direction after RMSNorm: the smallest eigenvalue is not even near-kernel for the
    # one-sided rule (relative size 0.2-0.25 over seeds 0-3; after LayerNorm ≈ 1e-16)
    assert float(ev[0] / ev[-1]) > TAU_A


def test_qk_rotation_leaves_scores_invariant_to_first_order() -> None:
    p = planted_transformer(n=8, seq=3)
    ctx = _context(p)
    qk = [c for c in _propose(ctx) if c.detector == "qk-rotation"]
    assert len(qk) == p.model.attn.n_heads
    x = p.model.ln1(p.data).detach()
    wq, bq = ctx.params["attn.q_proj.weight"], ctx.params["attn.q_proj.bias"]
    wk, bk = ctx.params["attn.k_proj.weight"], ctx.params["attn.k_proj.bias"]
    q, k = x @ wq.T + bq, x @ wk.T + bk
    for c in qk:
        dq = x @ c.u["attn.q_proj.weight"].T + c.u["attn.q_proj.bias"]
        dk = x @ c.u["attn.k_proj.weight"].T + c.u["attn.k_proj.bias"]
        first_order = dq @ k.transpose(-1, -2) + q @ dk.transpose(-1, -2)
        assert float(first_order.abs().max()) < ATOL_EXACT
        assert c.gauge == "curved" and len(c.gauge_generators) == 6 + 10  # so(4), sym(4)
    vo = [c for c in _propose(ctx) if c.detector == "vo-rescale"]
    assert len(vo) == p.model.attn.n_heads


def test_relu_rescale_orbit_is_exact_and_ce_shift_is_flat() -> None:
    p = planted_mlp(activation="relu", categorical=True, seed=1)
    ctx = _context(p)
    cands = _propose(ctx)
    (rescale,) = [c for c in cands if c.detector == "relu-rescale"]
    j = rescale.info["unit"]
    m = copy.deepcopy(p.model)
    with torch.no_grad():
        m[0].weight[j] *= 3.0
        m[0].bias[j] *= 3.0
        m[2].weight[:, j] /= 3.0
    torch.testing.assert_close(m(p.data), p.model(p.data), atol=ATOL_EXACT, rtol=0)
    (shift,) = [c for c in cands if c.detector == "ce-shift"]
    assert set(shift.u) == {"2.bias"}
    # the logits-layer G kernel (𝟙) is left to the CE-shift detector
    assert not [c for c in cands if c.detector == "kfac-G" and c.layers == ("2",)]


def test_unseen_embedding_rows() -> None:
    p = planted_embedding()
    ctx = _context(p)
    ctx.cache["embedding_seen"] = {"emb": torch.unique(p.data)}
    (c,) = [c for c in _propose(ctx) if c.detector == "embedding-unseen"]
    assert c.info["unseen_rows"] == 4
    assert float(c.u["emb.weight"][:6].abs().max()) == 0.0


def test_registry_accepts_a_new_detector_and_rejects_non_detectors() -> None:
    class BilinearNothing:
        """Example plug-in: covers nn.Bilinear, proposes nothing."""

        name = "bilinear"

        def applies_to(self, module: nn.Module) -> bool:
            return isinstance(module, nn.Bilinear)

        def propose(self, name, module, ctx):
            return []

    reg = DetectorRegistry([LinearDetector()])
    assert not reg.covers(nn.Bilinear(2, 2, 2))
    reg.register(BilinearNothing())
    assert reg.covers(nn.Bilinear(2, 2, 2)) and len(reg) == 2
    with pytest.raises(TypeError, match="detector must have name, applies_to"):
        reg.register(object())


def test_graph_records_elementwise_paths_and_output() -> None:
    p = planted_mlp(activation="relu2")
    g = trace_graph(p.model, p.data[:4])
    assert g.consumers == {"0": ("2",)} and g.output == "2"
    assert g.via[("0", "2")] == ("SquaredReLU",)


@pytest.mark.parametrize("categorical", [True, False])
def test_categorical_family_is_used_for_the_shift(categorical: bool) -> None:
    """The CE logit shift ``Δb = 𝟙`` on the last layer is proposed for a categorical read only
    (under a Gaussian likelihood shifting every output changes the fit)."""
    p = planted_mlp(activation="tanh", categorical=categorical)
    assert isinstance(p.family, Categorical if categorical else Gaussian)
    shifts = [c for c in _propose(_context(p)) if c.detector == "ce-shift"]
    if not categorical:
        assert shifts == []
        return
    (shift,) = shifts
    assert shift.layers == ("2",) and set(shift.u) == {"2.bias"}
    c = shift.u["2.bias"].numel()
    torch.testing.assert_close(
        shift.u["2.bias"], torch.full((c,), c**-0.5, dtype=torch.float64), atol=ATOL_EXACT, rtol=0
    )


def test_squared_relu_rescale_has_degree_two() -> None:
    p = planted_mlp(activation="relu2", seed=2)
    ctx = _context(p)
    (rescale,) = [c for c in _propose(ctx) if c.detector == "relu-rescale"]
    j, deg = rescale.info["unit"], rescale.info["degree"]
    assert deg == 2
    # tangent: (W1[j], b1[j], −2·W2[:, j]) up to the common normalisation
    scale = float(rescale.u["0.weight"][j].norm() / ctx.params["0.weight"][j].norm())
    torch.testing.assert_close(
        rescale.u["2.weight"][:, j],
        -2.0 * scale * ctx.params["2.weight"][:, j],
        atol=ATOL_EXACT,
        rtol=0,
    )
    m = copy.deepcopy(p.model)
    with torch.no_grad():
        m[0].weight[j] *= 3.0
        m[0].bias[j] *= 3.0
        m[2].weight[:, j] /= 9.0
    torch.testing.assert_close(m(p.data), p.model(p.data), atol=ATOL_EXACT, rtol=0)


def test_error_normalise_a_zero_direction() -> None:
    with pytest.raises(ValueError, match="candidate direction is zero"):
        normalise({"w": torch.zeros(2, 3, dtype=torch.float64), "b": torch.zeros(2)})


def test_error_overlap_of_candidates_with_mismatched_shapes() -> None:
    a = Candidate(layers=("0",), detector="kfac-A", u={"0.weight": torch.ones(2, 3) / 6**0.5})
    b = Candidate(layers=("0",), detector="kfac-G", u={"0.weight": torch.ones(3, 2) / 6**0.5})
    with pytest.raises(
        ValueError, match=r"tensor '0.weight' has shape \(2, 3\) in one candidate and \(3, 2\)"
    ):
        a.overlap(b)


class PlantedStub:
    """The fields `_context` reads from a planted net."""

    def __init__(self, model: nn.Module, data: torch.Tensor, family) -> None:
        self.model, self.data, self.family = model, data, family


def _relu_mlp(seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    """3→5→2 ReLU MLP, all units live (Gaussian weights, probes in general position)."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)).double()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen, dtype=torch.float64))
    return model, torch.randn(64, 3, generator=gen, dtype=torch.float64)


def _unit_tangent(model: nn.Module, j: int) -> dict[str, torch.Tensor]:
    """Closed form ``(W1[j], b1[j], −W2[:, j])`` of unit ``j``'s rescaling orbit (degree 1)."""
    w1, b1, w2 = (model[0].weight.detach(), model[0].bias.detach(), model[2].weight.detach())
    t = {k: torch.zeros_like(v) for k, v in (("0.weight", w1), ("0.bias", b1), ("2.weight", w2))}
    t["0.weight"][j], t["0.bias"][j], t["2.weight"][:, j] = w1[j], b1[j], -w2[:, j]
    return t


def test_relu_rescale_generators_span_every_units_tangent() -> None:
    """Spec §6.5(a)(b): the gauge span holds each unit's orbit tangent, not only the read unit's;
    a non-strongest unit's exact tangent lies in it and reads as a curved gauge with them."""
    model, x = _relu_mlp()
    fam = Gaussian(sigma=1.0)
    ctx = _context(PlantedStub(model, x, fam))
    (c,) = [c for c in _propose(ctx) if c.detector == "relu-rescale"]
    j = c.info["unit"]
    assert len(c.gauge_generators) == 5 and c.info["generator_units"][0] == j
    assert "truncated" not in c.info
    others = [i for i in range(5) if i != j]
    for i in others:
        t = _unit_tangent(model, i)
        assert gauge_overlap(t, c.gauge_generators) == pytest.approx(1.0, abs=ATOL_SPAN)
        # the tangent is exact: the orbit (c·w_in, c·b_in, w_out/c) leaves the outputs unchanged
        m = copy.deepcopy(model)
        with torch.no_grad():
            m[0].weight[i] *= 3.0
            m[0].bias[i] *= 3.0
            m[2].weight[:, i] /= 3.0
        torch.testing.assert_close(m(x), model(x), atol=ATOL_EXACT, rtol=0)
    i = others[0]
    r = read_direction(
        ctx.model, ctx.params, _unit_tangent(model, i), x, fam, gauge_generators=c.gauge_generators
    )
    assert r.klass.value == "curved_gauge"
    capped = ReLURescaleDetector(max_units=2).propose("0", ctx.model[0], ctx)
    (c2,) = capped
    assert len(c2.gauge_generators) == 2
    assert c2.info["truncated"] == {"cap": 2, "found": 5, "kept": 2, "of": "generators"}


def _ln_net(*, n: int, ln_bias: bool, head_bias: bool, beta: str = "random"):
    """Linear(4→16) → LayerNorm(16) → Linear(16→3) on ``n`` probes (γ ∈ [0.5, 2])."""
    gen = torch.Generator().manual_seed(n)
    net = nn.Sequential(
        nn.Linear(4, 16), nn.LayerNorm(16, bias=ln_bias), nn.Linear(16, 3, bias=head_bias)
    ).double()
    with torch.no_grad():
        net[1].weight.copy_(0.5 + 1.5 * torch.rand(16, generator=gen, dtype=torch.float64))
        if ln_bias:
            b = torch.randn(16, generator=gen, dtype=torch.float64)
            net[1].bias.copy_(b if beta == "random" else torch.zeros(16))
    x = torch.randn(n, 4, generator=gen, dtype=torch.float64)
    return PlantedStub(net, x, Gaussian(sigma=1.0))


@pytest.mark.parametrize("n", [8, 64])
def test_layernorm_cos_is_the_projection_on_a_degenerate_kernel(n: int) -> None:
    """With more LN outputs than the probes span, ker A of the consumer is wide; ``a*`` lies in
    it (``closed_form_cos = ‖P_K a*‖ ≈ 1``) though it is no single eigenvector."""
    ctx = _context(_ln_net(n=n, ln_bias=True, head_bias=True))
    (c,) = [c for c in _propose(ctx) if c.detector == "ln-kernel"]
    spec = block_spectrum(ctx, "2")
    assert c.info["kernel_dim"] == len(spec.ker_a) > 1
    assert c.info["closed_form_cos"] >= COS_LN
    a_star = layernorm_kernel(ctx.params["1.weight"], ctx.params["1.bias"])
    cos, dim = kernel_cos_reference(a_star, spec)
    assert c.info["closed_form_cos"] == pytest.approx(cos, abs=ATOL_EXACT)
    assert (cos, dim) == pytest.approx(kernel_cos(a_star, spec), abs=ATOL_EXACT)
    # no single kernel eigenvector carries a* (the former measure was arbitrary here)
    assert float((spec.a_vecs[:, spec.ker_a].T @ a_star).abs().max()) < COS_LN


@pytest.mark.parametrize(("ln_bias", "beta"), [(False, "none"), (True, "zero")])
def test_layernorm_kernel_on_a_consumer_without_bias(ln_bias: bool, beta: str) -> None:
    """``⟨γ⁻¹, LN(x)⟩ = ⟨γ⁻¹, β⟩ = 0`` without β (or with β = 0): ``ΔW = g γ⁻¹ᵀ`` changes no
    output of a bias-free consumer."""
    p = _ln_net(n=64, ln_bias=ln_bias, head_bias=False, beta=beta)
    ctx = _context(p)
    (c,) = [c for c in _propose(ctx) if c.detector == "ln-kernel"]
    assert set(c.u) == {"2.weight"} and c.gauge == "flat"
    assert c.info["closed_form_cos"] >= COS_LN
    h = p.model[1](p.model[0](p.data)).detach()
    assert float((h @ c.u["2.weight"].T).abs().max()) < ATOL_EXACT


def test_layernorm_kernel_skips_a_bias_free_consumer_when_beta_breaks_it() -> None:
    p = _ln_net(n=64, ln_bias=True, head_bias=False, beta="random")
    a_star = layernorm_kernel(p.model[1].weight.detach(), p.model[1].bias.detach())
    assert abs(float(a_star[-1])) > 1e-3  # ⟨γ⁻¹, β⟩ ≠ 0: no exact kernel without a bias
    assert not [c for c in _propose(_context(p)) if c.detector == "ln-kernel"]


def test_context_from_model_works_on_a_float64_eval_copy() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).train()
    x = torch.randn(16, 3, dtype=torch.float64)
    ctx = DetectionContext.from_model(model, x, Gaussian(), graph_samples=4)
    assert ctx.model is not model and not ctx.model.training and model.training
    assert next(model.parameters()).dtype == torch.float32  # the caller's module is untouched
    assert all(p.dtype == torch.float64 for p in ctx.params.values())
    assert ctx.graph.consumers["0"] == ("2",) and set(ctx.factors.blocks) == {"0", "2"}
    assert ctx.factors.n_samples == 16 and ctx.data is x


class _LNThen(nn.Module):
    """``fc(step(ln x))``: the LayerNorm kernel identity holds at ``fc``'s input only when
    ``step`` passes the norm's output through unchanged."""

    def __init__(self, step) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(5)
        self.fc = nn.Linear(5, 3)
        self.step = step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.step(self.ln(x)))


@pytest.mark.parametrize(
    ("step", "proposed"), [(nn.Identity(), True), (nn.Dropout(0.1), True), (nn.GELU(), False)]
)
def test_layernorm_kernel_only_through_pass_through_steps(step, proposed: bool) -> None:
    torch.manual_seed(0)
    model = _LNThen(step).double().eval()
    with torch.no_grad():
        model.ln.weight.uniform_(0.5, 1.5)
        model.ln.bias.uniform_(-0.5, 0.5)
    ctx = DetectionContext.from_model(model, torch.randn(40, 5, dtype=torch.float64), Gaussian())
    assert ctx.graph.consumers["ln"] == ("fc",)  # an edge either way
    cands = [c for c in _propose(ctx) if c.detector == "ln-kernel"]
    assert len(cands) == (1 if proposed else 0)
