"""When has an SGLD estimate of the LLC converged — judged without the true λ.

`running_llc` is the estimate after every prefix of the chains (burn-in a fixed fraction of the
prefix); `settling_point` the first draw from which it stays within ``±rtol`` of a target up to
the end (`first_hit` the first draw inside the band); both with one-prefix-at-a-time oracles.
`calibrate_step` picks the step size ε and localization γ of `neuromanifold.singular.sgld` by
short pilots, accepted on diagnostics alone (MALA acceptance, Gelman–Rubin R̂ across chains, and
the drift between the halves of the trace), never on the λ it is meant to estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from neuromanifold.singular.sgld import LossFn, SGLDConfig, SGLDResult, sgld_llc

__all__ = [
    "BURNIN_FRACTION",
    "StepCalibration",
    "StepTrial",
    "calibrate_step",
    "first_hit",
    "running_llc",
    "running_llc_reference",
    "settling_point",
    "settling_point_reference",
]

#: Burn-in of a running estimate: the prefix of T draws keeps draws ⌊BURNIN_FRACTION·T⌋ … T − 1.
BURNIN_FRACTION = 0.2
#: Calibration defaults: the step-size and localization grids tried, and the acceptance rules.
CALIBRATION_LRS = (3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)
CALIBRATION_GAMMAS = (1.0, 10.0, 100.0)
#: A pilot is accepted when its mean MALA acceptance is at least this …
MIN_MALA_ACCEPTANCE = 0.9
#: … its chains agree (Gelman–Rubin R̂ of the post-burn-in loss traces below this) …
MAX_RHAT = 1.1
#: … and the trace has levelled off: the LLC of the second half of the post-burn-in draws differs
#: from that of the first half by at most this fraction of the pilot's LLC (which must be > 0).
MAX_DRIFT = 0.2


def _as_trace(loss_trace: Any) -> Tensor:
    t = torch.as_tensor(loss_trace, dtype=torch.float64)
    if t.dim() != 2 or t.shape[1] < 1:
        raise ValueError(
            f"loss_trace must be (chains, draws) with draws >= 1, got {tuple(t.shape)}"
        )
    return t


def _check_fraction(burnin_fraction: float) -> None:
    if not (isinstance(burnin_fraction, (int, float)) and 0 <= burnin_fraction < 1):
        raise ValueError(f"burnin_fraction must be a float in [0, 1), got {burnin_fraction!r}")


def running_llc(
    loss_trace: Any, loss_init: float, nbeta: float, *, burnin_fraction: float = BURNIN_FRACTION
) -> Tensor:
    """LLC estimate after every prefix of the chains: shape (T,), entry T' − 1 for T' steps.

    ``est[T' − 1] = nβ (mean_{c, s ∈ [⌊f T'⌋, T')} L_c(s) − L_n(w*))`` with f =
    ``burnin_fraction``: the mean over all chains of the draws left after discarding the first
    fraction f of the prefix. ``loss_trace``: (chains, T) minibatch losses (``SGLDResult``).
    Cumulative sums, O(chains·T).

    >>> running_llc([[1.0, 2.0, 3.0]], 0.0, 2.0, burnin_fraction=0.5).tolist()
    [2.0, 4.0, 5.0]
    """
    _check_fraction(burnin_fraction)
    tr = _as_trace(loss_trace)
    c, total = tr.shape
    cs = torch.cat([torch.zeros(1, dtype=torch.float64), tr.sum(0).cumsum(0)])
    t = torch.arange(1, total + 1)
    a = torch.floor(burnin_fraction * t.to(torch.float64)).to(torch.long)
    mean = (cs[t] - cs[a]) / (c * (t - a)).to(torch.float64)
    return nbeta * (mean - loss_init)


def running_llc_reference(
    loss_trace: Any, loss_init: float, nbeta: float, *, burnin_fraction: float = BURNIN_FRACTION
) -> Tensor:
    """Oracle of :func:`running_llc`: each prefix's mean taken directly, one prefix at a time."""
    _check_fraction(burnin_fraction)
    tr = _as_trace(loss_trace)
    out = []
    for t in range(1, tr.shape[1] + 1):
        a = math.floor(burnin_fraction * t)
        out.append(nbeta * (float(tr[:, a:t].mean()) - loss_init))
    return torch.tensor(out, dtype=torch.float64)


def _band(estimates: Any, target: float, rtol: float) -> Tensor:
    if not (isinstance(rtol, (int, float)) and rtol > 0):
        raise ValueError(f"rtol must be a float > 0, got {rtol!r}")
    if not (isinstance(target, (int, float)) and math.isfinite(target) and target != 0):
        raise ValueError(f"target must be a finite non-zero float, got {target!r}")
    e = torch.as_tensor(estimates, dtype=torch.float64)
    if e.dim() != 1 or e.numel() == 0:
        raise ValueError(f"estimates must be a non-empty 1-D sequence, got shape {tuple(e.shape)}")
    return (e - target).abs() <= rtol * abs(target)


def settling_point(estimates: Any, target: float, *, rtol: float) -> int | None:
    """Smallest T (1-based prefix length) with ``|est[s] − target| ≤ rtol·|target|`` for every
    s ≥ T − 1 up to the end: the estimate enters the band and stays. None if the last is out.

    >>> settling_point([0.0, 1.0, 0.0, 1.0, 1.0], 1.0, rtol=0.1)
    4
    """
    ok = _band(estimates, target, rtol)
    if not bool(ok[-1]):
        return None
    bad = (~ok).nonzero()
    return 1 if bad.numel() == 0 else int(bad[-1, 0]) + 2


def settling_point_reference(estimates: Any, target: float, *, rtol: float) -> int | None:
    """Oracle of :func:`settling_point`: try every T in order and check the whole tail."""
    ok = _band(estimates, target, rtol).tolist()
    for t in range(1, len(ok) + 1):
        if all(ok[t - 1 :]):
            return t
    return None


def first_hit(estimates: Any, target: float, *, rtol: float) -> int | None:
    """Smallest T whose estimate is inside the band (an oracle stopping rule: it needs the true
    target and rewards a noise crossing; reported only to compare with :func:`settling_point`).

    >>> first_hit([0.0, 1.0, 0.0], 1.0, rtol=0.1)
    2
    """
    hit = _band(estimates, target, rtol).nonzero()
    return None if hit.numel() == 0 else int(hit[0, 0]) + 1


@dataclass(frozen=True)
class StepTrial:
    """One pilot run of :func:`calibrate_step` and the verdict of the acceptance rules."""

    lr: float
    gamma: float
    diverged: bool
    mala_acceptance: float | None
    rhat: float | None
    drift: float | None
    llc: float | None
    accepted: bool
    reason: str
    n_passes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StepCalibration:
    """Chosen ``lr``/``gamma`` (None when no pilot passed), every pilot, the pilots' passes."""

    lr: float | None
    gamma: float | None
    trials: tuple[StepTrial, ...]
    n_passes: int
    rule: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "lr": self.lr,
            "gamma": self.gamma,
            "trials": [t.to_dict() for t in self.trials],
            "n_passes": self.n_passes,
            "rule": self.rule,
        }


