"""Local learning coefficient (LLC) by localized SGLD: the sampling baseline.

Estimator (Lau et al.): with L_n the mean negative log-likelihood over the n training samples
and w* the checkpoint,

    λ̂ = nβ (E_{w∼p_loc}[L_n(w)] − L_n(w*)),
    p_loc(w) ∝ exp(−nβ L_n(w) − (γ/2)‖w − w*‖²).

SGLD step (step size ε, minibatch B_t of size b, L_B the batch mean loss):

    w ← w − (ε/2) (nβ ∇L_B(w) + γ (w − w*)) + N(0, ε I).

Default nβ = b / ln b with b the *batch size* (devinterp's default; b = n for full batch, so
nβ = n/ln n, the WBIC temperature β = 1/ln n). E[L_n(w)] is the mean of the minibatch losses
L_B(w_t) over the draws after burn-in (unbiased for L_n(w_t)); L_n(w*) is one full-data pass.

Chains run in lockstep: parameters are stacked along a leading chain axis and the gradient is
``torch.func.vmap(torch.func.grad_and_value(loss_fn))`` over it. All randomness (minibatch
indices, Langevin noise) comes from one ``torch.Generator`` seeded by ``seed``, drawn in a fixed
order, so a run is deterministic; :func:`sgld_llc_reference` runs the same chains one at a time
with the same draws (the oracle of the vmapped path).

Diagnostics: per-chain loss traces and LLC, the spread across chains and a Gelman–Rubin R̂ of the
loss traces, the MALA acceptance probability of each proposed step (how far the step size is
from exact Langevin dynamics; devinterp's acceptance diagnostic), and divergence detection: a
non-finite loss or nβ(L_B(w) − L_n(w*)) > ``DIVERGENCE_FACTOR``·d (d = parameter count; a sane
posterior has λ ≤ d/2) stops the run and reports ``diverged=True`` with the chain and step, and
``llc=None``.

MALA acceptance of the step w → w' (diagnostic only; every move is kept), with U_B(w) =
nβ L_B(w) + (γ/2)‖w − w*‖² and q(a → b) ∝ exp(−‖b − a + (ε/2) ∇U(a)‖²/(2ε)):

    a = min(1, exp(−(U_{B_t}(w') − U_{B_t}(w))) q(w' → w)/q(w → w')),

both potentials on the *same* batch B_t, the one drawn for the step (full batch: U_n). The
forward term uses the gradient the move used, the reverse term ∇U_{B_t}(w'). With minibatches
U_{B_t}(w) is one extra forward pass at w (the gradient at w came from the previous batch):
comparing potentials from different batches would add nβ(L_{B_t}(w') − L_{B_{t−1}}(w)), batch
noise that does not shrink with ε. What is left of the batch noise, (√ε/2) ξ·(∇U_{B_{t−1}}(w) −
∇U_{B_t}(w')) to leading order (ξ the step's noise), vanishes as ε → 0, so a → 1 as ε → 0 with
and without minibatches.

Pass accounting: ``n_passes`` counts evaluations of one batch at one parameter point, per chain:
a forward+backward counts 1, and so does the extra forward of a minibatch step. Full batch:
chains × (steps + 1) + 1 (the + 1 inside is ∇U at w*, the + 1 outside one forward pass over the
data for L_n(w*)); minibatches (``batch_size`` < n): chains × (2 steps + 1) + 1.

References: E. Lau, Z. Furman, G. Wang, D. Murfet, S. Wei, The Local Learning Coefficient,
arXiv:2308.12108; M. Welling, Y. W. Teh, Bayesian learning via stochastic gradient Langevin
dynamics (ICML 2011); S. Watanabe, A widely applicable Bayesian information criterion (2013).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "DIVERGENCE_FACTOR",
    "LossFn",
    "SGLDConfig",
    "SGLDResult",
    "default_nbeta",
    "gaussian_nll_loss",
    "sgld_llc",
    "sgld_llc_reference",
]

#: Divergence when nβ(L_B(w) − L_n(w*)) exceeds DIVERGENCE_FACTOR × (number of parameters).
DIVERGENCE_FACTOR = 100.0

LossFn = Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]

#: Seeds ``torch.Generator.manual_seed`` accepts.
SEED_RANGE = (-(2**63), 2**64 - 1)


def _is_real(v: object) -> bool:
    """A real number (Python or NumPy) that is not a bool (``True`` is not a step size)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)


