"""K-FAC / KFC factors: brute-force oracle, curvlinops cross-check, conventions, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from neuromanifold.singular.blocks import is_supported_block, patches
from neuromanifold.singular.factors import block_fisher_reference, kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian

ATOL_EXACT = 1e-12
ATOL_CURVLINOPS = 1e-10
# Monte Carlo G: relative Frobenius error in units of 1/√(mc_samples·N); over seeds 0-19 the
# largest was 1.7 (Categorical), 3.2 (Gaussian σ = 0.5), 0.9 ((N, T, C) logits, T = 5)
MC_SCALE_MULTIPLE = 6.0


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()


def _cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(2, 3, kernel_size=3, padding=1, stride=2),
        nn.ReLU(),
        nn.Conv2d(3, 4, kernel_size=2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 5),
    ).double()


def test_single_linear_gaussian_kfac_is_exact() -> None:
    torch.manual_seed(1)
    model = nn.Linear(3, 2).double()
    x = torch.randn(7, 3, dtype=torch.float64)
    fam = Gaussian(sigma=0.5)
    fac = kfac_factors(model, x, fam)
    ref = block_fisher_reference(model, x, fam, "")
    torch.testing.assert_close(torch.kron(fac[""].A, fac[""].G), ref, atol=ATOL_EXACT, rtol=0)


@pytest.mark.parametrize("buffer_bytes", [1, 10**9])
def test_factors_match_per_sample_scores_on_mlp(monkeypatch, buffer_bytes: int) -> None:
    """A = mean ā āᵀ and G = mean Σ_c g_c g_cᵀ with g_c = J_sᵀ S[:, c], computed literally
    (G folded after every backward column, or once per batch)."""
    import neuromanifold.singular.factors as factors_mod

    monkeypatch.setattr(factors_mod, "G_BUFFER_BYTES", buffer_bytes)
    model = _mlp()
    x = torch.randn(5, 4, dtype=torch.float64)
    fac = kfac_factors(model, x, Categorical(), batch_size=2)
    a1 = torch.cat([x, torch.ones(5, 1, dtype=torch.float64)], 1)
    torch.testing.assert_close(fac["0"].A, a1.T @ a1 / 5, atol=ATOL_EXACT, rtol=0)
    g_ref = torch.zeros(6, 6, dtype=torch.float64)
    for i in range(5):
        s = model[0](x[i])
        jac = torch.func.jacrev(lambda s_: model[2](torch.tanh(s_)))(s)  # (3, 6)
        p = torch.softmax(model(x[i]), -1)
        h = torch.diag(p) - torch.outer(p, p)
        g_ref += jac.T @ h @ jac
    torch.testing.assert_close(fac["0"].G, g_ref / 5, atol=ATOL_EXACT, rtol=0)
    assert fac.n_forward_passes == 3
    assert fac["0"].n_positions == 1


def test_g_buffer_size_does_not_change_the_factors(monkeypatch) -> None:
    """Folding the output-gradient rows into ``G`` after every backward column (a 1-byte buffer)
    or once per batch gives the same factors (CNN: positions, several batches)."""
    import neuromanifold.singular.factors as factors_mod

    model = _cnn(3)
    x = torch.randn(5, 2, 8, 8, dtype=torch.float64)
    out = {}
    for size in (1, 10**9):
        monkeypatch.setattr(factors_mod, "G_BUFFER_BYTES", size)
        out[size] = kfac_factors(model, x, Categorical(), batch_size=2)
    for name in ("0", "2", "4"):
        torch.testing.assert_close(out[1][name].G, out[10**9][name].G, atol=ATOL_EXACT, rtol=0)
        torch.testing.assert_close(out[1][name].A, out[10**9][name].A, atol=0, rtol=0)
        assert out[1][name].g_rank_bound == out[10**9][name].g_rank_bound


def test_patches_order_reproduces_conv1d() -> None:
    torch.manual_seed(2)
    conv = nn.Conv1d(2, 3, kernel_size=3, stride=2, padding=1, dilation=1).double()
    x = torch.randn(4, 2, 9, dtype=torch.float64)
    y = patches(conv, x) @ conv.weight.reshape(3, -1).T + conv.bias
    torch.testing.assert_close(y, conv(x).transpose(1, 2), atol=ATOL_EXACT, rtol=0)


def test_sequence_linear_sums_positions_in_g_and_averages_in_a() -> None:
    torch.manual_seed(3)
    lin = nn.Linear(3, 2).double()
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    model = nn.Sequential(lin, nn.Flatten(), nn.Linear(10, 2)).double()
    fac = kfac_factors(model, x, Gaussian())
    a = torch.cat([x, torch.ones(4, 5, 1, dtype=torch.float64)], -1).reshape(-1, 4)
    torch.testing.assert_close(fac["0"].A, a.T @ a / 20, atol=ATOL_EXACT, rtol=0)
    # G: the gradient at each position is W2's slice for that position (Gaussian, sigma 1)
    w2 = model[2].weight.reshape(2, 5, 2)  # (out, position, d)
    g_ref = sum(w2[:, p, :].T @ w2[:, p, :] for p in range(5))
    torch.testing.assert_close(fac["0"].G, g_ref, atol=ATOL_EXACT, rtol=0)
    assert fac["0"].n_positions == 5


def test_supported_blocks() -> None:
    assert is_supported_block(nn.Linear(2, 2))
    assert is_supported_block(nn.Conv2d(2, 2, 3))
    assert not is_supported_block(nn.Conv2d(2, 2, 3, groups=2))
    assert is_supported_block(nn.Conv2d(2, 2, 3, padding="same"))  # symmetric: 1 on each side
    assert not is_supported_block(nn.Conv2d(2, 2, 2, padding="same"))  # 0 left, 1 right
    assert not is_supported_block(nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"))
    assert not is_supported_block(nn.LayerNorm(3))


def test_model_is_not_mutated_and_float32_is_upcast() -> None:
    model = _mlp().float()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fac = kfac_factors(model, torch.randn(6, 4), Gaussian())
    assert fac["0"].A.dtype == torch.float64
    for k, v in model.state_dict().items():
        assert v.dtype == torch.float32
        assert torch.equal(v, before[k])
    assert all(not h for h in (model[0]._forward_hooks, model[0]._forward_pre_hooks))


def _token_g_reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Exact ``G`` of block ``'0'`` of the token-wise `_mlp` on ``(N, T, 4)`` inputs, by autograd:
    ``(1/N) Σ_i Σ_t J_itᵀ (diag p − p pᵀ) J_it`` (a token's block output reaches only its own
    logits; positions are summed in ``G``)."""
    tokens = x.reshape(-1, x.shape[-1])
    s = model[0](tokens).detach().requires_grad_(True)
    out = model[2](torch.tanh(s))  # (N·T, 3); token b's logits depend on s[b] only
    jac = torch.stack(
        [torch.autograd.grad(out[:, c].sum(), s, retain_graph=True)[0] for c in range(3)], 1
    )  # (N·T, 3, 6): row c of each token's Jacobian ∂out_b/∂s_b
    p = torch.softmax(out, -1).detach()
    h = torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1)
    return torch.einsum("bci,bcd,bdj->ij", jac, h, jac) / x.shape[0]


