"""Read + assembly versus localized-SGLD LLC estimation, on models with known λ (one run).

Rows (all float64, Gaussian noise σ = 1, the checkpoint w* is the true parameter):

* ``rrr M-H-N rR``: y = B A x with planted rank r and one dead hidden unit (H = r + 1), hidden
  basis randomly rotated. Read: the whole-model ``read`` (factor pass + detectors + sweeps).
* ``dln L``: ``planted_deep_linear`` (square width 4, a dead path through all L layers, end-to-end
  rank 3). Same read; closed form: Aoyagi's deep-linear λ.
* ``node <act>``: the one-hidden-node cell y = a·σ(b x) at a = b = 0, whole-model ``read``;
  closed form (1/2, 2) or (1/4, 1).

Two assemblies of each read are printed (``assemble_from_reading``):

* ``λ_rd+arch`` (read + architecture dims): the read's genuine directions (orders, layers), plus
  what the read does not measure, taken from the model and its architecture: the regular
  directions r(M + N − r), r the numerical rank of the end-to-end matrix (``numerical_rank``),
  and each dead direction's component dimensions, (M − r, N − r) for an rrr row, 1 per layer for a
  dln row. The node rows pass nothing extra (all their parameters are in the read structure), so
  there the two columns are one and the same assembly. This column is compared with λ_cf (``err``).
* ``λ_rd`` (the read alone): ``assemble_from_reading(reading)`` with no argument: each genuine
  direction with components of dimension 1, each live record 1/2 and no regular count. On the
  rrr and dln rows it is only the dead direction's own contribution (e.g. 1/2 for ``rrr 3-2-3
  r1``, closed form 7/2), not an estimate of λ.

The read runs with its defaults (32-point grid, thresholds, ``snap="auto"``: a non-gauge
candidate whose unsnapped rate is not visible is read again from the snapped base point when
its offset lies inside the sweep's range; whether a candidate is live or genuine is only known
after it is read, so such re-reads are part of the triple's cost; the two live kfac candidates
of ``dln L4`` sit at offsets above ρ_W and are read once since the read skips those re-reads —
172 passes before that change, 106 after) except
``per_layer=False``: the assembly (``assemble_from_reading`` and the component dimensions
below) consumes each direction's order, class and layers, never ``info["per_layer"]``; the
per-layer rates of a multi-layer chain direction are a diagnostic costing one more pass per
t-value (32), and (λ, m) and the orders are the same with and without them on every row.

Protocol for SGLD (the library's ``sgld_llc``; nothing below looks at the true λ except the
error/settling columns, which are measurements, not tuning):

1. Data: n = 1000 training samples, full batch (B = n), nβ = B/ln B = 144.8 (spec §10 default).
2. Step size and localization: ``calibrate_step`` on pilot runs (2 chains × 500 draws, burn-in
   100, seed + 100), grid ε ∈ {3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5}, γ ∈ {1, 10, 100}: for γ
   ascending, ε descending, the first pilot that does not diverge, has LLC > 0, mean MALA
   acceptance ≥ 0.9, R̂ ≤ 1.1 and a levelled trace (half-to-half LLC drift ≤ 20 %). If no pilot
   passes every rule, the largest non-diverging ε at the smallest γ with MALA acceptance ≥ 0.9
   and LLC > 0 is used and the row is flagged ``*`` (relaxed: its trace diagnostics failed).
   The pilots' passes are printed as ``calib``; the ``ratio`` column leaves them out (favours
   SGLD), the ``+calib`` column adds them.
3. Long run: 4 chains × D steps at the chosen (ε, γ), D = max(``--min-draws``, 2⌈1.25 · 100 ·
   (read passes)/4⌉), so that the settling deadline D/2 is 125× the read's passes: a row that has
   not settled by then needs more than 100× the read's passes. Running estimate after T steps:
   all 4 chains, draws ⌊0.2 T⌋ … T − 1 (20 % burn-in), ``running_llc``.
   *Settling*: the smallest T after which the running estimate stays within ±10 % of λ for the
   rest of the run (``settling_point``), accepted only if T ≤ D/2 (it then stayed inside for
   at least as long again); otherwise "not settled". Passes to settle: 4 (T + 1) + 1.
   *First hit* (the earlier oracle criterion, for reference only): the first T at which the
   running estimate is inside the band; it needs the true λ and rewards a noise crossing.
4. Default budget (devinterp's RRR test, spec §10): 3 chains × 2000 draws, i.e. chains 0–2 of
   the long run truncated at 2000 steps (same sampler, same hyperparameters), 20 % burn-in.
   Passes 3 · 2001 + 1.

Pass accounting (one pass = one evaluation of the batch at one parameter point): SGLD's
forward+backward of the batch loss per chain step counts 1 (batch = all n = 1000 samples), + 1
forward for L_n(w*). The read counts ``n_forward_passes + n_backward_passes`` of its Reading
(probe batch N = 256 samples; the node cells' own probe set, 128): 2 structure passes (output
check and graph trace, on 16 samples, counted as full passes), the probe-rank count (1 forward +
1 backward over the probe set, counted as 2 passes), the factor pass (1 forward + 1
backward per output Hessian column: the forward those backwards reuse counts 1 more, an
over-count by one), and per read direction 32 forward-mode JVP passes (one per t, also when
``vmap`` evaluates several t at once) + 1 for the floor's random direction, again for a snapped
re-read, for a genuine read 1 per t-value of its fitted window (the mirrored side,
``info["one_sided"]``) and for a flat non-gauge read 3 (its mirrored side at the largest t). E.g.
``rrr 3-2-3``: 2 + 2 + (1 + 3) + 33 + 9 = 50. A JVP pass (primal + tangent) is counted like an SGLD
forward+backward. An SGLD pass touches 1000 samples, a read pass 256 (128): per sample processed,
the ratios below would be ×3.9 (×7.8) larger.

Second table: devinterp's own estimator (``pip install devinterp==2.0.1``, the ``bench`` extra),
``devinterp.slt.llc.llc`` — its documented one-call "sample and compute LLC" entry point — on the
same model (a deep copy of the checkpoint), the same n = 1000 samples, the same loss and the same
(ε, γ, nβ) per row:

* Data and loss: devinterp 2.0.1's API is language-model shaped (a HuggingFace ``Dataset`` with an
  ``input_ids`` column and a per-token ``loss_fn(model, input_ids) -> (batch, seq − 1)``). Each
  row of the dataset is ``[i, 0]``: the sample index i and a dummy second token; ``loss_fn``
  returns ‖f(x_i) − y_i‖²/2 for those indices as a (batch, 1) tensor. devinterp averages it
  over the batch, so its loss is exactly the library's ``gaussian_nll_loss`` (σ = 1).
* Sampler: ``sampling_method="sgmcmc_sgld"`` (its default), whose update is
  w ← w − (ε/2)(nβ ∇L_B(w) + γ(w − w*)) + N(0, ε): the library's SGLD step term for term
  (same nβ, γ, ε; noise_level 1), so no conversion is applied. nβ = ``devinterp.utils.
  default_nbeta(1000)`` = n/ln n (= the library's). Full batch (batch_size = n),
  ``num_init_loss_batches = 1``, no burn-in steps, ``init_seed = seed``, ``device="cpu"``.
* Calibration: devinterp ships no automatic calibration (its docs point to a notebook where a
  person sweeps lr/localization and inspects loss traces), so (ε, γ) is the row's λ-free
  ``calibrate_step`` choice above (same pilots, same ``*`` fallback); its pilots' passes are
  devinterp's calibration cost too (``+calib``).
* Run and settling: the library's long-run protocol, unchanged: ``LONG_CHAINS`` = 4 chains × D
  steps (the row's D of step 3), running estimate over all chains with 20 % burn-in
  (``running_llc`` on devinterp's ``loss_trace``), settled when inside ±10 % of λ from T to the
  end with T ≤ D/2. Passes: 4 · D fwd+bwd + 4 forward passes for L_n(w*) (devinterp evaluates it
  once per chain); to settle after T draws, 4 T + 4 (devinterp's draw s is the loss before its
  step s, so T draws cost T passes per chain; the library's draw s follows its step s + 1).
* Default budget (its RRR test, spec §10): chains 0–2, draws 0–1999 of the run. Chain c is
  seeded ``init_seed + c``, so this prefix is the trace a 3 × 2000 ``llc`` call returns; its
  ``llc_mean`` formula nβ (mean of every draw − mean init loss) is applied to the prefix
  (checked against devinterp's own ``llc_mean`` on the whole run, gap printed).
* Columns: devinterp's own estimate at 3 × 2000 (``llc_mean``: every draw averaged, step 0 at
  w* included, no burn-in — what a user of ``llc`` gets); the same prefix through the
  library's ``running_llc`` with 20 % burn-in (comparable to λ@3x2000); the spread of its
  chains; the whole run's estimate; settling and ratios as for the library; and z =
  (devinterp − library at 3×2000, both 20 % burn-in) / √(s²_dvi/3 + s²_lib/3), s = chain
  standard deviation.
* Divergence: a chain that devinterp stops (non-finite loss; it warns "Chain failed") or whose
  trace crosses the library's divergence rule (nβ(L − L_n(w*)) > 100 d) is reported as
  diverged, with no number.
* devinterp runs its chains one after another through a ``DataLoader`` and writes every step
  to a zarr store (in a temporary directory, removed afterwards); its wall time includes that.
  ``gc.freeze()`` is called once before the rows so that the ``gc.collect()`` devinterp runs
  around each chain does not scan this script's own heap.

When ``import devinterp`` fails, a note is printed and the second table is skipped. If the
installed torchvision does not import (a build for another torch), it is hidden from
transformers (``sys.modules["torchvision"] = None``) before devinterp is imported, with a note.

Third table, for reference: both samplers under a short rule (chains 0–2 and draws 0–1999 of
their long runs, settled by draw 1000, i.e. a stay of ≥ 1000 draws in the band instead of ≥ D/2
≥ 2000; passes 3 (T + 1) + 1 for the library, 3 T + 3 for devinterp). A short rule lets a trace
that drifts out of the band later count as settled; the long rule is the criterion, the short
one shows how much the verdict depends on the length of the stay asked for.

Run: ``OMP_NUM_THREADS=1 python benchmarks/read_vs_sgld.py`` (5–7 minutes on a
shared 2-core machine; the run prints the load average it started under). Development flags:
``--rows rrr,node`` (run only rows whose name contains one of the comma-separated strings),
``--skip-library-sgld`` (calibrate, but skip the library's long run), ``--skip-devinterp``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

import torch
from torch import nn

from neuromanifold.cells.planted import planted_deep_linear
from neuromanifold.cells.registry import get_cell
from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.closed_forms import deep_linear, one_hidden_node, rrr
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.llc_convergence import (
    BURNIN_FRACTION,
    calibrate_step,
    first_hit,
    running_llc,
    settling_point,
)
from neuromanifold.singular.read import read
from neuromanifold.singular.sgld import (
    DIVERGENCE_FACTOR,
    SGLDConfig,
    gaussian_nll_loss,
    sgld_llc,
)

TOL = 0.10
N_TRAIN = 1000
N_PROBE = 256
RANK_RTOL = 1e-9
#: the long run's chains; the default budget (devinterp's RRR test) is 3 chains × 2000 draws.
LONG_CHAINS = 4
DEFAULT_CHAINS, DEFAULT_DRAWS = 3, 2000
PILOT = dict(num_chains=2, num_draws=500, burnin=100)
#: the long run's settling deadline (D/2 steps) in units of the read's passes.
DEADLINE_RATIO = 125
#: settling counts only by this fraction of the long run (it then stays inside for the rest).
SETTLE_BY = 0.5


def long_draws(read_passes: int, min_draws: int) -> int:
    """D, the steps per chain of both samplers' long runs: at least ``min_draws``, and even, with
    ``LONG_CHAINS · D/2 ≥ DEADLINE_RATIO · read_passes`` (the settling deadline D/2 is 125× the
    read's passes, so a run that has not settled by then needs more than 100× them)."""
    return max(min_draws, 2 * math.ceil(DEADLINE_RATIO * read_passes / LONG_CHAINS))


def library_passes(chains: int, steps: int) -> int:
    """Library SGLD passes after ``steps`` draws: ∇U at w* and one per step, per chain, + L_n(w*).

    The library's draw s is the loss at the point reached by step s + 1 (`sgld_llc`)."""
    return chains * (steps + 1) + 1


def devinterp_passes(chains: int, steps: int) -> int:
    """devinterp passes after ``steps`` draws: one fwd+bwd per draw and one L_n(w*) per chain.

    devinterp's draw s is the loss at the point *before* its step s (draw 0 is at w*)."""
    return chains * steps + chains


def settle_steps(trace: torch.Tensor, loss_init: float, nbeta: float, lam: float, by: int):
    """Settling point (draws) of the running estimate (all chains of ``trace``, 20 % burn-in),
    or None when it is not inside ±TOL of λ from some T ≤ ``by`` to the end of ``trace``."""
    settle = settling_point(running_llc(trace, loss_init, nbeta), lam, rtol=TOL)
    return None if settle is None or settle > by else settle


def short_rule(trace: torch.Tensor, loss_init: float, nbeta: float, lam: float):
    """The short rule on a long-run trace: chains 0–2, first 2000 draws, settled by draw 1000."""
    head = trace[:DEFAULT_CHAINS, :DEFAULT_DRAWS]
    return settle_steps(head, loss_init, nbeta, lam, int(SETTLE_BY * DEFAULT_DRAWS))


def _orth(d: int, g: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def rrr_model(M: int, H: int, N: int, r: int, seed: int = 0):
    """Two bias-free Linear layers, product of rank r, one dead unit, hidden basis rotated."""
    g = torch.Generator().manual_seed(seed)
    A = torch.zeros(H, M, dtype=torch.float64)
    B = torch.zeros(N, H, dtype=torch.float64)
    A[:r] = torch.randn(r, M, generator=g, dtype=torch.float64)
    B[:, :r] = torch.randn(N, r, generator=g, dtype=torch.float64)
    Q = _orth(H, g)
    model = nn.Sequential(nn.Linear(M, H, bias=False), nn.Linear(H, N, bias=False)).double()
    with torch.no_grad():
        model[0].weight.copy_(Q @ A)
        model[1].weight.copy_(B @ Q.T)
    return model


def numerical_rank(model: nn.Sequential) -> int:
    """Rank of the end-to-end matrix (singular values above RANK_RTOL · largest)."""
    w = None
    for layer in model:
        w = layer.weight if w is None else layer.weight @ w
    s = torch.linalg.svdvals(w.detach())
    return int((s > RANK_RTOL * s[0]).sum())


def localized_estimand(act: str, nbeta: float, gamma: float) -> float:
    """E[nβ K] under exp(−nβ K − γ/2 (a² + b²)) for K = a² E[σ(b x)²]/2, x ∼ N(0, 1).

    The population version of what SGLD estimates on the one-node row (2-D grid quadrature):
    how far the localized, tempered estimand itself sits from λ at this nβ and γ.
    """
    import numpy as np
    from scipy.special import erf

    xg, wg = np.polynomial.hermite_e.hermegauss(100)
    wg = wg / wg.sum()
    acts = {
        "relu": lambda u: np.maximum(u, 0.0),
        "gelu": lambda u: 0.5 * u * (1 + erf(u / np.sqrt(2))),
        "relu2": lambda u: np.maximum(u, 0.0) ** 2,
    }
    grid = np.linspace(-6.0, 6.0, 2401)
    eb = np.array([np.sum(wg * acts[act](b * xg) ** 2) for b in grid])
    a2 = grid[:, None] ** 2
    k = 0.5 * a2 * eb[None, :]
    logw = -nbeta * k - 0.5 * gamma * (a2 + grid[None, :] ** 2)
    w = np.exp(logw - logw.max())
    return float((w * nbeta * k).sum() / w.sum())


def data_for(model: nn.Module, d_in: int, d_out: int, n: int, seed: int):
    g = torch.Generator().manual_seed(10_000 + seed)
    x = torch.randn(n, d_in, generator=g, dtype=torch.float64)
    with torch.no_grad():
        y = model(x) + torch.randn(n, d_out, generator=g, dtype=torch.float64)
    return x, y


@dataclass(frozen=True)
class ReadOut:
    """One read: ``lam_arch``/``m_arch`` assemble it with the architecture's dimensions (regular
    dims and component dims, see the module docstring), ``lam_read``/``m_read`` assemble the read
    alone; ``ks`` the genuine orders, ``passes`` fwd/JVP + bwd passes, ``wall`` seconds."""

    lam_arch: Fraction
    m_arch: int
    lam_read: Fraction
    m_read: int
    ks: tuple[int, ...]
    passes: int
    wall: float


def read_row(model: nn.Module, probe, family, dims_fn=None) -> ReadOut:
    """Read ``model`` and assemble the reading twice: alone, and with the architecture's regular
    dims r(M + N − r) and ``dims_fn``'s component dims (``dims_fn=None``: the read alone)."""
    t0 = time.perf_counter()
    # per_layer=False: the triple needs each direction's order and class; the per-layer rates
    # of a chain direction (len(ts) more passes) are a diagnostic the assembly never reads.
    reading = read(model, probe, family, progress=False, per_layer=False)
    alone = assemble_from_reading(reading)
    if dims_fn is None:
        asm = alone
    else:
        r = numerical_rank(model)
        M, N = model[0].weight.shape[1], model[-1].weight.shape[0]
        genuine = [i for i, d in enumerate(reading.directions) if d.klass == "genuine_singularity"]
        comp = {i: dims_fn(reading.directions[i], M, N, r) for i in genuine}
        asm = assemble_from_reading(reading, regular_dims=r * (M + N - r), component_dims=comp)
    wall = time.perf_counter() - t0
    passes = reading.meta["n_forward_passes"] + reading.meta["n_backward_passes"]
    ks = tuple(d.k for d in reading.directions if d.klass == "genuine_singularity")
    return ReadOut(asm.lam, asm.m, alone.lam, alone.m, ks, passes, wall)


def relaxed_choice(cal) -> tuple[float, float] | None:
    """Fallback when no pilot passed: largest stable ε at the smallest γ (MALA ≥ 0.9, LLC > 0)."""
    for t in cal.trials:  # ordered γ ascending, ε descending
        if not t.diverged and t.llc is not None and t.llc > 0 and t.mala_acceptance >= 0.9:
            return t.lr, t.gamma
    return None


def calibrate_row(model: nn.Module, x, y, args) -> dict:
    """The λ-free (ε, γ) choice of a row (``choice`` None: no stable step), shared by both SGLDs."""
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    loss = gaussian_nll_loss(model)
    t0 = time.perf_counter()
    cal = calibrate_step(loss, params, x, y, pilot=SGLDConfig(**PILOT, seed=args.seed + 100))
    out: dict = {"cal": cal, "wall_cal": time.perf_counter() - t0}
    choice, relaxed = (cal.lr, cal.gamma), False
    if cal.lr is None:
        choice, relaxed = relaxed_choice(cal), True
    return {**out, "choice": choice, "relaxed": relaxed}


def sgld_row(model: nn.Module, x, y, lam: float, read_passes: int, args, calib: dict) -> dict:
    """Run long at the calibrated (ε, γ); settling / first hit / default-budget estimate."""
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    loss = gaussian_nll_loss(model)
    out: dict = {"cal": calib["cal"], "wall_cal": calib["wall_cal"]}
    choice, relaxed = calib["choice"], calib["relaxed"]
    if choice is None:
        return {**out, "status": "no stable step", "relaxed": True}
    draws = long_draws(read_passes, args.min_draws)
    out.update(lr=choice[0], gamma=choice[1], relaxed=relaxed, draws=draws)
    cfg = SGLDConfig(
        lr=choice[0], gamma=choice[1], num_chains=LONG_CHAINS, num_draws=draws, seed=args.seed
    )
    t0 = time.perf_counter()
    res = sgld_llc(loss, params, x, y, config=cfg)
    wall = time.perf_counter() - t0
    out.update(wall=wall, wall_per_step=wall / (draws + 1), nbeta=res.nbeta)
    if res.diverged:
        return {**out, "status": f"diverged (chain {res.diverged_chain}, step {res.diverged_step})"}
    trace = torch.tensor(res.loss_trace, dtype=torch.float64)
    est = running_llc(trace, res.loss_init, res.nbeta)
    settle = settle_steps(trace, res.loss_init, res.nbeta, lam, int(SETTLE_BY * draws))
    short = short_rule(trace, res.loss_init, res.nbeta, lam)
    hit = first_hit(est, lam, rtol=TOL)
    default = running_llc(trace[:DEFAULT_CHAINS, :DEFAULT_DRAWS], res.loss_init, res.nbeta)[-1]
    per_chain = [
        float(running_llc(trace[c : c + 1, :DEFAULT_DRAWS], res.loss_init, res.nbeta)[-1])
        for c in range(DEFAULT_CHAINS)
    ]
    return {
        **out,
        "status": "ok",
        "llc_long": float(est[-1]),
        "llc_default": float(default),
        "llc_default_chains": per_chain,
        "passes_default": library_passes(DEFAULT_CHAINS, DEFAULT_DRAWS),
        "settle": settle,
        "passes_settle": None if settle is None else library_passes(LONG_CHAINS, settle),
        "passes_hit": None if hit is None else library_passes(LONG_CHAINS, hit),
        "passes_budget": library_passes(LONG_CHAINS, int(SETTLE_BY * draws)),
        "short": short,
        "passes_short": None if short is None else library_passes(DEFAULT_CHAINS, short),
        "accept": sum(res.mala_acceptance) / len(res.mala_acceptance),
        "rhat": res.rhat,
    }


HEAD = (
    f"{'row':<13} {'λ_cf':>5} {'λ_rd+arch':>9} {'err':>6} {'λ_rd':>5} {'k':<7} {'passes':>6} "
    f"{'wall':>5} | "
    f"{'ε':>6} {'γ':>4}  {'calib':>6} | {'λ@3x2000':>8} {'err':>6} {'passes':>6} | "
    f"{'λ@long':>6} {'D':>5} {'settle':>11} {'1st hit':>7} {'wall':>6} | "
    f"{'ratio':>6} {'+calib':>6} {'wall×':>6}"
)


def print_row(name: str, lam_cf: Fraction, rd: ReadOut, sg: dict) -> dict:
    lam = float(lam_cf)
    err_read = abs(float(rd.lam_arch) - lam) / lam
    cal = sg["cal"]
    left = (
        f"{name:<13} {lam_cf!s:>5} {rd.lam_arch!s:>9} {err_read:6.1%} {rd.lam_read!s:>5} "
        f"{list(rd.ks)!s:<7} {rd.passes:6d} {rd.wall:5.2f} | "
    )
    if sg["status"] != "ok":
        eps = f"{sg['lr']:6.0e} {sg['gamma']:4.0f}" if "lr" in sg else f"{'-':>6} {'-':>4}"
        print(left + f"{eps}  {cal.n_passes:6d} | SGLD: {sg['status']}")
        return {
            "name": name,
            "err_read": err_read,
            "read_alone_exact": rd.lam_read == lam_cf,
            "verdict": "sgld failed",
        }
    err_def = abs(sg["llc_default"] - lam) / lam
    settle = sg["passes_settle"]
    hit = sg["passes_hit"]
    if settle is not None:
        ratio = f"{settle / rd.passes:6.0f}"
        ratio_cal = f"{(settle + cal.n_passes) / rd.passes:6.0f}"
        wall_ratio = f"{sg['wall_per_step'] * sg['settle'] / rd.wall:6.1f}"
        settle_s = f"{settle:11d}"
        verdict = "ok" if settle / rd.passes >= 100 else "short"
        with_cal = (settle + cal.n_passes) / rd.passes >= 100
    else:
        ratio = f">{sg['passes_budget'] / rd.passes:5.0f}"
        ratio_cal = f">{(sg['passes_budget'] + cal.n_passes) / rd.passes:5.0f}"
        wall_ratio = f">{sg['wall'] * SETTLE_BY / rd.wall:5.0f}"
        settle_s = f"{'not settled':>11}"
        verdict = "ok" if sg["passes_budget"] / rd.passes >= 100 else "inconclusive"
        with_cal = verdict == "ok"
    print(
        left + f"{sg['lr']:6.0e} {sg['gamma']:4.0f}{'*' if sg['relaxed'] else ' '} "
        f"{cal.n_passes:6d} | "
        f"{sg['llc_default']:8.3f} {err_def:6.1%} {sg['passes_default']:6d} | "
        f"{sg['llc_long']:6.3f} {sg['draws']:5d} {settle_s} {hit if hit is not None else '-':>7} "
        f"{sg['wall']:5.1f}s | {ratio} {ratio_cal} {wall_ratio}"
    )
    return {
        "name": name,
        "err_read": err_read,
        "read_alone_exact": rd.lam_read == lam_cf,
        "err_default": err_def,
        "verdict": verdict,
        "with_cal": with_cal,
        "accept": sg["accept"],
        "rhat": sg["rhat"],
    }


# --------------------------------------------------------------------------------------------
# devinterp's estimator (second table)
# --------------------------------------------------------------------------------------------

DEVINTERP_VERSION = "2.0.1"


@dataclass(frozen=True)
class Devinterp:
    """devinterp's entry points, loaded once (``version``: the installed one, ``note``: caveats)."""

    llc: object
    default_nbeta: object
    Dataset: object
    version: str
    note: str


def load_devinterp() -> tuple[Devinterp | None, str]:
    """Import devinterp's ``llc`` (None and the reason when it cannot be imported)."""
    import importlib.metadata
    import sys

    note = ""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass  # not installed: transformers does not look for it
    except Exception as e:  # a build for another torch: transformers' import would fail on it
        sys.modules["torchvision"] = None
        note = f"torchvision fails to import ({type(e).__name__}); hidden from transformers"
    try:
        from datasets import Dataset
        from devinterp.slt.llc import llc
        from devinterp.utils import default_nbeta
    except Exception as e:
        return None, f"devinterp unavailable ({type(e).__name__}: {str(e).splitlines()[0]})"
    version = importlib.metadata.version("devinterp")
    return Devinterp(llc, default_nbeta, Dataset, version, note), note


def devinterp_loss(model: nn.Module, x, y):
    """devinterp's per-token loss on index rows [i, 0]: ‖f(x_i) − y_i‖²/2 as (batch, 1)."""

    def loss_fn(m: nn.Module, input_ids):
        i = input_ids[:, 0]
        out = m(x[i])
        return ((out - y[i]) ** 2).reshape(i.shape[0], -1).sum(-1, keepdim=True) / 2

    return loss_fn


def devinterp_run(dvi: Devinterp, model: nn.Module, x, y, *, lr, gamma, chains, draws, seed):
    """One ``devinterp.slt.llc.llc`` call, full batch; returns (result arrays, wall, failures)."""
    import contextlib
    import copy
    import io
    import tempfile
    import warnings

    n = x.shape[0]
    ds = dvi.Dataset.from_dict({"input_ids": [[i, 0] for i in range(n)]}).with_format("torch")
    model = copy.deepcopy(model)
    for p in model.parameters():  # the cells ship frozen; devinterp samples what has grads
        p.requires_grad_(True)
    with (
        tempfile.TemporaryDirectory() as tmp,
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stderr(io.StringIO()),  # its per-chain progress bars
    ):
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        res = dvi.llc(
            model,
            ds,
            {},
            lr=lr,
            n_beta=float(dvi.default_nbeta(n)),
            loss_fn=devinterp_loss(model, x, y),
            localization=gamma,
            num_chains=chains,
            num_draws=draws,
            batch_size=n,
            num_burnin_steps=0,
            num_init_loss_batches=1,
            init_seed=seed,
            device="cpu",
            output_path=f"{tmp}/samples.zarr",
        )
        out = {
            "llc_mean": float(res.llc_mean),
            "loss_trace": torch.tensor(res.loss_trace.values, dtype=torch.float64),
            "init_loss": float(res.init_loss),
            "nbeta": float(dvi.default_nbeta(n)),
        }
        wall = time.perf_counter() - t0
    failed = [str(w.message) for w in caught if "Chain failed" in str(w.message)]
    return out, wall, failed


def devinterp_row(
    dvi: Devinterp, model: nn.Module, x, y, lam: float, calib: dict, draws: int, args
) -> dict:
    """devinterp's long run (LONG_CHAINS × ``draws``, the row's D) at the row's (ε, γ): its
    estimates at the default budget (chains 0–2, first 2000 draws) and over the whole run,
    passes, settling under the long and the short rule, divergence."""
    if calib["choice"] is None:
        return {"status": "no stable step"}
    lr, gamma = calib["choice"]
    chains = LONG_CHAINS
    out, wall, failed = devinterp_run(
        dvi, model, x, y, lr=lr, gamma=gamma, chains=chains, draws=draws, seed=args.seed
    )
    base = {"lr": lr, "gamma": gamma, "relaxed": calib["relaxed"], "wall": wall, "draws": draws}
    base["passes"] = devinterp_passes(chains, draws)
    trace, nbeta, init = out["loss_trace"], out["nbeta"], out["init_loss"]
    d = sum(p.numel() for p in model.parameters())
    bad = ~torch.isfinite(trace) | (nbeta * (trace - init) > DIVERGENCE_FACTOR * d)
    if failed or bool(bad.any()):
        where = bad.nonzero()
        at = f" (chain {int(where[0, 0])}, step {int(where[0, 1])})" if where.numel() else ""
        return {**base, "status": f"diverged{at}" + (f": {failed[0]}" if failed else "")}
    # devinterp's llc_mean is nβ (mean of every draw − mean init loss); the same formula on the
    # default-budget prefix gives what its llc call returns at 3 × 2000 (chain c is seeded
    # init_seed + c, so the prefix is that call's trace). Checked on the whole run:
    formula_gap = abs(nbeta * (float(trace.mean()) - init) - out["llc_mean"])
    head = trace[:DEFAULT_CHAINS, :DEFAULT_DRAWS]
    settle = settle_steps(trace, init, nbeta, lam, int(SETTLE_BY * draws))
    short = short_rule(trace, init, nbeta, lam)
    per_chain = [
        float(running_llc(head[c : c + 1], init, nbeta)[-1]) for c in range(DEFAULT_CHAINS)
    ]
    return {
        **base,
        "status": "ok",
        "llc_devinterp": nbeta * (float(head.mean()) - init),
        "llc_mean_run": out["llc_mean"],
        "formula_gap": formula_gap,
        "llc_burnin": float(running_llc(head, init, nbeta)[-1]),
        "llc_long": float(running_llc(trace, init, nbeta)[-1]),
        "chains": per_chain,
        "settle": settle,
        "passes_settle": None if settle is None else devinterp_passes(chains, settle),
        "passes_budget": devinterp_passes(chains, int(SETTLE_BY * draws)),
        "short": short,
        "passes_short": None if short is None else devinterp_passes(DEFAULT_CHAINS, short),
    }


DVI_HEAD = (
    f"{'row':<13} {'λ_cf':>5} | {'ε':>6} {'γ':>4}  | {'λ_dvi':>6} {'err':>6} | "
    f"{'λ_20%bi':>7} {'err':>6} {'sd':>5} | {'λ@long':>6} {'D':>5} {'passes':>6} {'wall':>6} | "
    f"{'settle':>11} {'ratio':>6} {'+calib':>6} | {'λ_lib':>6} {'z':>5}"
)


def _sd(v: list[float]) -> float:
    m = sum(v) / len(v)
    return math.sqrt(sum((a - m) ** 2 for a in v) / (len(v) - 1))


def print_dvi_row(name: str, lam_cf: Fraction, rd: ReadOut, dv: dict, sg: dict, cal) -> dict:
    lam = float(lam_cf)
    left = f"{name:<13} {lam_cf!s:>5} | "
    if "lr" in dv:
        left += f"{dv['lr']:6.0e} {dv['gamma']:4.0f}{'*' if dv['relaxed'] else ' '} | "
    if dv["status"] != "ok":
        print(left + f"devinterp: {dv['status']}")
        return {"name": name, "verdict": "failed"}
    err_dvi = abs(dv["llc_devinterp"] - lam) / lam
    err_bi = abs(dv["llc_burnin"] - lam) / lam
    sd = _sd(dv["chains"])
    if dv["passes_settle"] is not None:
        p = dv["passes_settle"]
        settle_s, ratio, ratio_cal = f"{p:11d}", f"{p / rd.passes:6.0f}", p + cal.n_passes
        ratio_cal = f"{ratio_cal / rd.passes:6.0f}"
        verdict = "ok" if p / rd.passes >= 100 else "short"
        with_cal = (p + cal.n_passes) / rd.passes >= 100
    else:
        p = dv["passes_budget"]
        settle_s, ratio = f"{'not settled':>11}", f">{p / rd.passes:5.0f}"
        ratio_cal = f">{(p + cal.n_passes) / rd.passes:5.0f}"
        verdict = "ok" if p / rd.passes >= 100 else "inconclusive"
        with_cal = verdict == "ok"
    lib, z = f"{'-':>6}", f"{'-':>5}"
    if sg.get("status") == "ok":
        lib_sd = _sd(sg["llc_default_chains"])
        se = math.sqrt((sd**2 + lib_sd**2) / DEFAULT_CHAINS)
        lib = f"{sg['llc_default']:6.3f}"
        z = f"{(dv['llc_burnin'] - sg['llc_default']) / se:5.1f}" if se > 0 else f"{'-':>5}"
    print(
        left + f"{dv['llc_devinterp']:6.3f} {err_dvi:6.1%} | {dv['llc_burnin']:7.3f} "
        f"{err_bi:6.1%} {sd:5.2f} | {dv['llc_long']:6.3f} {dv['draws']:5d} {dv['passes']:6d} "
        f"{dv['wall']:5.1f}s | {settle_s} {ratio} {ratio_cal} | {lib} {z}"
    )
    return {
        "name": name,
        "verdict": verdict,
        "with_cal": with_cal,
        "err_dvi": err_dvi,
        "err_bi": err_bi,
        "formula_gap": dv["formula_gap"],
    }


def _rrr_dims(rec, M, N, r):
    return (M - r, N - r)


def _chain_dims(rec, M, N, r):
    return (1,) * len(rec.layers)


def benchmark_rows(seed: int, wanted):
    """Yield (name, λ closed form, model, x, y, read thunk) per row whose name is ``wanted``."""
    for M, H, N, r in [(3, 2, 3, 1), (4, 3, 5, 2), (5, 3, 4, 2), (6, 4, 6, 3)]:
        name = f"rrr {M}-{H}-{N} r{r}"
        if not wanted(name):
            continue
        model = rrr_model(M, H, N, r, seed=seed)
        x, y = data_for(model, M, N, N_TRAIN, seed)
        probe = torch.randn(
            N_PROBE, M, generator=torch.Generator().manual_seed(7), dtype=torch.float64
        )
        read_fn = partial(read_row, model, probe, Gaussian(sigma=1.0), _rrr_dims)
        yield name, rrr(M, H, N, r).lam, model, x, y, read_fn

    for depth in (2, 3, 4):
        name = f"dln L{depth} w4"
        if not wanted(name):
            continue
        net = planted_deep_linear(depth=depth, width=4, n=N_PROBE, seed=seed)
        x, y = data_for(net.model, 4, 4, N_TRAIN, seed)
        cf = deep_linear([4] * (depth + 1), 3)
        read_fn = partial(read_row, net.model, net.data, net.family, _chain_dims)
        yield name, cf.lam, net.model, x, y, read_fn

    for act in ("relu", "gelu", "relu2"):
        name = f"node {act}"
        if not wanted(name):
            continue
        cell = get_cell(f"node_death_{act}")
        g = torch.Generator().manual_seed(20_000 + seed)
        x = torch.randn(N_TRAIN, 1, generator=g, dtype=torch.float64)
        y = torch.randn(N_TRAIN, 1, generator=g, dtype=torch.float64)  # truth: the zero function
        read_fn = partial(read_row, cell.model, cell.data, cell.family)
        yield name, one_hidden_node(act).lam, cell.model, x, y, read_fn


def _without_global_rng(fn):
    """Run ``fn`` and restore torch's, numpy's and random's global RNG states (devinterp seeds
    them), so that the rows after a devinterp run see the state they would see without it."""
    import random

    import numpy as np

    states = (torch.random.get_rng_state(), np.random.get_state(), random.getstate())  # noqa: NPY002 (devinterp seeds the legacy global state)
    try:
        return fn()
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])  # noqa: NPY002
        random.setstate(states[2])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--min-draws", type=int, default=4000, help="least steps per chain of the long run"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--rows",
        default="",
        help="comma-separated substrings; run only rows whose name contains one (default: all)",
    )
    p.add_argument(
        "--skip-library-sgld",
        action="store_true",
        help="calibrate, but skip the library's long SGLD run (development)",
    )
    p.add_argument("--skip-devinterp", action="store_true", help="skip devinterp's table")
    args = p.parse_args()
    if args.min_draws < 2 * DEFAULT_DRAWS:
        p.error(f"--min-draws must be >= {2 * DEFAULT_DRAWS}")
    filters = [f.strip() for f in args.rows.split(",") if f.strip()]

    def wanted(name: str) -> bool:
        return not filters or any(f in name for f in filters)

    t_start = time.perf_counter()
    print(f"load average at start (1 min): {os.getloadavg()[0]:.1f} (wall times depend on it)")
    if args.skip_devinterp:
        dvi, dvi_note = None, "devinterp skipped (--skip-devinterp)"
    else:
        dvi, dvi_note = load_devinterp()
    gc.freeze()  # devinterp calls gc.collect() around every chain; keep this heap out of it
    nbeta = N_TRAIN / math.log(N_TRAIN)
    print(
        f"SGLD: n = {N_TRAIN}, full batch (1 pass = {N_TRAIN} samples), nβ = n/ln n = {nbeta:.1f}; "
        f"calibration pilots {PILOT['num_chains']} chains × {PILOT['num_draws']} draws; long run "
        f"{LONG_CHAINS} chains × D ≥ {args.min_draws} steps (deadline D/2 = "
        f"{DEADLINE_RATIO}× read passes); burn-in {BURNIN_FRACTION:.0%} of each prefix; "
        f"default budget {DEFAULT_CHAINS} × {DEFAULT_DRAWS}"
    )
    print(
        f"read: probe N = {N_PROBE}, node rows the cell's own probe set (1 pass = N samples); "
        f"tolerance ±{TOL:.0%}"
    )
    print(HEAD)
    print("-" * len(HEAD))
    results, cals, dvi_rows, reads = [], [], [], []
    for name, lam_cf, model, x, y, read_fn in benchmark_rows(args.seed, wanted):
        rd = read_fn()
        calib = calibrate_row(model, x, y, args)
        if args.skip_library_sgld:
            sg = {**calib, "status": "skipped (--skip-library-sgld)"}
            if calib["choice"] is not None:
                sg["lr"], sg["gamma"] = calib["choice"]
        else:
            sg = sgld_row(model, x, y, float(lam_cf), rd.passes, args, calib)
        cals.append((name, sg["cal"]))
        reads.append((name, lam_cf, rd, sg["cal"], sg))
        row = print_row(name, lam_cf, rd, sg)
        if args.skip_library_sgld:
            row["verdict"] = "skipped"
        results.append(row)
        if dvi is not None:
            dv = _without_global_rng(
                partial(
                    devinterp_row,
                    dvi,
                    model,
                    x,
                    y,
                    float(lam_cf),
                    calib,
                    long_draws(rd.passes, args.min_draws),
                    args,
                )
            )
            dvi_rows.append((name, lam_cf, rd, dv, sg, calib["cal"]))

    print("-" * len(HEAD))
    print(
        "columns: λ_rd+arch = the read's directions assembled with the architecture's regular "
        "dims r(M + N − r) (r: numerical rank) and component dims (rrr: (M − r, N − r), dln: 1 "
        "per layer; node rows: the read alone); λ_rd = the read alone (assemble_from_reading "
        "with no dims: on rrr/dln rows only the dead direction's contribution, not λ); "
        "err = |λ̂ − λ|/λ (read: of λ_rd+arch); passes (read) = fwd/JVP + bwd sweeps over the "
        "probe set; "
        "ε, γ = calibrated step and localization (* relaxed rule); calib = pilot passes (not in "
        "the ratio); λ@3x2000 = default budget; λ@long = all chains, full run of D steps; "
        "settle = passes after which "
        f"the estimate stays within ±{TOL:.0%} (must settle by {SETTLE_BY:.0%} of the run); "
        "1st hit = first entry into the band (oracle, reference only); ratio = settle / read "
        "passes ('>x': not settled, x = passes at the settling deadline / read passes); "
        "+calib = the same with the calibration pilots' passes added; wall× = ratio in seconds "
        "(SGLD long-run wall per step × settling steps, over the read's wall)"
    )
    for name, cal in cals:
        tried = ", ".join(
            f"{t.lr:.0e}/{t.gamma:g}:{'ok' if t.accepted else t.reason.split(' ')[0]}"
            for t in cal.trials
        )
        print(f"calibration {name:<13}: {tried}")
    est = {a: localized_estimand(a, nbeta, 1.0) for a in ("relu", "gelu", "relu2")}
    print(
        f"node rows, the SGLD estimand itself at γ = 1 (population K, quadrature, nβ = "
        f"{nbeta:.1f}): E[nβK] = "
        + ", ".join(f"{a} {v:.3f}" for a, v in est.items())
        + " (λ = 1/2, 1/2, 1/4)"
    )
    by = {
        v: [r["name"] for r in results if r["verdict"] == v]
        for v in ("ok", "short", "inconclusive", "sgld failed")
    }
    print(
        f"read + architecture dims (λ_rd+arch) within 1% of λ_cf: "
        f"{sum(r['err_read'] < 0.01 for r in results)}/{len(results)} rows; the read alone "
        f"(λ_rd) equals λ_cf on: {[r['name'] for r in results if r['read_alone_exact']] or 'none'}"
    )
    if args.skip_library_sgld:
        print("library SGLD long runs skipped (--skip-library-sgld)")
    else:
        n_def = sum(r.get("err_default", math.inf) <= TOL for r in results)
        print(f"SGLD within ±{TOL:.0%} at the default budget: {n_def}/{len(results)} rows")
        print(
            f"read >= 100x fewer passes than SGLD settling within ±{TOL:.0%}: "
            f"{len(by['ok'])}/{len(results)} rows (never-settled rows count when the settling "
            f"deadline is >= 100x the read's passes; their ratio is a lower bound)"
        )
        print(f"SGLD settled within 100x the read's passes: {by['short'] or 'none'}")
        n_cal = sum(r.get("with_cal", False) for r in results)
        print(
            f"the same, counting the calibration pilots as SGLD cost: {n_cal}/{len(results)} rows"
        )
        print(f"not settled and deadline < 100x (inconclusive): {by['inconclusive'] or 'none'}")
        print(f"SGLD failed (no stable step / diverged): {by['sgld failed'] or 'none'}")
    print_devinterp_table(dvi, dvi_note, dvi_rows)
    short_rows = []
    for name, _lam, rd, _cal, sg in reads:
        dv = next((r[3] for r in dvi_rows if r[0] == name), None)
        short_rows.append((name, rd, sg, dv))
    print_short_rule_table(short_rows)
    print(f"total wall time {time.perf_counter() - t_start:.0f}s")