def _is_int(v: object) -> bool:
    """An integer (Python or NumPy) that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_)


def default_nbeta(batch_size: int) -> float:
    """nβ = b/ln b for batch size b (devinterp's default; full batch: n/ln n).

    >>> round(default_nbeta(1000), 3)
    144.765
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 2:
        raise ValueError(f"batch_size must be an int >= 2, got {batch_size!r}")
    return batch_size / math.log(batch_size)


def gaussian_nll_loss(model: nn.Module, *, sigma: float = 1.0) -> LossFn:
    """L_B(params) = mean_i ‖f(x_i) − y_i‖² / (2σ²): the Gaussian NLL up to a constant.

    Sum over output coordinates, mean over the batch; ``f`` is ``functional_call(model, params)``.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")

    def loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        out = torch.func.functional_call(model, params, (x,))
        return ((out - y) ** 2).reshape(out.shape[0], -1).sum(-1).mean() / (2 * sigma**2)

    return loss


@dataclass(frozen=True)
class SGLDConfig:
    """Localized SGLD settings: step size ``lr`` (ε), localization ``gamma`` (γ), ``nbeta``
    (None: b/ln b), chains, draws after ``burnin``, ``batch_size`` (None: full batch), ``seed``.

    ``lr`` > 0 and ``gamma`` ≥ 0 are finite numbers, ``nbeta`` a finite number > 0 (bools are
    refused for all three); the counts and ``seed`` are ints (not bools); invalid values raise
    ``ValueError`` here, not later inside the sampler.

    The default (ε, γ) = (1e-4, 100) is a starting point, not a calibration: on reduced-rank
    regression (3, 2, 3) at truth 0 (n = 1000, λ = 5/2) it gives λ̂ = 0.036, with MALA
    acceptance 0.9997 and R̂ 1.05 but ``SGLDResult.drift`` 1.05 (γ = 100 holds the chains where
    the loss barely rises); (ε, γ) = (3e-3, 1) gives 2.29, drift 0.02 (s25 audit TRIPLE #2).
    Pick them with `neuromanifold.singular.llc_convergence.calibrate_step`, or check ``drift``."""

    lr: float = 1e-4
    gamma: float = 100.0
    nbeta: float | None = None
    num_chains: int = 4
    num_draws: int = 1000
    burnin: int = 0
    batch_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lr", "gamma"):
            v = getattr(self, name)
            if not (_is_real(v) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        nb = self.nbeta
        if nb is not None and not (_is_real(nb) and math.isfinite(nb) and nb > 0):
            raise ValueError(f"nbeta must be > 0 or None (a finite float), got {nb!r}")
        if not _is_int(self.seed):
            raise ValueError(f"seed must be an int, got {type(self.seed).__name__} {self.seed!r}")
        if not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise ValueError(
                f"seed must be an int in [-2**63, 2**64 - 1] (torch.Generator's range), "
                f"got {self.seed!r}"
            )
        for name, lo in (("num_chains", 1), ("num_draws", 2), ("burnin", 0)):
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if self.batch_size is not None and (not _is_int(self.batch_size) or self.batch_size < 2):
            raise ValueError(f"batch_size must be an int >= 2 or None, got {self.batch_size!r}")
        # NumPy scalars (accepted since 595cb63 ran them) are stored as Python numbers, so the
        # JSON form and the torch calls see int and float (s17 audit AH #3)
        for name in ("lr", "gamma", "nbeta"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("seed", "num_chains", "num_draws", "burnin", "batch_size"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class SGLDResult:
    """Outcome of :func:`sgld_llc`; ``llc`` is None when a chain diverged.

    ``loss_trace[c][t]``: minibatch loss of chain c at step t, burn-in steps included (the
    estimate uses the steps after ``burnin``; truncated at a divergence). ``rhat``: Gelman–Rubin
    R̂ of the loss traces (None for one chain).
    ``mala_acceptance[c]``: mean MALA acceptance probability of chain c's steps (both potentials
    on the step's batch, see the module docstring). ``n_passes``: batch evaluations, all chains
    (full batch chains × (steps + 1) + 1, minibatches chains × (2 steps + 1) + 1).
    """

    llc: float | None
    llc_per_chain: tuple[float, ...]
    llc_std: float | None
    loss_init: float
    nbeta: float
    rhat: float | None
    mala_acceptance: tuple[float, ...]
    loss_trace: tuple[tuple[float, ...], ...]
    n_passes: int
    diverged: bool
    diverged_chain: int | None
    diverged_step: int | None
    config: SGLDConfig

    @property
    def drift(self) -> float | None:
        """``nβ·|mean(2nd half) − mean(1st half)| / λ̂`` of the post-burn-in loss traces (all
        chains): how far the chains' loss was still moving, relative to the estimate. ``None``
        when a chain diverged or ``λ̂ ≤ 0``. `neuromanifold.singular.llc_convergence`'s
        ``calibrate_step`` accepts a run at ≤ 0.2; acceptance and R̂ alone can look healthy
        while the chains are still settling (s25 audit TRIPLE #2: the default (ε, γ) on
        reduced-rank regression)."""
        if self.diverged or self.llc is None or not self.llc > 0:
            return None
        tr = torch.tensor(self.loss_trace, dtype=torch.float64)[:, self.config.burnin :]
        h = tr.shape[1] // 2
        if h == 0:
            return None
        return self.nbeta * abs(float(tr[:, h:].mean() - tr[:, :h].mean())) / self.llc

    def to_dict(self) -> dict[str, Any]:
        """JSON form (traces included, and ``drift``)."""
        d = {k: v for k, v in self.__dict__.items() if k != "config"}
        d["drift"] = self.drift
        d["llc_per_chain"] = list(self.llc_per_chain)
        d["mala_acceptance"] = list(self.mala_acceptance)
        d["loss_trace"] = [list(t) for t in self.loss_trace]
        d["config"] = self.config.to_dict()
        return d


def _gelman_rubin(traces: Tensor) -> float | None:
    c, t = traces.shape
    if c < 2 or t < 2:
        return None
    means = traces.mean(1)
    w = traces.var(1, unbiased=True).mean()
    b = t * means.var(unbiased=True)
    if w <= 0:
        return None
    var_hat = (t - 1) / t * w + b / t
    return float(torch.sqrt(var_hat / w))


def _setup(params: dict[str, Tensor], x: Tensor, y: Tensor, cfg: SGLDConfig) -> tuple[int, float]:
    """Validate the checkpoint and the data before sampling; returns (batch size b, nβ).

    Raises:
        TypeError: ``params`` is not a non-empty dict of tensors, or ``x``/``y`` is not a tensor.
        ValueError: a parameter or the data is not finite, ``x`` and ``y`` differ in length,
            there are no samples, or fewer than 2 for the default nβ = n/ln n, or
            ``batch_size`` > n.
    """
    if not isinstance(params, dict) or not params:
        raise TypeError("params must be a non-empty dict[str, Tensor] (the checkpoint w*)")
    for name, v in params.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"params[{name!r}] must be a Tensor, got {type(v).__name__}")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise ValueError(
                f"params[{name!r}] contains non-finite values (nan or inf): the checkpoint w* "
                f"must be finite"
            )
    for name, v in (("x", x), ("y", y)):
        if not isinstance(v, Tensor):
            raise TypeError(
                f"{name} must be a Tensor (samples on dimension 0), got {type(v).__name__}"
            )
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x and y must have the same number of samples, got {x.shape[0]} and {y.shape[0]}"
        )
    n = x.shape[0]
    if n == 0:
        raise ValueError("x and y hold no samples (n = 0): the LLC needs training data")
    if n < 2 and cfg.nbeta is None:
        raise ValueError(
            f"x and y hold n = {n} sample: the default nβ = n/ln n needs n >= 2 "
            f"(pass more samples or SGLDConfig(nbeta=...))"
        )
    for name, v in (("x", x), ("y", y)):
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise ValueError(
                f"{name} contains non-finite values (nan or inf): the data must be finite"
            )
    b = n if cfg.batch_size is None else cfg.batch_size
    if b > n:
        raise ValueError(f"batch_size must be <= n = {n}, got {b}")
    return b, (cfg.nbeta if cfg.nbeta is not None else default_nbeta(b))


def _loss_at_checkpoint(loss_fn: LossFn, star: dict[str, Tensor], x: Tensor, y: Tensor) -> float:
    """L_n(w*), one full-data pass; a ValueError if it is not finite, or if ``loss_fn`` fails
    on a checkpoint and data of different floating dtypes (say a float32 model and float64 x)."""
    try:
        with torch.no_grad():
            value = float(loss_fn(star, x, y))
    except RuntimeError as err:
        dtypes = sorted({str(v.dtype) for v in star.values() if v.is_floating_point()})
        if x.is_floating_point() and dtypes and dtypes != [str(x.dtype)]:
            raise ValueError(
                f"loss_fn failed on the checkpoint ({', '.join(dtypes)}) and x ({x.dtype}), which "
                f"differ in dtype: give params, the model and the data one floating dtype, e.g. "
                f"float64 (model.double(), params from it, x.double()) "
                f"({str(err).splitlines()[0][:120]})"
            ) from err
        raise
    if not math.isfinite(value):
        raise ValueError(
            f"the loss at the checkpoint, L_n(w*), is {value}: loss_fn is not finite at params "
            f"on x, y, so no LLC can be estimated there"
        )
    return value


def _draws(gen: torch.Generator, cfg: SGLDConfig, n: int, b: int, like: dict[str, Tensor]):
    """One step's randomness for all chains, in a fixed order: batch indices, then noise."""
    if b == n:
        idx = None
    else:
        idx = torch.stack([torch.randperm(n, generator=gen)[:b] for _ in range(cfg.num_chains)])
    noise = {
        k: torch.randn((cfg.num_chains, *v.shape), generator=gen, dtype=v.dtype)
        for k, v in like.items()
    }
    return idx, noise


def _run(
    loss_fn: LossFn,
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    cfg: SGLDConfig,
    *,
    vectorized: bool,
) -> SGLDResult:
    b, nbeta = _setup(params, x, y, cfg)
    n, c = x.shape[0], cfg.num_chains
    star = {k: v.detach() for k, v in params.items()}
    d = sum(v.numel() for v in star.values())
    loss_init = _loss_at_checkpoint(loss_fn, star, x, y)
    gen = torch.Generator().manual_seed(cfg.seed)
    eps, gamma = cfg.lr, cfg.gamma

    gv = torch.func.grad_and_value(loss_fn)
    if vectorized:
        batched = torch.func.vmap(gv, in_dims=(0, None, None))
        batched_idx = torch.func.vmap(gv, in_dims=(0, 0, 0))
        losses_idx = torch.func.vmap(loss_fn, in_dims=(0, 0, 0))

        def grads(w: dict[str, Tensor], idx: Tensor | None):
            if idx is None:
                return batched(w, x, y)
            return batched_idx(w, x[idx], y[idx])

        def batch_losses(w: dict[str, Tensor], idx: Tensor) -> Tensor:
            with torch.no_grad():
                return losses_idx(w, x[idx], y[idx])
    else:

        def grads(w: dict[str, Tensor], idx: Tensor | None):
            outs = []
            for ci in range(c):
                wc = {k: v[ci] for k, v in w.items()}
                xb, yb = (x, y) if idx is None else (x[idx[ci]], y[idx[ci]])
                outs.append(gv(wc, xb, yb))
            g = {k: torch.stack([o[0][k] for o in outs]) for k in w}
            return g, torch.stack([o[1] for o in outs])

        def batch_losses(w: dict[str, Tensor], idx: Tensor) -> Tensor:
            with torch.no_grad():
                return torch.stack(
                    [
                        loss_fn({k: v[ci] for k, v in w.items()}, x[idx[ci]], y[idx[ci]])
                        for ci in range(c)
                    ]
                )

    def potential(w, g, loss):
        """U = nβ L + γ/2‖w − w*‖² and ∇U, per chain."""
        diff = {k: w[k] - star[k] for k in w}
        sq = sum(dv.reshape(c, -1).pow(2).sum(1) for dv in diff.values())
        grad_u = {k: nbeta * g[k] + gamma * diff[k] for k in w}
        return nbeta * loss + 0.5 * gamma * sq, grad_u

    w = {k: v.unsqueeze(0).repeat(c, *([1] * v.dim())).clone() for k, v in star.items()}
    total = cfg.burnin + cfg.num_draws
    trace = torch.empty(c, total, dtype=torch.float64)
    accept = torch.zeros(c, dtype=torch.float64)
    n_passes = 1
    diverged_chain = diverged_step = None

    first_idx = _draws(gen, cfg, n, b, star)[0]  # the batch for ∇U at w* (None: full batch)
    g, loss = grads(w, first_idx)
    n_passes += c
    u, grad_u = potential(w, g, loss)
    steps_done = 0
    for t in range(total):
        idx, noise = _draws(gen, cfg, n, b, star)
        proposal = {k: w[k] - 0.5 * eps * grad_u[k] + math.sqrt(eps) * noise[k] for k in w}
        g_new, loss_new = grads(proposal, idx)
        n_passes += c
        u_new, grad_u_new = potential(proposal, g_new, loss_new)
        if idx is not None:
            # U_{B_t}(w): the potential at w on the proposal's batch (u came from B_{t-1}).
            u = u + nbeta * (batch_losses(w, idx) - loss)
            n_passes += c
        # MALA log acceptance ratio of the Langevin proposal (diagnostic only; all moves kept).
        fwd = sum(
            (proposal[k] - w[k] + 0.5 * eps * grad_u[k]).reshape(c, -1).pow(2).sum(1) for k in w
        )
        bwd = sum(
            (w[k] - proposal[k] + 0.5 * eps * grad_u_new[k]).reshape(c, -1).pow(2).sum(1) for k in w
        )
        log_a = -(u_new - u) - (bwd - fwd) / (2 * eps)
        accept += torch.exp(torch.clamp(log_a, max=0.0)).nan_to_num(0.0)
        w, g, loss, u, grad_u = proposal, g_new, loss_new, u_new, grad_u_new
        trace[:, t] = loss.detach().to(torch.float64)
        steps_done = t + 1
        bad = ~torch.isfinite(loss) | (nbeta * (loss - loss_init) > DIVERGENCE_FACTOR * d)
        if bool(bad.any()):
            diverged_chain, diverged_step = int(bad.nonzero()[0, 0]), t
            break
    draws = trace[:, cfg.burnin : steps_done]
    acc = tuple(float(a) / max(steps_done, 1) for a in accept)
    traces = tuple(tuple(float(v) for v in row) for row in trace[:, :steps_done])
    if diverged_chain is not None or draws.shape[1] == 0:
        return SGLDResult(
            llc=None,
            llc_per_chain=(),
            llc_std=None,
            loss_init=loss_init,
            nbeta=nbeta,
            rhat=None,
            mala_acceptance=acc,
            loss_trace=traces,
            n_passes=n_passes,
            diverged=diverged_chain is not None,
            diverged_chain=diverged_chain,
            diverged_step=diverged_step,
            config=cfg,
        )
    per_chain = nbeta * (draws.mean(1) - loss_init)
    return SGLDResult(
        llc=float(per_chain.mean()),
        llc_per_chain=tuple(float(v) for v in per_chain),
        llc_std=float(per_chain.std(unbiased=True)) if c > 1 else None,
        loss_init=loss_init,
        nbeta=nbeta,
        rhat=_gelman_rubin(draws),
        mala_acceptance=acc,
        loss_trace=traces,
        n_passes=n_passes,
        diverged=False,
        diverged_chain=None,
        diverged_step=None,
        config=cfg,
    )


def sgld_llc(
    loss_fn: LossFn,
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    *,
    config: SGLDConfig | None = None,
) -> SGLDResult:
    """Localized-SGLD LLC λ̂ = nβ(E[L_n(w)] − L_n(w*)) at w* = ``params``; chains vmapped.

    ``loss_fn(params, x_batch, y_batch)`` returns the batch-mean NLL (e.g.
    ``gaussian_nll_loss(model)``: :func:`gaussian_nll_loss` builds it from the model); ``x``,
    ``y``: the n training samples on dimension 0. The default `SGLDConfig` is not calibrated
    for a given model: check ``result.drift`` (≤ 0.2 is ``calibrate_step``'s rule) or calibrate.

    Raises:
        ValueError: before any step, when the checkpoint or the data are not finite, L_n(w*) is
            not finite, there are no samples (or one, with the default nβ), ``batch_size`` > n,
            or ``loss_fn`` fails on a checkpoint and ``x`` of different floating dtypes. A
            divergence *during* sampling is not an error: ``diverged=True``, ``llc=None``.
    """
    return _run(loss_fn, params, x, y, config or SGLDConfig(), vectorized=True)


def sgld_llc_reference(
    loss_fn: LossFn,
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    *,
    config: SGLDConfig | None = None,
) -> SGLDResult:
    """Oracle: the same chains and random draws as :func:`sgld_llc`, one chain at a time."""
    return _run(loss_fn, params, x, y, config or SGLDConfig(), vectorized=False)