@pytest.mark.parametrize("case", ["categorical", "gaussian", "tokens"])
def test_monte_carlo_g_converges_to_exact(case: str) -> None:
    """Sampled-label ``G`` (400 draws per sample) against the exact one: the Categorical and
    Gaussian (σ = 0.5) Monte Carlo paths, forced by ``max_exact_classes = 1``, against the exact
    factor; Categorical logits with a position axis ``(N, T, C)`` (always Monte Carlo) against an
    autograd oracle."""
    model = _mlp()
    gen = torch.Generator().manual_seed(0)
    n, mc_samples = 40, 400
    if case == "tokens":
        x = torch.randn(n, 5, 4, dtype=torch.float64, generator=gen)
        family, options = Categorical(), {}
        exact = _token_g_reference(model, x)
    else:
        x = torch.randn(n, 4, dtype=torch.float64, generator=gen)
        family = Categorical() if case == "categorical" else Gaussian(sigma=0.5)
        options = {"max_exact_classes": 1}
        exact = kfac_factors(model, x, family)["0"].G
    mc = kfac_factors(model, x, family, mc_samples=mc_samples, seed=3, **options)
    assert mc.fisher == f"mc({mc_samples})"
    rel = float(torch.linalg.norm(mc["0"].G - exact) / torch.linalg.norm(exact))
    assert rel < MC_SCALE_MULTIPLE / math.sqrt(mc_samples * n)


