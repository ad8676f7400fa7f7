"""Sweeps ``F_u(t) = uᵀF(θ_b + t u)u`` along a straight line, the t-grid policy and the floor.

The line starts at the base point ``θ_b = θ0 + s·u`` (``s = base_shift``, 0 by default; the snapped
read uses ``s = −uᵀθ0``) and the directional Fisher is evaluated at each ``t`` of a positive,
strictly increasing grid, in float64, by forward mode (`directional_fisher`).

**Grid policy** (`default_grid`, spec §7.2 step 4): ``n = 32`` log-spaced values from
``lo·ρ_W = 1e−4·ρ_W`` to ``hi·ρ_W = 1·ρ_W``, where ``ρ_W`` is the root-mean-square of all entries of
the parameter tensors that ``u`` touches (non-zero entries somewhere in the tensor). If those
tensors are identically zero (a block of dead weights at exactly 0), ``ρ_W = 1``.

**Floor** (spec §7.2 step 5): the level below which the float64 JVP cannot tell a value from a
rounding residue. A flat direction's tangent ``J u`` is a sum of terms of the block's typical size
that cancel, so its rounding residue is ``≈ (few·√d·ε)`` times that size, and ``F`` (a square)
sits near ``(c·ε)²`` times the block's typical Fisher. The library takes

    F_floor = (FLOOR_EPS_MULTIPLE · ε_64)² · F_scale,
    F_scale = max(F_r(θ_b), max_t F_u(t)),

with ``FLOOR_EPS_MULTIPLE = 1e3`` (``F_floor ≈ 4.9e−26·F_scale``), ``ε_64 = 2.2e−16`` and ``F_r``
the directional Fisher at the base point along a fixed pseudo-random unit direction supported on the
tensors ``u`` touches (seeded, so reads are deterministic). ``F_r`` is the typical magnitude of the
block; the second term keeps the floor meaningful when the whole block is degenerate at the base
(e.g. a deep-linear chain at 0, where every direction has ``F_r = 0``). The rate fit then drops
points with ``F < FLOOR_MARGIN·F_floor`` (``FLOOR_MARGIN = 10``).

A tensor whose every direction is flat (an attention's key bias, which the softmax ignores) has
no scale of its own: ``F_r`` and every ``F_u(t)`` are rounding residues (~1e-34), so its floor
collapsed with them and an exactly flat direction read ``unresolved`` (s27 trial HF D4). Where
``F_scale ≤ DEGENERATE_SCALE`` (an absolute screen: only such sweeps pay one more pass) and the
modules ``u`` touches hold tensors it does not touch (the key projection's weight beside its
bias), the directional Fisher ``F_m`` along a seeded random unit direction over all their
tensors is measured too, and when ``F_scale ≤ FLOOR_MARGIN·(FLOOR_EPS_MULTIPLE·ε_64)²·F_m`` (the
tensors' own scale is rounding at their module's) the module's scale replaces it,
``F_scale = F_m``. The module, not the whole model: a branch that is live but scaled by 1e-13
against the rest computes its tangent exactly, and the model's scale would call it flat (s27b
audit RERUN #2).

A categorical Fisher centres the tangent, ``q = Σ_c p_c (J u − Σ_c' p_c' (J u)_c')_c²``, and the
centring leaves a residue of about ``(ε·|J u|)²``: a direction that moves every logit alike (an
exact flat gauge) has ``F`` at that residue, which grows like ``|J u|² ∝ t²`` along the line. Where
every tensor ``u``'s modules hold is degenerate at the base (``F_r = F_m = 0``, a dead unit
feeding every class alike; s34 trial CELLS D1), ``F_scale`` was that residue and its ``t²`` growth
read as order 2. So where the family is categorical and the block is degenerate at the base,
``F_r ≤ FLOOR_MARGIN·(FLOOR_EPS_MULTIPLE·ε_64)²·F_scale`` after the module check (relative: with
large logit tangents the residue passes any absolute screen), the uncentred second moment
``F_g = E Σ_c p_c (J u)_c²`` at the grid's largest ``t`` is measured too (one more pass), and when
``F_scale ≤ FLOOR_MARGIN·(FLOOR_EPS_MULTIPLE·ε_64)²·F_g`` it replaces it, ``F_scale = F_g``: the
centred values are then read against the size of what was centred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor, nn

from neuromanifold.singular._validate import (
    DTYPE,
    Direction,
    Prepared,
    check_direction,
    check_grid,
    prepare,
)
from neuromanifold.singular.family import OutputFamily, check_family
from neuromanifold.singular.fisher import fisher_along_line, fisher_prepared

__all__ = [
    "DEGENERATE_SCALE",
    "FLOOR_EPS_MULTIPLE",
    "FLOOR_MARGIN",
    "GRID_HI",
    "GRID_LO",
    "GRID_N",
    "T_BATCH",
    "Sweep",
    "default_grid",
    "floor_from_scale",
    "sweep",
]

GRID_N = 32
T_BATCH = 8
GRID_LO = 1e-4
GRID_HI = 1.0
FLOOR_EPS_MULTIPLE = 1e3
FLOOR_MARGIN = 10.0
FLOOR_SEED = 20260703
DEGENERATE_SCALE = 1e-20
"""Sweeps whose ``F_scale`` is at most this also measure their modules' scale ``F_m`` (module
docstring); the decision itself is relative."""
EPS64 = float(torch.finfo(torch.float64).eps)


def touched_keys(u: Mapping[str, Tensor]) -> list[str]:
    """Names of the tensors on which ``u`` has a non-zero entry (sorted)."""
    return sorted(k for k, v in u.items() if bool((v != 0).any()))


def weight_scale(params: Mapping[str, Tensor], u: Mapping[str, Tensor]) -> float:
    """``ρ_W``: RMS of all entries of the tensors ``u`` touches; 1.0 if they are all zero."""
    keys = touched_keys(u)
    sq = sum(float((params[k].to(DTYPE) ** 2).sum()) for k in keys)
    count = sum(params[k].numel() for k in keys)
    rho = math.sqrt(sq / count) if count else 0.0
    return rho if rho > 0 else 1.0


def default_grid(
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor],
    *,
    n: int = GRID_N,
    lo: float = GRID_LO,
    hi: float = GRID_HI,
) -> Tensor:
    """Log-spaced t-grid ``ρ_W · logspace(lo, hi, n)`` (float64, shape ``(n,)``).

    ``ρ_W`` = RMS of the weights of the tensor(s) ``u`` touches, 1 when they are all zero.

    >>> import torch
    >>> g = default_grid({"w": torch.full((4,), 2.0)}, {"w": torch.ones(4)}, n=3, lo=1e-2, hi=1.0)
    >>> [round(v, 12) for v in g.tolist()]
    [0.02, 0.2, 2.0]
    """
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"grid size n must be an int ≥ 2; got {n!r}")
    if not (0 < lo < hi < math.inf):
        raise ValueError(f"grid bounds must satisfy 0 < lo < hi < inf; got lo={lo!r}, hi={hi!r}")
    for k in u:
        if k not in params:
            raise ValueError(f"direction u has key {k!r} that is not in params")
    rho = weight_scale(params, u)
    return rho * torch.logspace(math.log10(lo), math.log10(hi), n, dtype=DTYPE)


def floor_from_scale(scale: float) -> float:
    """``F_floor = (FLOOR_EPS_MULTIPLE·ε_64)²·scale`` (see module docstring)."""
    return (FLOOR_EPS_MULTIPLE * EPS64) ** 2 * float(scale)


def _random_direction(params: Mapping[str, Tensor], keys: Sequence[str]) -> Direction:
    gen = torch.Generator().manual_seed(FLOOR_SEED)
    r = {
        k: torch.randn(params[k].shape, generator=gen, dtype=DTYPE).to(params[k].device)
        for k in keys
    }
    norm = math.sqrt(sum(float((v * v).sum()) for v in r.values()))
    return {k: v / norm for k, v in r.items()}


@dataclass(frozen=True)
class Sweep:
    """Directional Fisher along ``θ_b + t·u``.

    Attributes:
        ts: the t-grid (floats, strictly increasing, t > 0).
        F: ``F_u(t)`` at each t (float64 values; mean over samples).
        floor: ``F_floor`` (see module docstring).
        scale: ``F_scale`` the floor was derived from.
        random_fisher: ``F_r`` at the base point (pseudo-random direction in the same tensors).
        module_fisher: ``F_m`` (pseudo-random direction over every tensor of the modules ``u``
            touches), measured only where ``F_scale ≤ DEGENERATE_SCALE`` and those modules hold
            a tensor ``u`` does not touch; ``None`` elsewhere.
        uncentred_fisher: ``F_g = E Σ_c p_c (J u)_c²`` at the grid's largest t, measured only
            for a categorical family on a block degenerate at the base (``F_r`` at rounding
            level against ``F_scale``; module docstring); ``None`` elsewhere.
        base_shift: ``s`` with ``θ_b = θ0 + s·u``.
        n_forward_passes: JVP passes over the probe set (grid points + 1 for the floor, + 1 for
            ``F_m`` and + 1 for ``F_g`` where measured).
        n_samples: N.
        family: output family description.
        empirical: empirical (observed-label) Fisher instead of the true Fisher.
        upcast: the model or data arrived in a dtype other than float64 and was up-cast.
        t_batched: the grid points were evaluated in ``vmap`` groups (False: one t at a time,
            requested, chosen by the lane policy because the probe set alone fills a pass, see
            `neuromanifold.singular.passes.line_lanes`, or because the model could not be
            vmapped over its parameters).
    """

    ts: tuple[float, ...]
    F: tuple[float, ...]
    floor: float
    scale: float
    random_fisher: float
    base_shift: float
    n_forward_passes: int
    n_samples: int
    family: dict
    empirical: bool = False
    upcast: bool = False
    t_batched: bool = False
    module_fisher: float | None = None
    uncentred_fisher: float | None = None

    @property
    def t_array(self) -> np.ndarray:
        """``ts`` as a float64 numpy array."""
        return np.asarray(self.ts, dtype=np.float64)

    @property
    def F_array(self) -> np.ndarray:
        """``F`` as a float64 numpy array."""
        return np.asarray(self.F, dtype=np.float64)

    def to_dict(self) -> dict:
        """JSON-safe dict (lists of floats)."""
        d = asdict(self)
        d["ts"] = list(self.ts)
        d["F"] = list(self.F)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Sweep:
        """Inverse of `to_dict`."""
        d = dict(d)
        d["ts"] = tuple(float(v) for v in d["ts"])
        d["F"] = tuple(float(v) for v in d["F"])
        return cls(**d)


class _Uncentred:
    """A categorical family's quadratic without the centring: ``q_i = Σ_positions Σ_c p_c
    jv_c²``, shape ``(N,)`` (the size of what `Categorical.quadratic` centres; module
    docstring)."""

    name = "categorical-uncentred"

    def __init__(self, family: OutputFamily) -> None:
        self._family = family

    def check_output(self, out: Tensor) -> None:
        self._family.check_output(out)

    def quadratic(self, out: Tensor, jv: Tensor) -> Tensor:
        p = torch.softmax(out, dim=-1)
        per_position = (p * jv * jv).sum(-1)
        return per_position.reshape(per_position.shape[0], -1).sum(1)


def sweep_prepared(
    model: nn.Module,
    prep: Prepared,
    u: Direction,
    family: OutputFamily,
    grid: Tensor,
    *,
    base_shift: float = 0.0,
    empirical: bool = False,
    chunk_size: int | None = None,
    t_batch: int = T_BATCH,
) -> Sweep:
    """Core of `sweep` on validated float64 inputs and a unit direction ``u``."""
    base = dict(prep.params)
    if base_shift != 0.0:
        for k, v in u.items():
            base[k] = base[k] + base_shift * v
    vals, batched = fisher_along_line(
        model,
        prep,
        base,
        u,
        grid,
        family,
        empirical=empirical,
        chunk_size=chunk_size,
        t_batch=t_batch,
    )
    values = [float(v) for v in vals]
    keys = touched_keys(u)

    def random_fisher(over: Sequence[str]) -> float:
        """F at the base point along the seeded random unit direction over tensors ``over``."""
        r = _random_direction(prep.params, over)
        return float(
            fisher_prepared(
                model, prep, base, [r], family, empirical=empirical, chunk_size=chunk_size
            )[0]
        )

    f_rand = random_fisher(keys)
    scale = max(f_rand, max(values))
    f_model, extra = None, 0
    modules = {k.rpartition(".")[0] for k in keys}
    siblings = sorted(k for k in prep.params if k.rpartition(".")[0] in modules)
    if scale <= DEGENERATE_SCALE and siblings != sorted(keys):  # no scale of its own?
        f_model, extra = random_fisher(siblings), 1
        if scale <= FLOOR_MARGIN * floor_from_scale(f_model):
            scale = f_model
    f_gross = None
    # the block is degenerate at the base when its random direction is at rounding level
    # against the scale in force (relative: a residue of large logit tangents passes any
    # absolute screen, s34 review #1)
    degenerate = f_rand <= FLOOR_MARGIN * floor_from_scale(scale)
    if degenerate and family.name == "categorical":  # F a centring residue?
        gross, _ = fisher_along_line(
            model,
            prep,
            base,
            u,
            grid[-1:],
            _Uncentred(family),
            chunk_size=chunk_size,
        )
        f_gross, extra = float(gross[0]), extra + 1
        if scale <= FLOOR_MARGIN * floor_from_scale(f_gross):
            scale = f_gross
    return Sweep(
        ts=tuple(grid.tolist()),
        F=tuple(values),
        floor=floor_from_scale(scale),
        scale=scale,
        random_fisher=f_rand,
        base_shift=float(base_shift),
        n_forward_passes=len(values) + 1 + extra,
        n_samples=prep.n,
        family=family.to_dict(),
        empirical=bool(empirical),
        upcast=prep.upcast,
        t_batched=batched,
        module_fisher=f_model,
        uncentred_fisher=f_gross,
    )


def sweep(
    model: nn.Module,
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor],
    data: Tensor | tuple[Tensor, Tensor],
    family: OutputFamily,
    *,
    grid: Sequence[float] | Tensor | None = None,
    base_shift: float | None = None,
    empirical: bool = False,
    chunk_size: int | None = None,
    t_batch: int = T_BATCH,
) -> Sweep:
    """Directional Fisher ``F_u(t) = uᵀF(θ0 + (s + t)·u)u`` on a t-grid (float64).

    ``u`` is normalised to unit norm; ``s = base_shift`` (default 0) moves the base point along
    ``u`` (``s = −uᵀθ0`` snaps it, see `neuromanifold.singular.direction`). ``grid`` defaults to
    `default_grid` (32 log-spaced points over ``[1e−4, 1]·ρ_W``). One JVP pass over the N samples
    per grid point, plus one for the floor estimate; up to ``t_batch`` grid points share one
    ``vmap`` (memory: ``t_batch ×`` the activations of a chunk of ``chunk_size`` samples; 1 = no
    batching). Lanes only save per-call overhead, so fewer are used when the samples alone fill a
    pass (`neuromanifold.singular.passes.line_lanes`); the values do not depend on the grouping
    beyond the order of float64 sums.

    Returns:
        `Sweep` with ``ts``, ``F``, ``floor`` and the pass count.
    """
    family = check_family(family)
    prep = prepare(model, params, data)
    u_unit, _ = check_direction(prep.params, u)
    g = default_grid(prep.params, u_unit) if grid is None else check_grid(grid)
    shift = 0.0 if base_shift is None else float(base_shift)
    if not math.isfinite(shift):
        raise ValueError(f"base_shift must be a finite float; got {base_shift!r}")
    return sweep_prepared(
        model,
        prep,
        u_unit,
        family,
        g,
        base_shift=shift,
        empirical=empirical,
        chunk_size=chunk_size,
        t_batch=t_batch,
    )