def print_devinterp_table(dvi: Devinterp | None, note: str, rows: list) -> None:
    print()
    if dvi is None:
        print(
            f"devinterp table skipped: {note} (install with pip install devinterp=="
            f"{DEVINTERP_VERSION}, the bench extra)"
        )
        return
    print(
        f"devinterp {dvi.version} (devinterp.slt.llc.llc, sgmcmc_sgld), same model/data/loss, "
        f"(ε, γ) from the row's calibration, nβ = default_nbeta(n), the library's long-run "
        f"protocol: {LONG_CHAINS} chains × D steps (the row's D), settled by D/2"
        + (f"; note: {note}" if note else "")
    )
    if dvi.version != DEVINTERP_VERSION:
        print(f"warning: written against devinterp {DEVINTERP_VERSION}, found {dvi.version}")
    print(DVI_HEAD)
    print("-" * len(DVI_HEAD))
    out = [print_dvi_row(*r) for r in rows]
    print("-" * len(DVI_HEAD))
    print(
        f"columns: λ_dvi = devinterp's llc_mean formula (every draw, step 0 at w* included, no "
        f"burn-in) on chains 0–{DEFAULT_CHAINS - 1}, draws 0–{DEFAULT_DRAWS - 1} of the run = "
        f"its llc call at {DEFAULT_CHAINS} × {DEFAULT_DRAWS}; λ_20%bi = the library's running_llc "
        "(20 % burn-in) on the same prefix; sd = standard deviation of its per-chain λ_20%bi; "
        f"λ@long = running_llc over all {LONG_CHAINS} chains and D steps; passes = "
        f"{LONG_CHAINS}·D fwd+bwd + {LONG_CHAINS} fwd (L_n(w*) per chain); wall includes its "
        "DataLoader and zarr writes; settle = passes after which λ_20%bi of all chains stays "
        f"within ±{TOL:.0%} to step D (must settle by D/2), {LONG_CHAINS}·T + {LONG_CHAINS} for T "
        "draws; ratio = settle / read passes ('>x': not settled, x at the deadline); +calib adds "
        "the calibration pilots; λ_lib = the library's λ@3x2000; z = (λ_20%bi − λ_lib) / "
        "√(sd²/3 + sd_lib²/3)"
    )
    gap = max((r["formula_gap"] for r in out if "formula_gap" in r), default=0.0)
    print(f"check: llc_mean formula on the whole run vs devinterp's llc_mean, max |gap| {gap:.1e}")
    n = len(out)
    ok = [r for r in out if r["verdict"] != "failed"]
    print(
        f"devinterp within ±{TOL:.0%} at {DEFAULT_CHAINS} × {DEFAULT_DRAWS}: own estimate "
        f"(λ_dvi) {sum(r['err_dvi'] <= TOL for r in ok)}/{n} rows, with 20 % burn-in "
        f"{sum(r['err_bi'] <= TOL for r in ok)}/{n} rows"
    )
    print(
        f"read >= 100x fewer passes than devinterp settling within ±{TOL:.0%}: "
        f"{sum(r['verdict'] == 'ok' for r in out)}/{n} rows; counting the calibration pilots: "
        f"{sum(r.get('with_cal', False) for r in out)}/{n} rows"
    )
    print(
        f"devinterp settled within 100x the read's passes: "
        f"{[r['name'] for r in out if r['verdict'] == 'short'] or 'none'}"
    )
    print(
        f"not settled and deadline < 100x (inconclusive): "
        f"{[r['name'] for r in out if r['verdict'] == 'inconclusive'] or 'none'}"
    )
    print(
        f"devinterp failed (no stable step / diverged): "
        f"{[r['name'] for r in out if r['verdict'] == 'failed'] or 'none'}"
    )