def test_errors_name_the_problem() -> None:
    model = _mlp()
    with pytest.raises(ValueError, match=r"data of shape \(3, 5\) does not fit.*'0'.*4"):
        kfac_factors(model, torch.randn(3, 5, dtype=torch.float64), Gaussian())
    bad = _mlp()
    with torch.no_grad():
        bad[2].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"parameter '2.weight' holds NaN"):
        kfac_factors(bad, torch.randn(3, 4, dtype=torch.float64), Gaussian())
    with pytest.raises(ValueError, match=r"activation of module '0' \(Linear\)"):
        kfac_factors(model, torch.full((2, 4), float("inf"), dtype=torch.float64), Gaussian())
    with pytest.raises(TypeError, match="data must be a Tensor"):
        kfac_factors(model, [[1.0, 2.0]], Gaussian())
    with pytest.raises(ValueError, match="at least one sample"):
        kfac_factors(model, torch.zeros(0, 4, dtype=torch.float64), Gaussian())


class _Float32Inside(nn.Module):
    """A Linear followed by a product with a float32 tensor the forward creates itself."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) @ torch.ones(3, 2, dtype=torch.float32)


def test_float64_failure_is_named_as_such() -> None:
    """Not blamed on the data: the read runs in float64 and this forward cannot."""
    with pytest.raises(ValueError, match=r"forward fails in float64.*[Dd]ouble"):
        kfac_factors(_Float32Inside().double(), torch.randn(3, 4, dtype=torch.float64), Gaussian())


@pytest.mark.parametrize("side", ["A", "G"])
def test_error_factor_overflow(side: str) -> None:
    """s15 trial S #10: finite weights of 1e200 after a layer make its output gradients (G) or
    its inputs (A) square past float64; eigh of the inf factor failed with a LAPACK traceback."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x = torch.randn(16, 3, dtype=torch.float64)
    with torch.no_grad():
        if side == "G":
            model[2].weight.mul_(1e200)  # output gradients of block '0' ~ 1e200
        else:
            x = x * 1e200  # inputs of block '0' ~ 1e200 (tanh keeps block '2' finite)
    with pytest.raises(ValueError, match=f"factor {side} of block '0' is not finite"):
        kfac_factors(model, x, Gaussian())


def test_error_non_finite_model_output() -> None:
    """Finite parameters and inputs whose product overflows: the output check names it."""
    model = nn.Linear(2, 1).double()
    with torch.no_grad():
        model.weight.fill_(10.0)
    x = torch.full((3, 2), 1e307, dtype=torch.float64)
    with pytest.raises(ValueError, match="model output holds NaN or Inf values"):
        kfac_factors(model, x, Gaussian())


def test_error_params_key_not_in_the_model() -> None:
    with pytest.raises(ValueError, match="params key 'nope' is not a parameter of the model"):
        kfac_factors(
            _mlp(),
            torch.randn(3, 4, dtype=torch.float64),
            Gaussian(),
            params={"nope": torch.ones(1)},
        )


