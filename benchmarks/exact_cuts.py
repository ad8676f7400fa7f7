"""The categorical checks' cuts: normal, Bernstein's, exact (`neuromanifold.singular.chernoff`).

Printed in one run (float64, CPU, one thread), every cut in standard errors of its statistic:

1. **Confident classifiers.** A 2→8→3 tanh network whose last layer is scaled ×100 or ×1000, on N
   inputs, with the model's own labels except every ``k``-th, moved to the next class; the
   labelled-loss check (`loss_along`) along a pseudo-random direction on one tensor (a span of one
   part) and on all four (four parts), and the whole-gradient check (`critical_check`). For each
   statistic: its value, the normal cut, Bernstein's cut (`tail_threshold` from the check's
   variance and the bound of the output tangent, recomputed here), the applied cut, whether the
   exact cut was computed (only between the normal cut and Bernstein's) and the flag.
2. **A rare class.** The bias-only model of ``tests/singular/test_categorical_tail.py`` (two
   classes, the rare one at probability p, N = 30): the fewest rare labels the slope test flags
   with the exact cut and with Bernstein's alone, and the power of each (exactly, by the binomial
   law) when the rare class's frequency is 0.05 or 0.15 instead of p.
3. **Cost.** Sequence logits (N, T, C) = (32, 16, 5000): `loss_along` with labels drawn from
   the logits tilted along the direction's unit output tangent, ``f − t·J û`` (t = 0: the model's
   own; the larger t, the farther from a true parameter), wall time of each: the exact cut's pass
   is the difference between the calls inside its band and those outside.

``python benchmarks/exact_cuts.py [--only confident|rare|cost]`` (about two minutes for all three).
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from scipy.stats import binom
from torch import nn
from torch.func import functional_call, jvp

from neuromanifold.singular.chernoff import tail_threshold
from neuromanifold.singular.critical_check import NULL_RATE, critical_check
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.minimum_check import (
    FALSE_FLAG_RATE,
    MIN_Z,
    SLOPE_RATE,
    curvature_threshold,
    loss_along,
    span_parts,
)

D = torch.float64
FAMILY = Categorical()


def _confident(
    scale: float, n: int, wrong_every: int
) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        model[2].weight.mul_(scale)
        model[2].bias.mul_(scale)
    x = torch.randn(n, 2, dtype=D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x).argmax(-1)
    y[::wrong_every] = (y[::wrong_every] + 1) % 3
    return model, x, y


def _jets(model: nn.Module, x: torch.Tensor, w: dict[str, torch.Tensor]):
    """``(f, ḟ, f̈)`` of the output along ``θ0 + t·w`` at t = 0."""
    params = {k: v.detach() for k, v in model.named_parameters()}
    zero, one = torch.zeros((), dtype=D), torch.ones((), dtype=D)

    def out(t: torch.Tensor) -> torch.Tensor:
        moved = {k: (v + t * w[k] if k in w else v) for k, v in params.items()}
        return functional_call(model, moved, (x,))

    (f, fdot), (_, fddot) = jvp(lambda t: jvp(out, (t,), (one,)), (zero,), (one,))
    return f.detach(), fdot.detach(), fddot.detach()


def _unit_parts(u: dict[str, torch.Tensor]) -> tuple[list[dict[str, torch.Tensor]], list[float]]:
    norm = math.sqrt(sum(float((t * t).sum()) for t in u.values()))
    unit = {k: t / norm for k, t in u.items()}
    basis, coef = [], []
    for keys in span_parts(unit):
        part = math.sqrt(sum(float((unit[k] ** 2).sum()) for k in keys))
        basis.append({k: unit[k] / part for k in keys})
        coef.append(part)
    return basis, coef


def _combine(basis: list[dict[str, torch.Tensor]], coef: list[float]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for w, c in zip(basis, coef, strict=True):
        for k, t in w.items():
            out[k] = out.get(k, 0) + c * t
    return out


def _row(
    name: str,
    value: float,
    se: float,
    normal: float,
    bern: float,
    cut: float,
    exact: bool,
    flag: bool,
) -> None:
    def s(v: float) -> str:
        return f"{v / se:11.3g}" if se > 0 else f"{'—':>11}"

    said = "yes" if exact else "no"
    print(f"  {name:<28}{s(value)}{s(normal)}{s(bern)}{s(cut)}{said:>7}{flag!s:>7}")


def confident_section() -> None:
    print("1. Confident classifiers (2→8→3 tanh, last layer scaled; cuts in standard errors)")
    heads = "".join(f"{h:>11}" for h in ("value", "normal", "Bernstein", "applied"))
    print(f"  {'case / statistic':<28}{heads}{'exact':>7}{'flag':>7}")
    g = torch.Generator().manual_seed(2)
    for scale, n, every in ((100.0, 30, 1), (1000.0, 30, 1), (1000.0, 30, 3), (1000.0, 10, 1)):
        model, x, y = _confident(scale, n, every)
        with torch.no_grad():
            top = float(model(x).abs().max())
        print(f" ×{scale:g}, N = {n}, a wrong label on 1 in {every} (max |logit| {top:.0f})")
        params = dict(model.named_parameters())
        for keys in (["2.weight"], list(params)):
            u = {k: torch.randn(params[k].shape, dtype=D, generator=g) for k in keys}
            c = loss_along(model, params, u, (x, y), FAMILY)
            basis, coef = _unit_parts(u)
            _, fdot_u, _ = _jets(model, x, _combine(basis, coef))
            f, _, fddot_v = _jets(model, x, _combine(basis, c["lowest_direction"]))
            b_s = float(FAMILY.score_bound(f, fdot_u).max())
            b_c = float(FAMILY.score_bound(f, fddot_v).max())
            se_s, se_c = c["slope_se"] * n, c["lowest_curvature_se"] * n
            z_n = curvature_threshold(c["span_dim"])
            log_c = math.log(2 / FALSE_FLAG_RATE) + (z_n**2 - curvature_threshold(1) ** 2) / 2
            tag = f"{c['span_dim']} part{'s' if c['span_dim'] > 1 else ''}"
            _row(
                f"loss_along, {tag}: slope",
                abs(c["slope"]) * n,
                se_s,
                MIN_Z * se_s,
                tail_threshold(se_s**2, b_s, math.log(2 / SLOPE_RATE), MIN_Z),
                c["slope_cut"] * n,
                "slope" in c["exact_cuts"],
                c["not_critical"],
            )
            _row(
                f"loss_along, {tag}: −curvature",
                -c["lowest_curvature"] * n,
                se_c,
                z_n * se_c,
                tail_threshold(se_c**2, b_c, log_c, z_n),
                c["curvature_cut"] * n,
                "curvature" in c["exact_cuts"],
                c["curved_down"],
            )
        w = critical_check(model, params, (x, y), FAMILY)
        se = w["slope_se"] * w["n_test"]
        _row(
            "critical_check: S",
            w["slope"] * w["n_test"],
            se,
            MIN_Z * se,
            float("nan"),
            w["slope_cut"] * w["n_test"],
            w["exact_cut"],
            w["not_critical"],
        )
    print(
        "  (critical_check's Bernstein cut is not recomputed here: its direction comes from the"
        " even half)"
    )
    print(
        f"  rates: slope {SLOPE_RATE:.2g} (two-sided), curvature {FALSE_FLAG_RATE:.2g}, "
        f"whole gradient {NULL_RATE:.2g}\n"
    )


def rare_section() -> None:
    print("2. A rare class (bias-only, two classes, N = 30): the fewest rare labels flagged, power")
    n = 30
    for p_rare in (1e-3, 1e-4):
        model = nn.Linear(1, 2).double()
        with torch.no_grad():
            model.weight.zero_()
            model.bias.copy_(torch.tensor([0.0, math.log(p_rare / (1 - p_rare))]))
        x = torch.zeros(n, 1, dtype=D)
        u = {"bias": torch.tensor([1.0, -1.0], dtype=D)}
        jv = torch.tensor([[1.0, -1.0]] * n, dtype=D) / math.sqrt(2)
        bound = float(FAMILY.score_bound(model(x).detach(), jv).max())
        exact_k = bern_k = None
        for k in range(n + 1):
            y = torch.zeros(n, dtype=torch.long)
            y[:k] = 1
            c = loss_along(model, {}, u, (x, y), FAMILY)
            bern = tail_threshold((c["slope_se"] * n) ** 2, bound, math.log(2 / SLOPE_RATE), MIN_Z)
            if exact_k is None and c["not_critical"]:
                exact_k = k
            if bern_k is None and abs(c["slope"]) * n > bern:
                bern_k = k
        powers = "  ".join(
            f"at {q:g}: {binom.sf(exact_k - 1, n, q):.3f} against {binom.sf(bern_k - 1, n, q):.3f}"
            for q in (0.05, 0.15)
        )
        print(f"  p = {p_rare:g}: flagged from K = {exact_k} (Bernstein alone: {bern_k});")
        print(f"    power {powers}")
    print()


class _Tokens(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = nn.Linear(4, 16).double(), nn.Linear(16, classes).double()
        with torch.no_grad():
            self.l2.weight.mul_(5.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


def cost_section() -> None:
    n, t, classes = 32, 16, 5000
    print(f"3. Cost: sequence logits (N, T, C) = ({n}, {t}, {classes}), direction on l2.weight")
    model = _Tokens(classes)
    x = torch.randn(n, t, 4, dtype=D, generator=torch.Generator().manual_seed(3))
    params = dict(model.named_parameters())
    u = {
        "l2.weight": torch.randn(
            params["l2.weight"].shape, dtype=D, generator=torch.Generator().manual_seed(4)
        )
    }
    with torch.no_grad():
        f = model(x)
    primal = {"l2.weight": params["l2.weight"].detach()}
    _, jv = jvp(lambda w: functional_call(model, {**params, **w}, (x,)), (primal,), (u,))
    jv = jv.detach() / math.sqrt(float((u["l2.weight"] ** 2).sum()))
    for tilt in (0.0, 10.0, 20.0, 40.0):
        torch.manual_seed(6)
        y = torch.distributions.Categorical(logits=f - tilt * jv).sample()
        start = time.perf_counter()
        c = loss_along(model, params, u, (x, y), FAMILY)
        took = time.perf_counter() - start
        print(
            f"  labels from the model tilted by {tilt:4g}: slope "
            f"{c['slope'] / c['slope_se']:6.2f} se, cut {c['slope_cut'] / c['slope_se']:5.2f} se, "
            f"exact cuts {c['exact_cuts']}, {took:.1f} s"
        )


SECTIONS = ("confident", "rare", "cost")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--only",
        choices=SECTIONS,
        action="append",
        help="run only this section (repeatable; default: all three, about two minutes)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    runs = {"confident": confident_section, "rare": rare_section, "cost": cost_section}
    for name in args.only or SECTIONS:
        runs[name]()


if __name__ == "__main__":
    main()