def _judge(res: SGLDResult, min_acc: float, max_rhat: float, max_drift: float):
    acc = sum(res.mala_acceptance) / len(res.mala_acceptance) if res.mala_acceptance else None
    if res.diverged or res.llc is None:
        return acc, None, False, "diverged"
    if not res.llc > 0:
        return acc, None, False, "llc <= 0"
    drift = res.drift  # over the post-burn-in draws (res.config.burnin)
    if drift is None:
        return acc, None, False, "too few draws for a drift"
    if acc is None or acc < min_acc:
        return acc, drift, False, f"MALA acceptance {acc:.3f} < {min_acc}"
    if res.rhat is not None and res.rhat > max_rhat:
        return acc, drift, False, f"R-hat {res.rhat:.3f} > {max_rhat}"
    if drift > max_drift:
        return acc, drift, False, f"drift {drift:.3f} > {max_drift}"
    return acc, drift, True, "ok"


def calibrate_step(
    loss_fn: LossFn,
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    *,
    lrs: tuple[float, ...] = CALIBRATION_LRS,
    gammas: tuple[float, ...] = CALIBRATION_GAMMAS,
    pilot: SGLDConfig | None = None,
    min_acceptance: float = MIN_MALA_ACCEPTANCE,
    max_rhat: float = MAX_RHAT,
    max_drift: float = MAX_DRIFT,
) -> StepCalibration:
    """Pick (ε, γ) from the grids by trace diagnostics alone (no knowledge of the true λ).

    Rule: for γ in ``gammas`` ascending (weakest localization first), try ε in ``lrs``
    descending and keep the first pilot run that (1) does not diverge, (2) has LLC > 0,
    (3) has mean MALA acceptance ≥ ``min_acceptance``, (4) R̂ ≤ ``max_rhat`` and (5) a trace
    that has levelled off: nβ|mean(2nd half) − mean(1st half)| ≤ ``max_drift``·LLC over the
    post-burn-in draws. The first γ with any accepted ε wins. ``pilot`` gives chains, draws,
    burn-in, batch size, nβ and seed (default: 2 chains × 400 draws, burn-in 100); its ``lr``
    and ``gamma`` are replaced by the grid values. The pilots' passes are returned (a cost of
    the calibration a user pays too).
    """
    if not lrs or not gammas or any(not v > 0 for v in (*lrs, *gammas)):
        raise ValueError(
            f"lrs and gammas must be non-empty tuples of floats > 0, got {lrs}, {gammas}"
        )
    base = pilot or SGLDConfig(num_chains=2, num_draws=400, burnin=100)
    trials: list[StepTrial] = []
    rule = (
        f"gamma ascending, lr descending; accept: no divergence, LLC > 0, MALA acceptance >= "
        f"{min_acceptance}, R-hat <= {max_rhat}, half-to-half drift <= {max_drift}"
    )
    for gamma in sorted(gammas):
        for lr in sorted(lrs, reverse=True):
            cfg = SGLDConfig(**{**base.to_dict(), "lr": float(lr), "gamma": float(gamma)})
            res = sgld_llc(loss_fn, params, x, y, config=cfg)
            acc, drift, ok, why = _judge(res, min_acceptance, max_rhat, max_drift)
            trials.append(
                StepTrial(
                    lr=float(lr),
                    gamma=float(gamma),
                    diverged=res.diverged,
                    mala_acceptance=acc,
                    rhat=res.rhat,
                    drift=drift,
                    llc=res.llc,
                    accepted=ok,
                    reason=why,
                    n_passes=res.n_passes,
                )
            )
            if ok:
                n = sum(t.n_passes for t in trials)
                return StepCalibration(float(lr), float(gamma), tuple(trials), n, rule)
    return StepCalibration(None, None, tuple(trials), sum(t.n_passes for t in trials), rule)
