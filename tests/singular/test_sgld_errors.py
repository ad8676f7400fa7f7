"""SGLD error paths are clear and come before sampling (s17 user trial AE #8).

Before: n < 2 samples reported "batch_size must be an int >= 2" with no batch size passed;
nβ = inf, a NaN checkpoint and non-finite data were reported as a divergence at step 0; seed =
1.5 failed inside torch; lr = True and nbeta = True were accepted as 1; a float32 model with
float64 data gave torch's raw dtype error.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold.singular.sgld import SGLDConfig, gaussian_nll_loss, sgld_llc, sgld_llc_reference

D = torch.float64


def linear_problem(n: int = 20, dtype: torch.dtype = D):
    torch.manual_seed(0)
    model = nn.Linear(2, 1).to(dtype)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    x = torch.randn(n, 2, dtype=D)
    y = torch.randn(n, 1, dtype=D)
    return gaussian_nll_loss(model), params, x, y


SHORT = SGLDConfig(num_chains=2, num_draws=5)


@pytest.mark.parametrize("run", [sgld_llc, sgld_llc_reference])
def test_too_few_samples_have_their_own_message(run) -> None:
    loss, params, x, y = linear_problem()
    with pytest.raises(ValueError, match=r"n = 1 sample: the default nβ = n/ln n needs n >= 2"):
        run(loss, params, x[:1], y[:1], config=SHORT)
    with pytest.raises(ValueError, match=r"x and y hold no samples \(n = 0\)"):
        run(loss, params, x[:0], y[:0], config=SHORT)
    with pytest.raises(ValueError, match=r"x and y hold no samples \(n = 0\)"):
        run(loss, params, x[:0], y[:0], config=SGLDConfig(num_draws=5, nbeta=2.0))
    # One sample with an explicit nβ needs no default temperature: it runs.
    res = run(loss, params, x[:1], y[:1], config=SGLDConfig(num_draws=5, nbeta=2.0, lr=1e-3))
    assert not res.diverged and res.llc is not None


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), True, 0.0])
def test_nbeta_must_be_a_finite_positive_number(bad: object) -> None:
    with pytest.raises(ValueError, match=r"nbeta must be > 0 or None \(a finite float\)"):
        SGLDConfig(nbeta=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["lr", "gamma"])
def test_bools_are_not_step_sizes(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be a finite float >= 0, got True"):
        SGLDConfig(**{name: True})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1.5, True, "3", None])
def test_seed_must_be_an_int(bad: object) -> None:
    with pytest.raises(ValueError, match="seed must be an int, got"):
        SGLDConfig(seed=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1])
def test_seed_outside_the_generator_range(bad: int) -> None:
    with pytest.raises(ValueError, match=r"seed must be an int in \[-2\*\*63, 2\*\*64 - 1\]"):
        SGLDConfig(seed=bad)


def test_valid_configs_still_pass() -> None:
    SGLDConfig(lr=1, gamma=0, nbeta=3, seed=-1)  # ints for floats, a negative seed
    SGLDConfig(seed=2**64 - 1)


@pytest.mark.parametrize("run", [sgld_llc, sgld_llc_reference])
def test_non_finite_checkpoint_is_an_error_not_a_divergence(run) -> None:
    loss, params, x, y = linear_problem()
    for bad in (float("nan"), float("inf")):
        p = {k: v.clone() for k, v in params.items()}
        p["weight"][0, 1] = bad
        with pytest.raises(ValueError, match=r"params\['weight'\] contains non-finite values"):
            run(loss, p, x, y, config=SHORT)


@pytest.mark.parametrize("which", ["x", "y"])
def test_non_finite_data_is_an_error_not_a_divergence(which: str) -> None:
    loss, params, x, y = linear_problem()
    data = {"x": x.clone(), "y": y.clone()}
    data[which][3, 0] = float("inf")
    with pytest.raises(ValueError, match=f"{which} contains non-finite values"):
        sgld_llc(loss, params, data["x"], data["y"], config=SHORT)


def test_non_finite_loss_at_the_checkpoint_is_an_error() -> None:
    _, params, x, y = linear_problem()

    def log_loss(p, xb, yb):  # log(0) at w* = 0
        return -torch.log((p["weight"] * 0.0).sum()) + 0.0 * xb.sum() + 0.0 * yb.sum()

    with pytest.raises(ValueError, match=r"the loss at the checkpoint, L_n\(w\*\), is inf"):
        sgld_llc(log_loss, params, x, y, config=SHORT)


def test_float32_model_with_float64_data_is_a_clear_error() -> None:
    loss, params, x, y = linear_problem(dtype=torch.float32)
    with pytest.raises(
        ValueError, match=r"checkpoint \(torch.float32\) and x \(torch.float64\), which differ"
    ):
        sgld_llc(loss, params, x, y, config=SHORT)
    # One dtype throughout runs, float32 as well.
    res = sgld_llc(loss, params, x.float(), y.float(), config=SGLDConfig(num_draws=5, lr=1e-3))
    assert not res.diverged and res.llc is not None


def test_a_loss_error_unrelated_to_dtypes_is_not_renamed() -> None:
    _, params, x, y = linear_problem()

    def broken(p, xb, yb):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        sgld_llc(broken, params, x, y, config=SHORT)


def test_non_tensor_inputs_are_type_errors() -> None:
    loss, params, x, y = linear_problem()
    with pytest.raises(TypeError, match=r"params\['weight'\] must be a Tensor"):
        sgld_llc(loss, {**params, "weight": [[1.0, 2.0]]}, x, y, config=SHORT)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="x must be a Tensor"):
        sgld_llc(loss, params, x.tolist(), y, config=SHORT)  # type: ignore[arg-type]


def test_numpy_scalars_are_accepted_and_stored_as_python_numbers() -> None:  # s17 audit AH #3
    import numpy as np

    cfg = SGLDConfig(
        lr=np.float32(1e-3), nbeta=np.int64(50), seed=np.int64(3), num_draws=np.int32(10)
    )
    assert cfg == SGLDConfig(lr=float(np.float32(1e-3)), nbeta=50.0, seed=3, num_draws=10)
    assert type(cfg.seed) is int and type(cfg.nbeta) is float and type(cfg.num_draws) is int
    with pytest.raises(ValueError, match=r"seed must be an int, got float 1.5"):
        SGLDConfig(seed=1.5)
    with pytest.raises(ValueError, match=r"lr must be a finite float >= 0"):
        SGLDConfig(lr=np.bool_(True))