class _PerSampleScalar(nn.Module):
    """Returns shape ``(N,)``: no class axis."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).squeeze(-1)


def test_error_output_without_a_class_axis() -> None:
    # categorical logits need a class axis; a Gaussian (N,) is a scalar mean (test_scalar_output)
    with pytest.raises(
        ValueError, match=r"model output must have shape \(N, \.\.\., C\); got \(3,\)"
    ):
        kfac_factors(
            _PerSampleScalar().double(), torch.randn(3, 4, dtype=torch.float64), Categorical()
        )


# --- curvlinops cross-check ----------------------------------------------------------------


def _curvlinops_factors(model, x, loss):
    cl = pytest.importorskip("curvlinops")
    y = torch.zeros(x.shape[0], dtype=torch.long)
    if isinstance(loss, nn.MSELoss):
        y = torch.zeros(x.shape[0], model(x).shape[1], dtype=torch.float64)
    params = [p for p in model.parameters()]
    op = cl.KFACLinearOperator(
        model,
        loss,
        params,
        [(x, y)],
        fisher_type="type-2",
        separate_weight_and_bias=False,
        check_deterministic=False,
    )
    op.compute_kronecker_factors()
    return op._input_covariances, op._gradient_covariances


@pytest.mark.parametrize("which", ["mlp", "cnn"])
def test_factors_equal_curvlinops_categorical(which: str) -> None:
    model = _mlp() if which == "mlp" else _cnn()
    x = torch.randn(6, 4, dtype=torch.float64)
    if which == "cnn":
        x = torch.randn(6, 2, 7, 7, dtype=torch.float64)
    a_cl, g_cl = _curvlinops_factors(model, x, nn.CrossEntropyLoss(reduction="mean"))
    fac = kfac_factors(model, x, Categorical())
    assert set(a_cl) == set(fac)
    for name in fac:
        torch.testing.assert_close(fac[name].A, a_cl[name], atol=ATOL_CURVLINOPS, rtol=0)
        torch.testing.assert_close(fac[name].G, g_cl[name], atol=ATOL_CURVLINOPS, rtol=0)


def test_factors_equal_curvlinops_gaussian() -> None:
    """curvlinops' MSELoss(mean) Hessian is (2/C) I: our σ = 1 factor G is C/2 times theirs."""
    model = _cnn()
    x = torch.randn(5, 2, 7, 7, dtype=torch.float64)
    a_cl, g_cl = _curvlinops_factors(model, x, nn.MSELoss(reduction="mean"))
    fac = kfac_factors(model, x, Gaussian(sigma=1.0))
    c = 5
    for name in fac:
        torch.testing.assert_close(fac[name].A, a_cl[name], atol=ATOL_CURVLINOPS, rtol=0)
        torch.testing.assert_close(fac[name].G, g_cl[name] * c / 2, atol=ATOL_CURVLINOPS, rtol=0)


