"""Read + assembly versus localized-SGLD LLC estimation, on models with known λ (one run).

Rows (all float64, Gaussian noise σ = 1, the checkpoint w* is the true parameter):

* ``rrr M-H-N rR``: y = B A x with planted rank r and one dead hidden unit (H = r + 1), hidden
  basis randomly rotated. Read: the whole-model ``read`` (factor pass + detectors + sweeps); the
  assembly takes the read's dead direction(s), the numerical rank r of B A (regular directions
  r(M + N − r)) and the dead unit's component dimensions (M − r, N − r) from the architecture.
* ``dln L``: ``planted_deep_linear`` (square width 4, a dead path through all L layers, end-to-end
  rank 3). Same read and assembly; closed form: Aoyagi's deep-linear λ.
* ``node <act>``: the one-hidden-node cell y = a·σ(b x) at a = b = 0, whole-model ``read``;
  closed form (1/2, 2) or (1/4, 1).

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

Pass accounting (one pass = one sweep over one batch): SGLD's forward+backward of the batch
loss per chain step counts 1 (batch = all n = 1000 samples), + 1 forward for L_n(w*). The read
counts ``n_forward_passes + n_backward_passes`` of its Reading (probe batch N = 256 samples):
each forward-mode JVP sweep counts 1, each backward sweep (one per output Hessian column in the
factor pass) counts 1, and the forwards those backwards reuse count 1 more — an over-count of
the read by one pass per factor batch. An SGLD pass touches 1000 samples, a read pass 256: per
sample processed, the ratios below would be ×3.9 larger.

devinterp itself is not installed (extra ``bench``); its hyperparameter practice is followed.

Run: ``OMP_NUM_THREADS=1 python benchmarks/read_vs_sgld.py`` (4–7 minutes on a
shared 2-core machine; the run prints the load average it started under).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import nn

from neuromanifold.cells.planted import planted_deep_linear
from neuromanifold.cells.registry import get_cell
from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.closed_forms import deep_linear, one_hidden_node, rrr
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read
from neuromanifold.singular.sgld import (
    BURNIN_FRACTION,
    SGLDConfig,
    calibrate_step,
    first_hit,
    gaussian_nll_loss,
    running_llc,
    settling_point,
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
    lam: Fraction
    m: int
    ks: tuple[int, ...]
    passes: int
    wall: float


def read_row(model: nn.Module, probe, family, dims_fn=None) -> ReadOut:
    t0 = time.perf_counter()
    reading = read(model, probe, family, progress=False)
    if dims_fn is None:
        asm = assemble_from_reading(reading)
    else:
        r = numerical_rank(model)
        M, N = model[0].weight.shape[1], model[-1].weight.shape[0]
        genuine = [i for i, d in enumerate(reading.directions) if d.klass == "genuine_singularity"]
        comp = {i: dims_fn(reading.directions[i], M, N, r) for i in genuine}
        asm = assemble_from_reading(reading, regular_dims=r * (M + N - r), component_dims=comp)
    wall = time.perf_counter() - t0
    passes = reading.meta["n_forward_passes"] + reading.meta["n_backward_passes"]
    ks = tuple(d.k for d in reading.directions if d.klass == "genuine_singularity")
    return ReadOut(asm.lam, asm.m, ks, passes, wall)


def relaxed_choice(cal) -> tuple[float, float] | None:
    """Fallback when no pilot passed: largest stable ε at the smallest γ (MALA ≥ 0.9, LLC > 0)."""
    for t in cal.trials:  # ordered γ ascending, ε descending
        if not t.diverged and t.llc is not None and t.llc > 0 and t.mala_acceptance >= 0.9:
            return t.lr, t.gamma
    return None


def sgld_row(model: nn.Module, x, y, lam: float, read_passes: int, args) -> dict:
    """Calibrate (no λ), run long, measure settling / first hit / default-budget estimate."""
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    loss = gaussian_nll_loss(model)
    t0 = time.perf_counter()
    cal = calibrate_step(loss, params, x, y, pilot=SGLDConfig(**PILOT, seed=args.seed + 100))
    out: dict = {"cal": cal, "wall_cal": time.perf_counter() - t0}
    choice, relaxed = (cal.lr, cal.gamma), False
    if cal.lr is None:
        choice, relaxed = relaxed_choice(cal), True
        if choice is None:
            return {**out, "status": "no stable step", "relaxed": True}
    draws = max(args.min_draws, 2 * math.ceil(DEADLINE_RATIO * read_passes / LONG_CHAINS))
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
    settle = settling_point(est, lam, rtol=TOL)
    if settle is not None and settle > SETTLE_BY * draws:
        settle = None
    hit = first_hit(est, lam, rtol=TOL)
    default = running_llc(trace[:DEFAULT_CHAINS, :DEFAULT_DRAWS], res.loss_init, res.nbeta)[-1]
    return {
        **out,
        "status": "ok",
        "llc_long": float(est[-1]),
        "llc_default": float(default),
        "passes_default": DEFAULT_CHAINS * (DEFAULT_DRAWS + 1) + 1,
        "settle": settle,
        "passes_settle": None if settle is None else LONG_CHAINS * (settle + 1) + 1,
        "passes_hit": None if hit is None else LONG_CHAINS * (hit + 1) + 1,
        "passes_budget": LONG_CHAINS * (int(SETTLE_BY * draws) + 1) + 1,
        "accept": sum(res.mala_acceptance) / len(res.mala_acceptance),
        "rhat": res.rhat,
    }


HEAD = (
    f"{'row':<13} {'λ_cf':>5} {'λ_read':>6} {'err':>6} {'k':<7} {'passes':>6} {'wall':>5} | "
    f"{'ε':>6} {'γ':>4}  {'calib':>6} | {'λ@3x2000':>8} {'err':>6} {'passes':>6} | "
    f"{'λ@long':>6} {'D':>5} {'settle':>11} {'1st hit':>7} {'wall':>6} | "
    f"{'ratio':>6} {'+calib':>6} {'wall×':>6}"
)


def print_row(name: str, lam_cf: Fraction, rd: ReadOut, sg: dict) -> dict:
    lam = float(lam_cf)
    err_read = abs(float(rd.lam) - lam) / lam
    cal = sg["cal"]
    left = (
        f"{name:<13} {lam_cf!s:>5} {rd.lam!s:>6} {err_read:6.1%} {list(rd.ks)!s:<7} "
        f"{rd.passes:6d} {rd.wall:5.2f} | "
    )
    if sg["status"] != "ok":
        eps = f"{sg['lr']:6.0e} {sg['gamma']:4.0f}" if "lr" in sg else f"{'-':>6} {'-':>4}"
        print(left + f"{eps}  {cal.n_passes:6d} | SGLD: {sg['status']}")
        return {"name": name, "err_read": err_read, "verdict": "sgld failed"}
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
        "err_default": err_def,
        "verdict": verdict,
        "with_cal": with_cal,
        "accept": sg["accept"],
        "rhat": sg["rhat"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--min-draws", type=int, default=4000, help="least steps per chain of the long run"
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.min_draws < 2 * DEFAULT_DRAWS:
        p.error(f"--min-draws must be >= {2 * DEFAULT_DRAWS}")
    t_start = time.perf_counter()
    print(f"load average at start (1 min): {os.getloadavg()[0]:.1f} (wall times depend on it)")
    nbeta = N_TRAIN / math.log(N_TRAIN)
    print(
        f"SGLD: n = {N_TRAIN}, full batch (1 pass = {N_TRAIN} samples), nβ = n/ln n = {nbeta:.1f}; "
        f"calibration pilots {PILOT['num_chains']} chains × {PILOT['num_draws']} draws; long run "
        f"{LONG_CHAINS} chains × D ≥ {args.min_draws} steps (deadline D/2 = "
        f"{DEADLINE_RATIO}× read passes); burn-in {BURNIN_FRACTION:.0%} of each prefix; "
        f"default budget {DEFAULT_CHAINS} × {DEFAULT_DRAWS}"
    )
    print(f"read: probe N = {N_PROBE} (1 pass = {N_PROBE} samples); tolerance ±{TOL:.0%}")
    print(HEAD)
    print("-" * len(HEAD))
    results, cals = [], []

    def rrr_dims(rec, M, N, r):
        return (M - r, N - r)

    def chain_dims(rec, M, N, r):
        return (1,) * len(rec.layers)

    for M, H, N, r in [(3, 2, 3, 1), (4, 3, 5, 2), (5, 3, 4, 2), (6, 4, 6, 3)]:
        model = rrr_model(M, H, N, r, seed=args.seed)
        x, y = data_for(model, M, N, N_TRAIN, args.seed)
        probe = torch.randn(
            N_PROBE, M, generator=torch.Generator().manual_seed(7), dtype=torch.float64
        )
        cf = rrr(M, H, N, r)
        rd = read_row(model, probe, Gaussian(sigma=1.0), rrr_dims)
        sg = sgld_row(model, x, y, cf.lam_float, rd.passes, args)
        cals.append((f"rrr {M}-{H}-{N} r{r}", sg["cal"]))
        results.append(print_row(f"rrr {M}-{H}-{N} r{r}", cf.lam, rd, sg))

    for depth in (2, 3, 4):
        net = planted_deep_linear(depth=depth, width=4, n=N_PROBE, seed=args.seed)
        x, y = data_for(net.model, 4, 4, N_TRAIN, args.seed)
        cf = deep_linear([4] * (depth + 1), 3)
        rd = read_row(net.model, net.data, net.family, chain_dims)
        sg = sgld_row(net.model, x, y, cf.lam_float, rd.passes, args)
        cals.append((f"dln L{depth} w4", sg["cal"]))
        results.append(print_row(f"dln L{depth} w4", cf.lam, rd, sg))

    for act in ("relu", "gelu", "relu2"):
        cell = get_cell(f"node_death_{act}")
        cf = one_hidden_node(act)
        rd = read_row(cell.model, cell.data, cell.family)
        g = torch.Generator().manual_seed(20_000 + args.seed)
        x = torch.randn(N_TRAIN, 1, generator=g, dtype=torch.float64)
        y = torch.randn(N_TRAIN, 1, generator=g, dtype=torch.float64)  # truth: the zero function
        sg = sgld_row(cell.model, x, y, cf.lam_float, rd.passes, args)
        cals.append((f"node {act}", sg["cal"]))
        results.append(print_row(f"node {act}", cf.lam, rd, sg))

    print("-" * len(HEAD))
    print(
        "columns: err = |λ̂ − λ|/λ; passes (read) = fwd/JVP + bwd sweeps over the probe set; "
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
    print(f"read error < 1%: {sum(r['err_read'] < 0.01 for r in results)}/{len(results)} rows")
    n_def = sum(r.get("err_default", math.inf) <= TOL for r in results)
    print(f"SGLD within ±{TOL:.0%} at the default budget: {n_def}/{len(results)} rows")
    print(
        f"read >= 100x fewer passes than SGLD settling within ±{TOL:.0%}: "
        f"{len(by['ok'])}/{len(results)} rows (never-settled rows count when the settling "
        f"deadline is >= 100x the read's passes; their ratio is a lower bound)"
    )
    print(f"SGLD settled within 100x the read's passes: {by['short'] or 'none'}")
    n_cal = sum(r.get("with_cal", False) for r in results)
    print(f"the same, counting the calibration pilots as SGLD cost: {n_cal}/{len(results)} rows")
    print(f"not settled and deadline < 100x (inconclusive): {by['inconclusive'] or 'none'}")
    print(f"SGLD failed (no stable step / diverged): {by['sgld failed'] or 'none'}")
    print(f"total wall time {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
