"""Forward-mode directional Fisher against the per-sample-gradient oracle and closed forms."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold.singular import (
    Categorical,
    Gaussian,
    directional_fisher,
    directional_fisher_reference,
)

RTOL_ORACLE = 1e-10  # JVP vs per-sample gradients, float64 (issue 4 "Done when")
ATOL_ORACLE = 1e-14
RTOL_EXACT = 1e-12  # closed forms evaluated in float64
RTOL_UPCAST = 1e-12  # float32 model read on float64 copies == float64 model
RTOL_SUMS = 1e-12  # all-reduced sums vs one process: only the summation order differs
# CE logit shift against one logit bias's Fisher on the same model: rounding of the centred
# tangent, ε² level (measured ≤ 2.7e-32 relative over seeds 0-5, 1 and 2 threads)
RTOL_FLAT = 1e-28

D = torch.float64


class Attention(nn.Module):
    """Single-head self-attention + LayerNorm + MLP block, mean-pooled into a linear head."""

    def __init__(self, d: int = 6, t: int = 4, out: int = 3) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 8), nn.GELU(), nn.Linear(8, d))
        self.head = nn.Linear(d, out)
        self.t, self.d = t, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.reshape(x.shape[0], self.t, self.d)
        scores = self.q(h) @ self.k(h).transpose(-1, -2) / self.d**0.5
        h = h + torch.softmax(scores, dim=-1) @ self.v(h)
        h = h + self.mlp(self.ln(h))
        return self.head(h.mean(1))


class MHABlock(nn.Module):
    """nn.MultiheadAttention (2 heads) + LayerNorm, mean-pooled into a linear head."""

    def __init__(self, d: int = 4, t: int = 3, out: int = 3) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, out)
        self.t, self.d = t, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.reshape(x.shape[0], self.t, self.d)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(self.ln(h + a).mean(1))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.GELU(), nn.Linear(6, 3))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Unflatten(1, (2, 5, 5)),
        nn.Conv2d(2, 3, 3, padding=1),
        nn.Tanh(),
        nn.Conv2d(3, 2, 3, stride=2),
        nn.Flatten(),
        nn.Linear(8, 3),
    )


MODELS = {
    "mlp": (mlp, 5),
    "cnn": (cnn, 50),
    "attention": (Attention, 24),
    "mha": (MHABlock, 12),
}


def make(name: str, seed: int = 0):
    torch.manual_seed(seed)
    ctor, d_in = MODELS[name]
    model = ctor().to(D)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(11, d_in, dtype=D)
    return model, params, x


def random_direction(params, keys=None, seed=1):
    gen = torch.Generator().manual_seed(seed)
    keys = list(params) if keys is None else keys
    return {k: torch.randn(params[k].shape, generator=gen, dtype=D) for k in keys}


FAMILIES = {"gaussian": Gaussian(sigma=0.7), "categorical": Categorical()}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("name", list(MODELS))
def test_jvp_matches_per_sample_gradients(name: str, family: str) -> None:
    model, params, x = make(name)
    fam = FAMILIES[family]
    keys = list(params)
    dirs = [
        random_direction(params, seed=1),
        random_direction(params, keys=keys[:2], seed=2),  # a single block
        random_direction(params, keys=keys[-1:], seed=3),
    ]
    ref = directional_fisher_reference(model, params, dirs, x, fam, chunk_size=4)
    batched = directional_fisher(model, params, dirs, x, fam)
    chunked = directional_fisher(model, params, dirs, x, fam, chunk_size=3)
    single = torch.stack([directional_fisher(model, params, d, x, fam) for d in dirs])
    assert bool((ref > 0).all())
    for got in (batched, chunked, single):
        torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_eval_mode_multihead_attention_fast_path(family: str) -> None:
    """In eval mode nn.MultiheadAttention takes a fused path with no forward-mode derivative;
    the read switches it off for its own call and restores the global setting."""
    model, params, x = make("mha")
    model.eval()
    fam = FAMILIES[family]
    dirs = [
        random_direction(params, seed=21),
        random_direction(params, keys=["attn.in_proj_weight"]),
    ]
    assert torch.backends.mha.get_fastpath_enabled()
    got = directional_fisher(model, params, dirs, x, fam)
    assert torch.backends.mha.get_fastpath_enabled()
    ref = directional_fisher_reference(model, params, dirs, x, fam)
    torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_empirical_fisher_matches_reference(family: str) -> None:
    model, params, x = make("mlp")
    fam = FAMILIES[family]
    y = torch.randint(0, 3, (x.shape[0],)) if family == "categorical" else torch.randn(11, 3)
    dirs = [random_direction(params, seed=4), random_direction(params, keys=["2.weight"], seed=5)]
    got = directional_fisher(model, params, dirs, (x, y), fam, empirical=True, chunk_size=5)
    ref = directional_fisher_reference(model, params, dirs, (x, y), fam, empirical=True)
    torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


def test_gaussian_linear_closed_form() -> None:
    """Linear regression: u_Wᵀ F u_W = (1/N) Σ_i (u·x_i)²/σ² exactly."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 1, bias=False).to(D)
    x = torch.randn(9, 4, dtype=D)
    w = torch.randn(1, 4, dtype=D)
    w = w / w.norm()
    got = directional_fisher(lin, dict(lin.named_parameters()), {"weight": w}, x, Gaussian(2.0))
    expected = ((x @ w.T) ** 2).mean() / 4.0
    torch.testing.assert_close(got, expected, rtol=RTOL_EXACT, atol=0.0)