def _distributed_worker(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist

    from neuromanifold.singular.distributed import _leave_without_finalizing

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = _cnn()
        x = torch.randn(
            10, 2, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
        )
        shard = x[rank::world]
        fac = kfac_factors(model, shard, Categorical(), batch_size=3)
        if rank == 0:
            torch.save({n: (b.A, b.G, b.n_samples) for n, b in fac.items()}, out)
    finally:
        dist.destroy_process_group()
    _leave_without_finalizing()  # gloo's worker threads can abort the interpreter's finalization


@pytest.mark.slow
def test_data_parallel_factors_equal_single_process(tmp_path) -> None:
    """Two gloo ranks, each with half the probe set, give the single-process factors."""
    import torch.multiprocessing as mp

    out = tmp_path / "factors.pt"
    mp.spawn(_distributed_worker, args=(2, str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    got = torch.load(out)
    torch.manual_seed(0)
    model = _cnn()
    x = torch.randn(10, 2, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = kfac_factors(model, x, Categorical())
    for name, b in ref.items():
        a, g, n = got[name]
        assert n == 10
        torch.testing.assert_close(a, b.A, atol=ATOL_EXACT, rtol=0)
        torch.testing.assert_close(g, b.G, atol=ATOL_EXACT, rtol=0)


def test_inplace_activations_do_not_change_the_factors() -> None:
    torch.manual_seed(0)
    inplace = nn.Sequential(
        nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 3), nn.ReLU(inplace=True)
    ).double()
    plain = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3), nn.ReLU()).double()
    plain.load_state_dict(inplace.state_dict())
    x = torch.randn(9, 4, dtype=torch.float64)
    fa, fb = kfac_factors(inplace, x, Categorical()), kfac_factors(plain, x, Categorical())
    for name in fb:
        torch.testing.assert_close(fa[name].A, fb[name].A, atol=ATOL_EXACT, rtol=0)
        torch.testing.assert_close(fa[name].G, fb[name].G, atol=ATOL_EXACT, rtol=0)


def test_size_cap_skips_only_the_wide_block_and_keeps_the_others_exact() -> None:
    """A block whose larger factor side exceeds ``max_factor_dim`` is left out with the reason;
    the other blocks' factors are the uncapped ones, bit for bit."""
    model, x = _mlp(), torch.randn(7, 4, dtype=torch.float64)
    full = kfac_factors(model, x, Categorical())
    # the larger sides: '0' (Linear 4 → 6) G 6, '2' (Linear 6 → 3) A 6 + 1 (bias) = 7
    capped = kfac_factors(model, x, Categorical(), max_factor_dim=7)
    assert set(capped.blocks) == {"0", "2"} and capped.skipped == {}
    capped = kfac_factors(model, x, Categorical(), max_factor_dim=6)
    assert set(capped.blocks) == {"0"}
    assert capped.skipped == {
        "2": "no K-FAC directions: its factor A would be 7 × 7 (0.0 GB float64) above "
        "max_factor_dim 6 (raise it: read(..., max_factor_dim=...)); closed-form detectors "
        "still read it"
    }
    assert torch.equal(capped["0"].A, full["0"].A) and torch.equal(capped["0"].G, full["0"].G)
    with pytest.raises(ValueError, match=r"max_factor_dim must be a positive int; got 0"):
        kfac_factors(model, x, Categorical(), max_factor_dim=0)


def test_output_block_g_is_exact_when_the_others_are_sampled() -> None:
    """With more classes than the exact limit the inner blocks' G is sampled, but the head's G
    equals the exact one (the class-expectation path with a high limit), to rounding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 9)).double()
    x = torch.randn(7, 4, dtype=torch.float64)
    exact = kfac_factors(model, x, Categorical(), max_exact_classes=64)
    sampled = kfac_factors(model, x, Categorical(), max_exact_classes=4, seed=3)
    assert exact.fisher == "exact" and sampled.fisher == "mc(1)"
    torch.testing.assert_close(sampled["2"].G, exact["2"].G, rtol=0, atol=ATOL_EXACT)
    assert not torch.allclose(sampled["0"].G, exact["0"].G)  # the inner block is sampled
    gaussian = kfac_factors(model, x, Gaussian(0.5), max_exact_classes=4)
    torch.testing.assert_close(
        gaussian["2"].G, torch.eye(9, dtype=torch.float64) / 0.25, rtol=0, atol=ATOL_EXACT
    )


def test_output_block_g_of_sequence_logits_sums_the_positions() -> None:
    """Logits (N, T, C): the head's G is (1/N) Σ_i Σ_t (diag p_it − p_it p_itᵀ), its rank C − 1
    (the 𝟙 logit shift is its only kernel direction) however few samples there are."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 80)).double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    fac = kfac_factors(model, x, Categorical())
    with torch.no_grad():
        p = torch.softmax(model(x), dim=-1).reshape(-1, 80)
    want = sum(torch.diag(q) - torch.outer(q, q) for q in p) / 2
    torch.testing.assert_close(fac["2"].G, want, rtol=0, atol=ATOL_EXACT)
    assert int(torch.linalg.matrix_rank(fac["2"].G)) == 79


class _Temperature(nn.Module):
    """Linear head whose output is scaled in place after the block ran (``y.mul_(3)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(4, 6), nn.Linear(6, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(x))).mul_(3.0)


class _Reused(nn.Module):
    """One Linear called twice, ``fc(tanh(fc(x)))``: its last call is the output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(9, 9)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.tanh(self.fc(x)))


@pytest.mark.parametrize("case", ["in-place", "reused"])
def test_output_block_g_falls_back_to_sampling_where_the_closed_form_is_wrong(case: str) -> None:
    """An output changed in place after the head ran, or a head module that is also called
    earlier, is not ``Σ H_out`` of its own output: G is sampled there and converges to the
    exact class-expectation G (with the closed form it was off by 9× / missed the first call)."""
    torch.manual_seed(0)
    model = (_Temperature() if case == "in-place" else _Reused()).double()
    name = "head" if case == "in-place" else "fc"
    n, mc_samples = 40, 400
    x = torch.randn(n, 4 if case == "in-place" else 9, dtype=torch.float64)
    exact = kfac_factors(model, x, Categorical())[name].G
    mc = kfac_factors(model, x, Categorical(), max_exact_classes=4, mc_samples=mc_samples, seed=3)
    rel = float(torch.linalg.norm(mc[name].G - exact) / torch.linalg.norm(exact))
    assert rel < MC_SCALE_MULTIPLE / math.sqrt(mc_samples * n)


