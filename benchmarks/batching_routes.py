"""Sixteen directional Fishers at one point: forward-mode lanes against two reverse-mode routes.

The read batches L directions at one θ as ``vmap`` lanes of one forward-mode JVP
(`neuromanifold.singular.directional_fisher` with a list of directions). Its gain over L calls of
one direction is bounded because each lane's tangent costs about two primal passes (see
`neuromanifold.singular.fisher`). Reverse mode computes the same numbers from the C rows of
``S_i J_i`` per sample (``S_i`` a square root of the output Fisher ``H_out``; for softmax logits the
rows ``√p_c (e_c − p)``), whose cost does not grow with L:

    F_u = (1/N) Σ_i ‖S_i J_i u‖²,   (S_i J_i u)_c = Σ_layers Σ_t g_ict · (U a_it + u_b)

with ``g_ict`` the gradient of row c of ``S_i z_i`` with respect to a Linear layer's output at
position t and ``a_it`` its input. This script times, on the zoo ViT of ``benchmarks/scaling.py``
(dim 32, depth 2, 4 heads, 10 classes, 17 tokens), in interleaved rounds:

* ``forward lanes`` — the library's batched call (16 lanes);
* ``one at a time`` — 16 calls of one direction (the baseline of the issue's batching target);
* ``reverse: per-sample J`` — ``vmap`` over samples of a ``vjp`` pulled back along the C rows of
  ``S_i`` (the per-sample Jacobian rows over every parameter), then one product with the stacked
  directions;
* ``reverse: layer hooks`` — directions restricted to the Linear layers' weights and biases (the
  bulk of the parameters): one forward with hooks that keep each Linear's input and output, one
  backward of the C rows of ``S_i z_i`` (``is_grads_batched``) to the Linear outputs, then per
  layer ``U a`` for all 16 directions as one GEMM and its contraction with ``g``. The forward lanes
  are timed on the same restricted directions for this row (``forward lanes, Linear only``).

Both reverse routes are checked against the library's value (max relative difference printed).
Counted in primal passes P (L directions, C classes, layer input width d): forward lanes cost
about ``P + 2 L P``; the hook route about ``P`` (forward) ``+ C P`` (backward) ``+ L P`` (the
``U a`` products) ``+ (L C / d) P`` (the contraction): for L = 16, C = 10, d = 32 about 32P
against 33P, no gain by this count. Measured on 2026-12-02 (one thread, best of 5 interleaved
rounds, a machine shared with other work): the hook route took 0.056, 0.167 and 0.709 s at
N = 16, 64 and 256 against 0.079, 0.233 and 0.848 s for the forward lanes on the same
Linear-only directions (1.4×, 1.4×, 1.2×), and 4.5×, 2.9× and 2.0× against one direction at a
time: its work is a few large matrix products, where the lanes spend much of theirs in
memory-bound elementwise tangent formulas. The per-sample-Jacobian route was slower than the
forward lanes from N = 64 on (1.50× and 0.82× against one at a time at N = 64 and 256): its
per-sample weight gradients are many small products. The library does not use a reverse route:
the hook route covers only parameters of Linear layers (a direction on the class token, the
position embedding or a norm needs per-sample gradients), and this model's gain over the lanes
is 1.2–1.4×.

Run:  python benchmarks/batching_routes.py            (≈ 1–2 minutes, one thread)
      python benchmarks/batching_routes.py --n 64 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.func import functional_call, vjp, vmap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaling import Case, random_direction, vit_case

from neuromanifold.singular.fisher import directional_fisher


def unit(d: dict[str, Tensor]) -> dict[str, Tensor]:
    """``d / ‖d‖`` over all its entries (the library normalises directions the same way)."""
    norm = torch.sqrt(sum((v * v).sum() for v in d.values()))
    return {k: v / norm for k, v in d.items()}


def softmax_root(z: Tensor) -> Tensor:
    """Rows of ``S_i`` with ``S_iᵀ S_i = diag(p_i) − p_i p_iᵀ``: ``√p_c (e_c − p)``; (N, C, C)."""
    p = torch.softmax(z, dim=-1)
    eye = torch.eye(p.shape[-1], dtype=p.dtype)
    return p.sqrt()[:, :, None] * (eye[None] - p[:, None, :])


def reverse_per_sample(model: nn.Module, params: dict, dirs: list[dict], x: Tensor) -> Tensor:
    """``F_u`` for every direction from the per-sample rows of ``S_i J_i`` over all parameters."""
    keys = sorted(params)
    u = torch.stack([torch.cat([d[k].reshape(-1) for k in keys]) for d in map(unit, dirs)])

    def rows(xi: Tensor) -> Tensor:
        def f(p: dict) -> Tensor:
            return functional_call(model, p, (xi[None],))[0]

        z, pull = vjp(f, {k: params[k] for k in keys})
        s = softmax_root(z[None].detach())[0]
        g = vmap(pull)(s)[0]
        return torch.cat([g[k].reshape(s.shape[0], -1) for k in keys], dim=1)

    z_rows = vmap(rows)(x)  # (N, C, P)
    zu = z_rows.reshape(-1, z_rows.shape[-1]) @ u.T
    return (zu * zu).sum(0) / x.shape[0]


def linear_only(model: nn.Module, d: dict[str, Tensor]) -> dict[str, Tensor]:
    """``d`` restricted to the weights and biases of the model's ``nn.Linear`` layers."""
    keep = set()
    for name, m in model.named_modules():
        if type(m) is nn.Linear:
            keep |= {f"{name}.weight", f"{name}.bias"}
    return {k: v for k, v in d.items() if k in keep}