class Power(nn.Module):
    """Gaussian location anchor: output μ = θ^k for every sample."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.theta = nn.Parameter(torch.zeros((), dtype=D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.theta**self.k * torch.ones_like(x)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_gaussian_anchor_closed_form(k: int) -> None:
    """μ(t) = t^k under N(μ, σ²): F(t) = k² t^{2(k−1)}/σ² exactly."""
    model, sigma = Power(k), 0.5
    x = torch.ones(3, 1, dtype=D)
    for t in (1e-3, 0.2, 1.7):
        got = directional_fisher(
            model,
            {"theta": torch.tensor(t, dtype=D)},
            {"theta": torch.tensor(1.0)},
            x,
            Gaussian(sigma),
        )
        expected = k**2 * t ** (2 * (k - 1)) / sigma**2
        assert abs(float(got) - expected) <= RTOL_EXACT * expected


def test_logit_shift_is_exactly_flat() -> None:
    """A constant shift of all class biases leaves the softmax unchanged: F = 0 to rounding."""
    model, params, x = make("mlp")
    got = directional_fisher(model, params, {"4.bias": torch.ones(3, dtype=D)}, x, Categorical())
    one_logit = {"4.bias": torch.tensor([1.0, 0.0, 0.0], dtype=D)}
    live = directional_fisher(model, params, one_logit, x, Categorical())
    assert float(live) > 0.1  # a live direction of the same tensor, F ≈ 0.21
    assert float(got) <= RTOL_FLAT * float(live)


def test_float32_model_is_read_in_float64() -> None:
    model, params, x = make("cnn")
    u = random_direction(params, seed=7)
    model32 = make("cnn")[0].float()
    params32 = {k: v.float() for k, v in params.items()}
    f64 = directional_fisher(
        model,
        {k: v.float().double() for k, v in params32.items()},
        u,
        x.float().double(),
        Categorical(),
    )
    f32 = directional_fisher(model32, params32, u, x.float(), Categorical())
    assert f32.dtype == torch.float64
    torch.testing.assert_close(f32, f64, rtol=RTOL_UPCAST, atol=0.0)


def test_read_does_not_mutate_model_or_inputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).to(D)
    model.eval()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    params = dict(model.named_parameters())
    x = torch.randn(8, 3, dtype=D)
    x_before = x.clone()
    u = {"0.weight": torch.randn(4, 3, dtype=D)}
    u_before = u["0.weight"].clone()
    directional_fisher(model, params, u, x, Gaussian())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert torch.equal(x, x_before)
    assert torch.equal(u["0.weight"], u_before)


def test_missing_params_fall_back_to_the_model() -> None:
    model, params, x = make("mlp")
    u = {"0.weight": torch.randn(7, 5, dtype=D)}
    full = directional_fisher(model, params, u, x, Gaussian())
    partial = directional_fisher(model, {"0.weight": params["0.weight"]}, u, x, Gaussian())
    torch.testing.assert_close(partial, full, rtol=0.0, atol=0.0)


def test_direction_is_normalised() -> None:
    model, params, x = make("mlp")
    u = random_direction(params, seed=8)
    f1 = directional_fisher(model, params, u, x, Gaussian())
    f2 = directional_fisher(model, params, {k: 37.0 * v for k, v in u.items()}, x, Gaussian())
    torch.testing.assert_close(f1, f2, rtol=RTOL_EXACT, atol=0.0)


# --- errors -------------------------------------------------------------------------------


def test_error_zero_direction() -> None:
    model, params, x = make("mlp")
    with pytest.raises(ValueError, match="direction u has zero norm"):
        directional_fisher(model, params, {"0.weight": torch.zeros(7, 5)}, x, Gaussian())


def test_error_nonfinite_direction() -> None:
    model, params, x = make("mlp")
    bad = torch.zeros(7, 5)
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"direction u\['0.weight'\] contains non-finite"):
        directional_fisher(model, params, {"0.weight": bad}, x, Gaussian())


def test_error_nonfinite_entry_is_named_among_several_tensors() -> None:
    """An inf in the second tensor of a list's second direction is named by key and index."""
    model, params, x = make("mlp")
    good = {"0.weight": torch.ones(7, 5)}
    bad = {"0.weight": torch.ones(7, 5), "0.bias": torch.zeros(7)}
    bad["0.bias"][3] = float("inf")
    with pytest.raises(ValueError, match=r"direction u\[1\]\['0.bias'\] contains non-finite"):
        directional_fisher(model, params, [good, bad], x, Gaussian())


