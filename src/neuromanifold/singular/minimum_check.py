"""Is θ0 a minimum of the labelled probe loss along a read direction?

The read measures the order of the directional Fisher along ``θ0 + t·u``: a property of the
parametrization at θ0. Watanabe's ``(λ, m)`` are those of ``K(θ) = KL(q ‖ p_θ)`` at a **true
parameter**, where ``K`` is minimal (``W₀``, spec ``dead_directions.md`` §0); at a saddle or on a
slope of the loss the same orders assemble into numbers that are nobody's learning coefficient
(s20 trial AO #2: ``a·tanh(b·x)`` at its saddle ``a = b = 0`` on data ``y ≈ 0.8·tanh(1.2x)``
read λ = 1/2, m = 2 with no warning, where SGLD gave −22).

The read has no ``q``; with labels it can test a necessary condition on the empirical loss
``L_N(θ) = (1/N) Σ_i ℓ_i(θ)``, ``ℓ_i = −log p(y_i | x_i, θ)`` (the family's `log_likelihood`):
along the line, per sample,

    g_i = dℓ_i(θ0 + t·u)/dt |_{t=0},     c_i = d²ℓ_i(θ0 + t·u)/dt² |_{t=0},

from one forward-over-forward JVP per sample chunk (``torch.func.jvp`` nested in itself), and
their means ``ḡ``, ``c̄`` with standard errors ``se = s/√N`` (``s`` the sample standard deviation,
``N − 1`` in its denominator; None for ``N < 2``; the sums are all-reduced under a process group,
as the Fisher's are).
At a true parameter the population gradient vanishes, and the curvature is a Gauss–Newton term
whose sample mean is the read's own ``F_u(θ0) ≥ 0`` (it does not depend on the labels) plus a
residual term, the output's score ``∂_out ℓ_i`` against the output's second derivative along
``u``, whose mean over labels drawn from ``p_θ0`` is zero. So θ0 is reported

* **not critical** along ``u`` when ``|ḡ| > MIN_Z·se(g)``, and
* **curved downward** along ``u`` when ``c̄ < −MIN_Z·se(c)``,

each only beyond the rounding margin ``ROUNDING·mean|·|`` (a line where every ``g_i`` is 0 up to
rounding is critical). With ``MIN_Z = 4`` a one-sided z-test flags a true parameter along one
direction with probability about 3·10⁻⁵ (normal approximation of the mean; the two-sided slope
test about 6·10⁻⁵). The test is necessary, not sufficient: a point that passes along every read
direction can still be a saddle along others, and a degenerate saddle (gradient and curvature 0,
a cubic loss) passes. With ``N < 2`` no standard error exists and nothing is flagged.

`loss_along_reference` is the brute-force oracle: per sample, the two derivatives by reverse
mode (``torch.autograd.grad`` twice in t), one sample at a time.

`loss_along` is the check; `read` runs it on every genuine and live record when ``data`` carries
labels (``info["loss_along_u"]``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.func import functional_call, jvp

from neuromanifold.singular._validate import DTYPE, check_direction, prepare
from neuromanifold.singular.family import check_family
from neuromanifold.singular.passes import chunks, differentiable_kernels

__all__ = ["MIN_Z", "ROUNDING", "loss_along", "loss_along_reason", "loss_along_reference"]

MIN_Z = 4.0
"""Standard errors by which the mean slope or curvature must pass zero to be flagged."""
ROUNDING = 1e-9
"""A mean at most this times the mean absolute per-sample value is rounding, never flagged."""


def _line_derivatives(
    model: nn.Module,
    params: Mapping[str, Tensor],
    buffers: Mapping[str, Tensor],
    u: Mapping[str, Tensor],
    x: Tensor,
    y: Tensor,
    family: Any,
) -> tuple[Tensor, Tensor]:
    """``(g, c)``, each of shape ``(n,)``: the first and second derivatives in t of
    ``−log p(y_i | x_i, θ + t·u)`` at t = 0, by a JVP of a JVP in the scalar t."""
    rest = {k: v for k, v in params.items() if k not in u}

    def losses(t: Tensor) -> Tensor:
        moved = {k: params[k] + t * u[k] for k in u}
        out = functional_call(model, ({**rest, **moved}, buffers), (x,))
        return -family.log_likelihood(out, y)

    zero = torch.zeros((), dtype=DTYPE, device=x.device)
    one = torch.ones((), dtype=DTYPE, device=x.device)

    def slope(t: Tensor) -> Tensor:
        return jvp(losses, (t,), (one,))[1]

    g, c = jvp(slope, (zero,), (one,))
    return g, c


def _mean_and_se(total: float, squares: float, absolute: float, n: int) -> dict[str, Any]:
    """Mean, standard error of the mean and mean absolute value from the sums of ``v``, ``v²``
    and ``|v|`` over ``n`` samples (se is None for n < 2: JSON has no nan)."""
    mean = total / n
    if n < 2:
        return {"mean": mean, "se": None, "scale": absolute / n}
    var = max(squares - n * mean * mean, 0.0) / (n - 1)
    return {"mean": mean, "se": math.sqrt(var / n), "scale": absolute / n}


def _beyond(stat: dict[str, Any], sign: float) -> bool:
    """Whether ``sign·mean`` exceeds ``MIN_Z·se`` and the rounding margin (``sign`` −1: below
    minus them; 0: ``|mean|``); never without a standard error."""
    if stat["se"] is None:
        return False
    value = abs(stat["mean"]) if sign == 0 else sign * stat["mean"]
    return value > MIN_Z * stat["se"] and value > ROUNDING * stat["scale"]


def _prepared(model: nn.Module, params: Mapping[str, Tensor], u: Mapping[str, Tensor], data: Any):
    """`prepare` of labelled data and the unit direction; ``ValueError`` without labels."""
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise ValueError(
            "loss_along needs labelled data (x, y): the loss along u is -log p(y | x, θ0 + t·u)"
        )
    prep = prepare(model, params, tuple(data))  # a y that is not a tensor: TypeError there
    unit, _ = check_direction(prep.params, u)
    return prep, unit


def _summary(sums: list[float]) -> dict[str, Any]:
    """The result of `loss_along` from ``[Σg, Σg², Σ|g|, Σc, Σc², Σ|c|, N]``."""
    n = round(sums[6])
    slope = _mean_and_se(sums[0], sums[1], sums[2], n)
    curve = _mean_and_se(sums[3], sums[4], sums[5], n)
    return {
        "slope": slope["mean"],
        "slope_se": slope["se"],
        "curvature": curve["mean"],
        "curvature_se": curve["se"],
        "n": n,
        "not_critical": _beyond(slope, 0.0),
        "curved_down": _beyond(curve, -1.0),
    }


def loss_along(
    model: nn.Module,
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor],
    data: tuple[Tensor, Tensor],
    family: Any,
    *,
    chunk_size: int | None = None,
) -> dict[str, Any]:
    """Slope and curvature of the labelled probe loss along ``θ0 + t·u`` at t = 0 (module
    docstring), ``u`` normalised to unit norm.

    Args:
        model: the network (``functional_call`` with ``params``; buffers are the model's).
        params: θ0, keyed like ``model.named_parameters()`` (missing names: the model's own).
        u: the direction, ``dict[str, Tensor]`` over some of the parameters.
        data: ``(x, y)`` with labels, as the family's ``log_likelihood`` takes them.
        family: `Gaussian` or `Categorical`.
        chunk_size: at most this many samples per pass (``None``: all).

    Returns:
        ``{"slope", "slope_se", "curvature", "curvature_se", "n", "not_critical",
        "curved_down"}``: the means of ``g_i`` and ``c_i`` with their standard errors (None for
        N < 2), the global sample count, and the two flags (plain floats, ints, bools and None:
        JSON-ready).

    Raises:
        ValueError: ``data`` has no labels (the loss needs them), or as `prepare` does.
    """
    family = check_family(family)
    prep, unit = _prepared(model, params, u, data)
    sums = torch.zeros(7, dtype=DTYPE, device=prep.x.device)
    with differentiable_kernels():
        for sl in chunks(int(prep.x.shape[0]), chunk_size):
            g, c = _line_derivatives(
                model, prep.params, prep.buffers, unit, prep.x[sl], prep.y[sl], family
            )
            g, c = g.detach().to(DTYPE), c.detach().to(DTYPE)
            n = torch.tensor(float(g.shape[0]), dtype=DTYPE, device=sums.device)
            parts = [g.sum(), (g * g).sum(), g.abs().sum(), c.sum(), (c * c).sum(), c.abs().sum()]
            sums += torch.stack([*parts, n])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(sums)
    return _summary(sums.tolist())


def loss_along_reason(check: Mapping[str, Any]) -> str:
    """The clause a flagged record's reason gets (empty when neither flag is set)."""
    found = []
    if check.get("not_critical"):
        found.append(f"slope {check['slope']:.3g} ± {check['slope_se']:.2g}")
    if check.get("curved_down"):
        found.append(f"curvature {check['curvature']:.3g} ± {check['curvature_se']:.2g}")
    if not found:
        return ""
    return (
        f"; θ0 is not a minimum of the labelled probe loss along u ({', '.join(found)}, "
        f"N = {check['n']}): the order describes the parametrization at θ0, and (λ, m) are "
        f"Watanabe's only at a true parameter (docs/triple.md)"
    )


def loss_along_reference(
    model: nn.Module,
    params: Mapping[str, Tensor],
    u: Mapping[str, Tensor],
    data: tuple[Tensor, Tensor],
    family: Any,
) -> dict[str, Any]:
    """`loss_along` by brute force: for each sample alone, ``ℓ_i(θ0 + t·u)`` at a scalar leaf
    ``t = 0`` differentiated twice by ``torch.autograd.grad``; the same statistics and flags.
    ``N`` reverse-over-reverse passes: for tests and benchmarks."""
    family = check_family(family)
    prep, unit = _prepared(model, params, u, data)
    gs, cs = [], []
    for i in range(int(prep.x.shape[0])):
        t = torch.zeros((), dtype=DTYPE, device=prep.x.device, requires_grad=True)
        moved = {k: (v + t * unit[k] if k in unit else v) for k, v in prep.params.items()}
        out = functional_call(model, (moved, prep.buffers), (prep.x[i : i + 1],))
        loss = -family.log_likelihood(out, prep.y[i : i + 1])[0]
        (g,) = torch.autograd.grad(loss, t, create_graph=True)
        (c,) = torch.autograd.grad(g, t, allow_unused=True)
        gs.append(float(g.detach()))
        cs.append(0.0 if c is None else float(c))
    g_t, c_t = torch.tensor(gs, dtype=DTYPE), torch.tensor(cs, dtype=DTYPE)
    parts = [g_t.sum(), (g_t * g_t).sum(), g_t.abs().sum(), c_t.sum(), (c_t * c_t).sum()]
    return _summary([float(v) for v in parts] + [float(c_t.abs().sum()), float(len(gs))])