def test_conv_output_block_keeps_its_channel_g() -> None:
    """A convolution producing the output has its units on axis 1, not the last axis: its G
    stays ``C_out × C_out`` (sampled), and the read of such a model runs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(2, 3, 3), nn.Tanh(), nn.Conv1d(3, 4, 3)).double()
    x = torch.randn(5, 2, 30, dtype=torch.float64)
    fac = kfac_factors(model, x, Gaussian(0.5), max_exact_classes=4)
    assert fac["2"].G.shape == (4, 4) and fac.fisher == "mc(1)"
    from neuromanifold.singular.read import read

    with torch.no_grad():  # channel 1 of the first conv is dead: candidates on the output conv
        model[0].weight[1] = 0.0
        model[0].bias[1] = 0.0
    reading = read(model, x, Gaussian(0.5), max_directions=1, progress=False)
    assert reading.meta["n_candidates"] >= 1 and reading.meta["n_read"] == 1


# Monte Carlo labels keyed by sample content: the same labels whatever the order or batching, so
# the factors differ only in the order of the float64 sums (observed ≤ 1e-15 relative)
RTOL_SUM_ORDER = 1e-12


def test_monte_carlo_factors_do_not_depend_on_sample_order_or_batching() -> None:
    """User trial I #1: the labels were drawn from one stream seeded 0, in sample order, so
    permuting, re-batching or sharding the probe set changed the sampled G (10 % on the sweeps
    of a two-rank read). Keyed by each sample's content, the labels follow the sample."""
    from neuromanifold.cells.planted import planted_mlp

    net = planted_mlp(categorical=True, d_out=80, n=64)  # 80 > MAX_EXACT_CLASSES: mc(1)
    base = kfac_factors(net.model, net.data, net.family, batch_size=64)
    assert base.fisher == "mc(1)"
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(5))
    x32 = net.data.float()  # float32 data and its float64 copy are the same samples
    pairs = [
        (base, kfac_factors(net.model, net.data[perm], net.family, batch_size=64)),
        (base, kfac_factors(net.model, net.data, net.family, batch_size=7)),
        (
            kfac_factors(net.model, x32, net.family, batch_size=64),
            kfac_factors(net.model, x32.double(), net.family, batch_size=64),
        ),
    ]
    for a, b in pairs:
        for name in ("0", "2"):
            rel = torch.linalg.norm(a[name].G - b[name].G) / torch.linalg.norm(b[name].G)
            assert float(rel) <= RTOL_SUM_ORDER, (name, float(rel))
    reseeded = kfac_factors(net.model, net.data, net.family, batch_size=64, seed=1)
    assert not torch.allclose(reseeded["0"].G, base["0"].G)  # the seed still picks the labels


def test_keyed_draws_use_the_whole_key() -> None:
    """Audit S12d #3: torch's CPU generator keeps only 32 bits of its seed, so keys equal in
    their low 32 bits drew the same labels (about N²/2³³ coinciding pairs among N samples)."""
    from neuromanifold.singular.output_scores import keyed_score

    keys = [5, 5 + 2**40]
    out = torch.zeros(2, 3, dtype=torch.float64)
    noise = keyed_score(Gaussian(sigma=1.0), out, keys, 0)
    assert not torch.equal(noise[0], noise[1])
    assert torch.equal(keyed_score(Gaussian(sigma=1.0), out, keys, 0), noise)  # deterministic
    assert not torch.equal(keyed_score(Gaussian(sigma=1.0), out, keys, 1), noise)  # draw index


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_batch_size_is_validated_by_name(bad) -> None:
    """s16 trial X #6 / Y #4: batch_size = 0 ended in 'range() arg 3 must not be zero', 2.5 in a
    TypeError from range, -1 said 'batch'; under a memory budget a bad value was replaced."""
    from neuromanifold import read
    from neuromanifold.cells import planted_mlp

    net = planted_mlp()
    with pytest.raises(ValueError, match=r"batch_size must be a positive int; got "):
        kfac_factors(net.model, net.data, net.family, batch_size=bad)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int; got "):
        read(net.model, net.data, net.family, batch_size=bad, progress=False)
    with pytest.raises(ValueError, match=r"batch_size must be a positive int; got "):
        read(net.model, net.data, net.family, batch_size=bad, max_memory="1GB", progress=False)


def test_numpy_integer_batch_size_reads_like_an_int() -> None:
    import numpy as np

    from neuromanifold.cells import planted_mlp

    net = planted_mlp()
    a = kfac_factors(net.model, net.data, net.family, batch_size=np.int64(7))
    b = kfac_factors(net.model, net.data, net.family, batch_size=7)
    assert all(torch.equal(a[k].A, b[k].A) and torch.equal(a[k].G, b[k].G) for k in a.blocks)