@pytest.mark.parametrize("size", [1e-200, 1e200])
def test_direction_of_tiny_or_huge_entries_reads_as_its_unit_direction(size: float) -> None:
    """Σu² underflows at 1e-200 and overflows at 1e200, but the norm is a finite float: the
    direction is normalised by its largest entry first and reads as the unit direction does
    (s34 trial CELLS D6: "zero norm" and "norm inf (overflow)" before)."""
    model, params, x = make("mlp")
    shape = torch.linspace(-1.0, 2.0, 35, dtype=torch.float64).reshape(7, 5)
    want = directional_fisher(model, params, {"0.weight": shape}, x, Gaussian())
    got = directional_fisher(model, params, {"0.weight": size * shape}, x, Gaussian())
    torch.testing.assert_close(got, want, rtol=RTOL_EXACT, atol=0.0)


def test_error_direction_norm_overflow() -> None:
    """Finite entries whose norm itself is above the largest float64 are refused, saying so."""
    model, params, x = make("mlp")
    huge = torch.full((7, 5), 1.5e308, dtype=torch.float64)
    with pytest.raises(
        ValueError, match=r"direction u has norm 1.5e\+308 × 5.92, above the largest"
    ):
        directional_fisher(model, params, {"0.weight": huge}, x, Gaussian())


def test_error_direction_unknown_key() -> None:
    model, params, x = make("mlp")
    with pytest.raises(
        ValueError,
        match=r"direction u has keys that are not parameter names: "
        r"\['nope'\]",
    ):
        directional_fisher(model, params, {"nope": torch.ones(3)}, x, Gaussian())


def test_error_direction_shape() -> None:
    model, params, x = make("mlp")
    with pytest.raises(
        ValueError,
        match=r"u\['0.weight'\] has shape \(5, 7\) but "
        r"params\['0.weight'\] has shape \(7, 5\)",
    ):
        directional_fisher(model, params, {"0.weight": torch.ones(5, 7)}, x, Gaussian())


def test_error_empty_direction_list() -> None:
    model, params, x = make("mlp")
    with pytest.raises(ValueError, match="u is an empty list of directions"):
        directional_fisher(model, params, [], x, Gaussian())


