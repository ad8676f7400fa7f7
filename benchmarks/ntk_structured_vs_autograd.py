"""Structured LCN NTK versus the dense ``torch.func.jacrev`` NTK: time, ratio and growth.

For each architecture of a grid (depth L, equal filter size k, equal stride s) the script times
``neuromanifold.linear.ntk`` (prefix/suffix polynomial products, Jacobian blocks by strided
placement, one ``J Jᵀ``) and ``neuromanifold.linear.ntk_reference`` (``jacrev`` of a float64 torch
polynomial product, then ``J Jᵀ``), checks that both agree, and prints the ratio. Both paths run
with the same number of BLAS/torch threads (``--threads``, default 1). Architectures whose ``v`` has
more than ``--max-nv`` coefficients are skipped (the dense K alone would need ``8 n_v²`` bytes).

Column ``J Jᵀ s`` times the dense product ``J Jᵀ`` of the structured Jacobian alone: both paths
end with this ``Θ(n_v² Σ_l k_l)`` product, so for large ``v`` it bounds the attainable ratio.
Column ``J-only ratio`` compares the Jacobians alone (``jacobian`` vs ``jacobian_reference``).
Timings are the best of ``--repeats`` runs (the minimum is the least disturbed by other load).

Run: ``python benchmarks/ntk_structured_vs_autograd.py`` (about a minute on one core).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (both paths)")
    p.add_argument("--max-nv", type=int, default=4000, help="skip architectures with larger v")
    p.add_argument("--depths", default="2,4,6,8")
    p.add_argument("--filters", default="2,4,8,16")
    p.add_argument("--strides", default="1,2,3")
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs (fast cases)")
    return p.parse_args()


def main() -> int:
    args = _parse()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # before numpy/torch are imported
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from neuromanifold.linear import LCN, jacobian, jacobian_reference, ntk, ntk_reference

    def best_time(f, repeats: int) -> tuple[float, np.ndarray]:
        out = f()
        t = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = f()
            t = min(t, time.perf_counter() - t0)
        return t, out

    rng = np.random.default_rng(0)
    warm = LCN((3, 3), (2,))
    ntk_reference(warm, [np.ones(3), np.ones(3)])  # jacrev's one-off set-up cost, not timed

    depths = [int(x) for x in args.depths.split(",")]
    ks = [int(x) for x in args.filters.split(",")]
    ss = [int(x) for x in args.strides.split(",")]
    rows = []
    print(f"threads = {args.threads}, torch {torch.__version__}, numpy {np.__version__}")
    header = f"{'L':>2} {'k':>3} {'s':>2} {'n_v':>6} {'structured s':>13} {'jacrev s':>10}"
    print(header + f" {'ratio':>7} {'max|ΔK|/max|K|':>15} {'J Jᵀ s':>9} {'J-only ratio':>12}")
    for s in ss:
        for L in depths:
            for k in ks:
                arch = LCN((k,) * L, (s,) * (L - 1))
                if arch.n_v > args.max_nv:
                    print(f"{L:>2} {k:>3} {s:>2} {arch.n_v:>6}  skipped (n_v > {args.max_nv})")
                    continue
                theta = [rng.standard_normal(k) / np.sqrt(k) for _ in range(L)]
                reps = args.repeats
                t_s, K = best_time(lambda a=arch, th=theta: ntk(a, th), reps)
                t_r, Kr = best_time(lambda a=arch, th=theta: ntk_reference(a, th), reps)
                t_js, J = best_time(lambda a=arch, th=theta: jacobian(a, th), reps)
                t_jr, _ = best_time(lambda a=arch, th=theta: jacobian_reference(a, th), reps)
                t_g, _ = best_time(lambda J=J: J @ J.T, reps)
                err = float(np.max(np.abs(K - Kr)) / np.max(np.abs(Kr)))
                rows.append((L, k, s, arch.n_v, t_s, t_r, t_g, t_jr / t_js))
                print(
                    f"{L:>2} {k:>3} {s:>2} {arch.n_v:>6} {t_s:>13.5f} {t_r:>10.5f} "
                    f"{t_r / t_s:>7.1f} {err:>15.1e} {t_g:>9.5f} {t_jr / t_js:>12.1f}"
                )
                sys.stdout.flush()

    arr = np.array(rows, dtype=float)
    ratios = arr[:, 5] / arr[:, 4]
    print()
    print(
        f"ratio jacrev/structured: min {ratios.min():.1f}, median {np.median(ratios):.1f}, "
        f"max {ratios.max():.1f}; structured never slower: {bool(ratios.min() >= 1)}"
    )
    head = [r for r in rows if r[:3] == (8, 16, 2)]
    if head:
        L, k, s, n, t_s, t_r, t_g, j_ratio = head[0]
        print(
            f"headline L=8, k=16, s=2 (n_v = {n}): structured {t_s:.4f} s, jacrev {t_r:.4f} s, "
            f"ratio {t_r / t_s:.1f} (target >= 20); J Jᵀ alone {t_g:.4f} s: both paths pay this "
            f"product, so the ratio is at most about (t_jacrev)/(t_JJᵀ) = {t_r / t_g:.1f}; "
            f"the Jacobians alone: structured is {j_ratio:.0f}x faster than jacrev"
        )
    big = arr[arr[:, 3] >= 100]
    if len(big) >= 3:
        x = np.log(big[:, 3])
        for col, name in ((4, "structured"), (5, "jacrev")):
            slope = np.polyfit(x, np.log(big[:, col]), 1)[0]
            print(f"growth: {name} time ~ n_v^{slope:.2f} (fit over n_v >= 100)")
    for s in ss:
        chain = [r for r in rows if r[1] == max(ks) and r[2] == s]
        if len(chain) >= 2:
            steps = ", ".join(f"L={r[0]}: {r[4]:.4f}/{r[5]:.4f} s" for r in chain)
            print(f"growth with depth (k={max(ks)}, s={s}), structured/jacrev: {steps}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