def print_short_rule_table(rows: list) -> None:
    """Both samplers under the short rule (the first 3 chains, 2000 draws, settled by 1000)."""
    by = int(SETTLE_BY * DEFAULT_DRAWS)
    print()
    print(
        f"short rule, both samplers (chains 0–{DEFAULT_CHAINS - 1}, draws 0–{DEFAULT_DRAWS - 1} "
        f"of each long run, inside ±{TOL:.0%} from T to draw {DEFAULT_DRAWS}, T ≤ {by}; passes: "
        f"library {DEFAULT_CHAINS}(T + 1) + 1, devinterp {DEFAULT_CHAINS}T + {DEFAULT_CHAINS}):"
    )
    head = (
        f"{'row':<13} {'read':>5} | {'lib T':>6} {'passes':>6} {'ratio':>6} | "
        f"{'dvi T':>6} {'passes':>6} {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))

    def cell(d: dict | None, read_passes: int) -> str:
        if d is None or d.get("status") != "ok":
            return f"{'-':>6} {'-':>6} {'-':>6}"
        if d["short"] is None:
            return f"{'no':>6} {'-':>6} {'-':>6}"
        return f"{d['short']:6d} {d['passes_short']:6d} {d['passes_short'] / read_passes:6.0f}"

    for name, rd, sg, dv in rows:
        print(f"{name:<13} {rd.passes:5d} | {cell(sg, rd.passes)} | {cell(dv, rd.passes)}")
    print("-" * len(head))
    print(
        "(reference only: a stay of ≥ 1000 draws in the band, shorter than the long rule's "
        "≥ D/2 ≥ 2000; 'no' = not settled by draw 1000)"
    )


if __name__ == "__main__":
    main()
