"""The library's localized SGLD and devinterp's agree on the LLC of a tiny reduced-rank model.

Both samplers run the same Markov chain definition (devinterp 2.0.1, ``sgmcmc_sgld``):

    w ← w − (ε/2)(nβ ∇L_B(w) + γ(w − w*)) + N(0, ε·noise_level²),

with L_B the batch-mean loss. With noise_level = 1 (devinterp's default) this is the library's
step term for term, so the same (ε, γ, nβ) are passed to both and no conversion is applied.
Two bookkeeping differences are aligned here, not converted: devinterp records the loss at w_t
*before* step t (its step 0 is w* itself) while the library records it after the step, so
devinterp's trace is shifted by one step; and both traces go through the library's
``running_llc`` (20 % burn-in). The random numbers differ (devinterp: the global torch RNG
seeded per chain; the library: its own generator), so the check is statistical: a Welch
t-test on the per-chain estimates (chains are independent, so the chain spread is an honest
standard error whatever the autocorrelation within a chain; short chains are fine because
both samplers start at w* and follow the same transition law) must not reject equality at
level ``ALPHA``. A run of devinterp at noise_level √2 (noise variance 2ε, the other common
SGLD convention, i.e. twice the temperature) must be *rejected* by the same test: the check
can see a factor-2 convention error.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys

import pytest
import torch
from torch import nn


def _hide_broken_torchvision() -> None:
    """transformers (imported by devinterp) imports torchvision when it is installed; a
    torchvision built for another torch raises at import, so hide it (it is not used here)."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    except Exception:
        sys.modules["torchvision"] = None


_hide_broken_torchvision()
pytest.importorskip("devinterp")
datasets = pytest.importorskip("datasets")
dvi_llc = pytest.importorskip("devinterp.slt.llc")

from neuromanifold.singular.llc_convergence import running_llc  # noqa: E402
from neuromanifold.singular.sgld import (  # noqa: E402
    SGLDConfig,
    default_nbeta,
    gaussian_nll_loss,
    sgld_llc,
)

#: two-sided level of the Welch t-test on the per-chain LLC estimates of the two samplers.
ALPHA = 0.01
#: L_n(w*) of the two: devinterp keeps losses in float32.
RTOL_FLOAT32 = 1e-6
N_SAMPLES = 200
CHAINS = 8
HOT_CHAINS = 4
DRAWS = 400
LR = 1e-3
GAMMA = 10.0
SEED = 0


def _tiny_rrr() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """y = B A x + noise, M = N = 3, H = 2, planted rank 1 (one dead hidden unit), float64."""
    g = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Linear(3, 2, bias=False), nn.Linear(2, 3, bias=False)).double()
    with torch.no_grad():
        model[0].weight.zero_()
        model[1].weight.zero_()
        model[0].weight[0] = torch.randn(3, generator=g, dtype=torch.float64)
        model[1].weight[:, 0] = torch.randn(3, generator=g, dtype=torch.float64)
    x = torch.randn(N_SAMPLES, 3, generator=g, dtype=torch.float64)
    with torch.no_grad():
        y = model(x) + torch.randn(N_SAMPLES, 3, generator=g, dtype=torch.float64)
    return model, x, y


def _per_chain(trace: torch.Tensor, init: float, nbeta: float) -> list[float]:
    return [float(running_llc(trace[c : c + 1], init, nbeta)[-1]) for c in range(trace.shape[0])]


def _library(model, x, y) -> tuple[list[float], float]:
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    cfg = SGLDConfig(lr=LR, gamma=GAMMA, num_chains=CHAINS, num_draws=DRAWS, seed=SEED)
    res = sgld_llc(gaussian_nll_loss(model), params, x, y, config=cfg)
    assert not res.diverged
    trace = torch.tensor(res.loss_trace, dtype=torch.float64)  # L(w_1) … L(w_DRAWS)
    return _per_chain(trace, res.loss_init, res.nbeta), res.loss_init


def _devinterp(model, x, y, tmp_path, *, noise_level: float, chains: int):
    def loss_fn(m: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        i = input_ids[:, 0]  # each dataset row is [sample index, dummy token]
        return ((m(x[i]) - y[i]) ** 2).sum(-1, keepdim=True) / 2

    ds = datasets.Dataset.from_dict({"input_ids": [[i, 0] for i in range(N_SAMPLES)]})
    gc.freeze()  # devinterp runs gc.collect() around every chain; keep the test heap out of it
    try:
        res = _call_llc(model, ds, loss_fn, tmp_path, noise_level=noise_level, chains=chains)
    finally:
        gc.unfreeze()
    trace = torch.tensor(res.loss_trace.values, dtype=torch.float64)[:, 1:]
    assert bool(torch.isfinite(trace).all())
    return _per_chain(trace, float(res.init_loss), default_nbeta(N_SAMPLES)), float(res.init_loss)


def _call_llc(model, ds, loss_fn, tmp_path, *, noise_level: float, chains: int):
    """devinterp.slt.llc.llc, full batch, no burn-in steps, one L_n(w*) batch."""
    return dvi_llc.llc(
        model,
        ds.with_format("torch"),
        {},
        lr=LR,
        n_beta=default_nbeta(N_SAMPLES),
        loss_fn=loss_fn,
        localization=GAMMA,
        noise_level=noise_level,
        num_chains=chains,
        num_draws=DRAWS + 1,
        batch_size=N_SAMPLES,
        num_init_loss_batches=1,
        init_seed=SEED,
        device="cpu",
        output_path=str(tmp_path / f"samples_{noise_level:g}.zarr"),
    )


def _welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """|t| of Welch's test for equal means and its two-sided critical value at ``ALPHA``."""
    from scipy.stats import t as student

    va, vb = (statistics.variance(v) / len(v) for v in (a, b))
    t = abs(statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t, float(student.ppf(1 - ALPHA / 2, df))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_library_and_devinterp_sgld_agree_within_chain_spread(tmp_path):
    model, x, y = _tiny_rrr()
    lib, init_lib = _library(model, x, y)
    dvi, init_dvi = _devinterp(model, x, y, tmp_path, noise_level=1.0, chains=CHAINS)
    # Same checkpoint, same loss: L_n(w*) agrees (devinterp stores losses in float32).
    assert init_dvi == pytest.approx(init_lib, rel=RTOL_FLOAT32, abs=0.0)
    assert statistics.fmean(lib) > 0 and statistics.fmean(dvi) > 0
    t, crit = _welch(lib, dvi)
    assert t <= crit, (t, crit, lib, dvi)
    # Power: twice the noise variance (temperature ×2) must be told apart by the same test.
    hot, _ = _devinterp(model, x, y, tmp_path, noise_level=math.sqrt(2.0), chains=HOT_CHAINS)
    t_hot, crit_hot = _welch(lib, hot)
    assert t_hot > crit_hot, (t_hot, crit_hot, lib, hot)