def test_error_direction_not_a_dict() -> None:
    model, params, x = make("mlp")
    with pytest.raises(TypeError, match="direction u must be a non-empty dict"):
        directional_fisher(model, params, {}, x, Gaussian())


def test_error_empty_data() -> None:
    model, params, _ = make("mlp")
    with pytest.raises(ValueError, match=r"data is empty: inputs have shape \(0, 5\)"):
        directional_fisher(model, params, random_direction(params), torch.zeros(0, 5), Gaussian())


def test_error_nonfinite_params() -> None:
    model, params, x = make("mlp")
    params["2.bias"] = params["2.bias"].clone()
    params["2.bias"][0] = float("inf")
    with pytest.raises(ValueError, match=r"params\['2.bias'\] contains non-finite"):
        directional_fisher(model, params, random_direction(params), x, Gaussian())


def test_error_unknown_param_name() -> None:
    model, params, x = make("mlp")
    with pytest.raises(
        ValueError,
        match=r"params has names that are not parameters of the "
        r"model: \['extra'\]",
    ):
        directional_fisher(
            model, {**params, "extra": torch.ones(1)}, {"0.bias": torch.ones(7)}, x, Gaussian()
        )


def test_error_family_mismatch_categorical_one_column() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1).to(D)
    with pytest.raises(
        ValueError,
        match=r"Categorical family expects floating logits .* C ≥ 2 classes on the last axis; "
        r"the model returned shape \(4, 1\)",
    ):
        directional_fisher(
            model,
            dict(model.named_parameters()),
            {"bias": torch.ones(1)},
            torch.randn(4, 3, dtype=D),
            Categorical(),
        )


def test_error_family_not_a_family() -> None:
    model, params, x = make("mlp")
    with pytest.raises(TypeError, match="family must be an output family"):
        directional_fisher(model, params, random_direction(params), x, "gaussian")