def reverse_hooks(model: nn.Module, params: dict, dirs: list[dict], x: Tensor) -> Tensor:
    """``F_u`` for directions on Linear layers only, from layer inputs and output gradients."""
    dirs = [unit(d) for d in dirs]
    lins = {n: m for n, m in model.named_modules() if type(m) is nn.Linear}
    seen: dict[str, tuple[Tensor, Tensor]] = {}

    def keep(name: str):
        def hook(mod: nn.Module, inputs: tuple, output: Tensor) -> None:
            seen[name] = (inputs[0], output)

        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in lins.items()]
    try:
        with torch.enable_grad():
            leaf = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            z = functional_call(model, leaf, (x,))
    finally:
        for h in handles:
            h.remove()
    s = softmax_root(z.detach())  # (N, C, C)
    n, c = s.shape[:2]
    names = list(lins)
    grads = torch.autograd.grad(
        z, [seen[k][1] for k in names], grad_outputs=s.permute(1, 0, 2), is_grads_batched=True
    )
    lanes = len(dirs)
    zu = torch.zeros(n, c, lanes, dtype=z.dtype)
    for name, g in zip(names, grads, strict=True):
        a = seen[name][0].detach()
        d_out, d_in = lins[name].weight.shape
        w = torch.stack([d[f"{name}.weight"] for d in dirs])  # (L, out, in)
        inj = a.reshape(-1, d_in) @ w.permute(2, 0, 1).reshape(d_in, lanes * d_out)
        if lins[name].bias is not None:
            inj = inj + torch.stack([d[f"{name}.bias"] for d in dirs]).reshape(1, -1)
        t = inj.shape[0] // n
        inj = inj.reshape(n, t, lanes, d_out).permute(0, 1, 3, 2).reshape(n, t * d_out, lanes)
        gl = g.reshape(c, n, t * d_out).permute(1, 0, 2)  # (N, C, T·out)
        zu += torch.bmm(gl, inj)
    return (zu * zu).sum((0, 1)) / n


def timed_routes(case: Case) -> tuple[dict, dict[str, float]]:
    """The five routes of the module docstring as callables, and each reverse route's max
    relative difference from the library's value on the same directions."""
    model, x, fam = case.model, case.data, case.family
    params = {k: v.detach() for k, v in model.named_parameters()}
    dirs = [random_direction(model, seed=s) for s in range(16)]
    lin = [linear_only(model, d) for d in dirs]
    routes = {
        "forward lanes": lambda: directional_fisher(model, params, dirs, x, fam),
        "one at a time": lambda: [directional_fisher(model, params, d, x, fam) for d in dirs],
        "reverse: per-sample J": lambda: reverse_per_sample(model, params, dirs, x),
        "forward lanes, Linear only": lambda: directional_fisher(model, params, lin, x, fam),
        "reverse: layer hooks": lambda: reverse_hooks(model, params, lin, x),
    }
    ref, ref_lin = routes["forward lanes"](), routes["forward lanes, Linear only"]()
    err = {
        "reverse: per-sample J": routes["reverse: per-sample J"]() / ref - 1,
        "reverse: layer hooks": routes["reverse: layer hooks"]() / ref_lin - 1,
    }
    return routes, {k: float(v.abs().max()) for k, v in err.items()}


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[16, 64, 256], help="probe samples")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {args.threads}; best of {args.rounds} rounds, s")
    for n in args.n:
        case = vit_case(32, n)
        routes, err = timed_routes(case)
        times: dict[str, list[float]] = {k: [] for k in routes}
        for r in range(args.rounds):
            order = list(routes)[r % len(routes) :] + list(routes)[: r % len(routes)]
            for k in order:
                times[k].append(seconds(routes[k]))
        base = min(times["one at a time"])
        n_params = sum(p.numel() for p in case.model.parameters())
        print(f"\nN {n} ({n_params} parameters, 16 directions)")
        for k, ts in times.items():
            note = f"   max rel. diff {err[k]:.1e}" if k in err else ""
            print(
                f"  {k:<28}{min(ts):8.3f}  (median {statistics.median(ts):.3f})"
                f"  one-at-a-time / this {base / min(ts):5.2f}×{note}"
            )


if __name__ == "__main__":
    main()