class BatchSum(nn.Module):
    """Sums its outputs over the batch: one output row for any number of samples."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).sum(0, keepdim=True)


def test_error_output_not_one_row_per_sample() -> None:
    model = BatchSum().to(D)
    params = dict(model.named_parameters())
    x = torch.ones(4, 5, dtype=D)
    with pytest.raises(ValueError, match="output has leading dimension 1 for 4 input samples"):
        directional_fisher(model, params, random_direction(params), x, Gaussian())


class UnitGaussian:
    """A user family (``H_out = I``) that implements `OutputFamily` under its own name."""

    name = "unit-gaussian"

    def __init__(self) -> None:
        self._g = Gaussian(sigma=1.0)

    def check_output(self, out: torch.Tensor) -> None:
        self._g.check_output(out)

    def quadratic(self, out: torch.Tensor, jv: torch.Tensor) -> torch.Tensor:
        return self._g.quadratic(out, jv)

    def empirical_quadratic(self, out, jv, y) -> torch.Tensor:
        return self._g.empirical_quadratic(out, jv, y)

    def log_likelihood(self, out, y) -> torch.Tensor:
        return self._g.log_likelihood(out, y)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name}


def test_error_reference_has_no_label_set_for_a_user_family() -> None:
    """The fast path reads any `OutputFamily`; the per-sample-gradient oracle enumerates labels
    for the built-in families only."""
    model, params, x = make("mlp")
    u = random_direction(params)
    fast = directional_fisher(model, params, u, x, UnitGaussian())
    torch.testing.assert_close(
        fast, directional_fisher(model, params, u, x, Gaussian(sigma=1.0)), rtol=0.0, atol=0.0
    )  # the same arithmetic
    with pytest.raises(TypeError, match="no reference label set for family 'unit-gaussian'"):
        directional_fisher_reference(model, params, u, x, UnitGaussian())


def test_error_bad_sigma() -> None:
    with pytest.raises(ValueError, match="Gaussian sigma must be a finite positive float"):
        Gaussian(sigma=0.0)


def test_error_empirical_without_labels() -> None:
    model, params, x = make("mlp")
    with pytest.raises(ValueError, match=r"empirical=True needs labels"):
        directional_fisher(model, params, random_direction(params), x, Gaussian(), empirical=True)


def test_error_bad_chunk_size() -> None:
    model, params, x = make("mlp")
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        directional_fisher(model, params, random_direction(params), x, Gaussian(), chunk_size=0)


def test_error_model_not_a_module() -> None:
    _, params, x = make("mlp")
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        directional_fisher(lambda z: z, params, random_direction(params), x, Gaussian())


def test_error_batchnorm_in_training_mode() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).to(D)
    with pytest.raises(ValueError, match=r"submodule '1' \(BatchNorm1d\) is in training mode"):
        directional_fisher(
            model,
            dict(model.named_parameters()),
            {"0.bias": torch.ones(4)},
            torch.randn(8, 3, dtype=D),
            Gaussian(),
        )


DIST_SCRIPT = """
import sys, torch, torch.distributed as dist
from torch import nn
from neuromanifold.singular import Categorical, directional_fisher, sweep
rank, world, init = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
x = torch.randn(10, 4, dtype=torch.float64)
u = {"0.weight": torch.randn(6, 4, dtype=torch.float64)}
shard = x[rank * 5 : (rank + 1) * 5]
p = dict(model.named_parameters())
f = directional_fisher(model, p, u, shard, Categorical())
s = sweep(model, p, u, shard, Categorical(), grid=[0.1, 1.0])
print(repr(float(f)), repr(s.F[1]))
dist.destroy_process_group()
from neuromanifold.singular.distributed import _leave_without_finalizing
_leave_without_finalizing()  # gloo's worker threads can abort the interpreter's finalization
"""


@pytest.mark.slow
def test_data_parallel_sums_are_exact(tmp_path) -> None:
    """Two gloo ranks with half the samples each give the single-process value."""
    import subprocess
    import sys

    script = tmp_path / "dist_worker.py"
    script.write_text(DIST_SCRIPT)
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), "2", init], stdout=subprocess.PIPE, text=True
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).to(D)
    x = torch.randn(10, 4, dtype=D)
    u = {"0.weight": torch.randn(6, 4, dtype=D)}
    single = float(directional_fisher(model, dict(model.named_parameters()), u, x, Categorical()))
    for out in outs:
        f, _ = (float(v) for v in out.split())
        assert f == pytest.approx(single, rel=RTOL_SUMS, abs=0.0)
    assert float(outs[0].split()[1]) == float(outs[1].split()[1])


class TokenModel(nn.Module):
    """Embedding → mean over positions → Linear: integer inputs pass through un-cast."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.emb(x)).mean(1))


def test_integer_token_inputs_match_reference() -> None:
    torch.manual_seed(0)
    model = TokenModel().to(D)
    params = dict(model.named_parameters())
    x = torch.randint(0, 7, (9, 5))
    dirs = [random_direction(params, seed=11), random_direction(params, keys=["emb.weight"])]
    got = directional_fisher(model, params, dirs, x, Categorical(), chunk_size=4)
    ref = directional_fisher_reference(model, params, dirs, x, Categorical())
    torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


def test_error_empirical_label_shapes() -> None:
    model, params, x = make("mlp")
    u = random_direction(params)
    with pytest.raises(
        ValueError, match=r"Categorical labels y must be integer class indices of shape \(11,\)"
    ):
        directional_fisher(model, params, u, (x, torch.rand(11)), Categorical(), empirical=True)
    with pytest.raises(
        ValueError,
        match=r"Gaussian empirical Fisher needs targets y of the "
        r"output's shape \(11, 3\); got \(11, 2\)",
    ):
        directional_fisher(model, params, u, (x, torch.rand(11, 2)), Gaussian(), empirical=True)


def test_error_labels_wrong_length() -> None:
    model, params, x = make("mlp")
    with pytest.raises(
        ValueError,
        match=r"data labels y have shape \(4,\); expected leading "
        r"dimension N = 11",
    ):
        directional_fisher(model, params, random_direction(params), (x, torch.zeros(4)), Gaussian())
