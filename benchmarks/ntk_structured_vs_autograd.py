"""Structured LCN NTK versus the dense ``torch.func.jacrev`` NTK: time, ratio and growth.

For each architecture of a grid (depth L, equal filter size k, equal stride s) the script times
``neuromanifold.linear.ntk`` (the structured NTK: dense ``J Jᵀ`` of the structured Jacobian, or for
large 1-D LCNs with many parameters the prefix recursion of ``linear._gram``; column ``path``),
``linear.ntk.ntk_dense`` (always the dense ``J Jᵀ``; column ``dense s``) and
``neuromanifold.linear.ntk_reference`` (``jacrev`` of a float64 torch polynomial product, then
``J Jᵀ``), checks that they agree, and prints the ratios jacrev/structured and jacrev/dense. All
paths run with the same number of BLAS/torch threads (``--threads``, default 1). Architectures
whose ``v`` has more than ``--max-nv`` coefficients are skipped (K alone needs ``8 n_v²`` bytes).

Column ``J Jᵀ s`` times the dense product ``J Jᵀ`` of the structured Jacobian alone: the jacrev
path and the dense path end with this ``Θ(n_v² Σ_l k_l)`` product; the recursion replaces it by
about ``n_v² (Q + k_L)`` multiply-adds (see ``linear._gram``).
Column ``J-only ratio`` compares the Jacobians alone (``jacobian`` vs ``jacobian_reference``).
Timings are the best of ``--repeats`` rounds; each round runs every timed function once, in turn,
so that load changes on a shared machine hit all of them alike (the minimum is the least disturbed).

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
    from neuromanifold.linear._gram import prefers_recursion
    from neuromanifold.linear.ntk import ntk_dense

    def best_times(fs: dict, repeats: int) -> tuple[dict, dict]:
        """Best-of-``repeats`` time of each function, the functions interleaved per round."""
        out = {name: f() for name, f in fs.items()}  # warm-up, also the results
        best = dict.fromkeys(fs, float("inf"))
        for _ in range(repeats):
            for name, f in fs.items():
                t0 = time.perf_counter()
                f()
                best[name] = min(best[name], time.perf_counter() - t0)
        return best, out

    rng = np.random.default_rng(0)
    warm = LCN((3, 3), (2,))
    ntk_reference(warm, [np.ones(3), np.ones(3)])  # jacrev's one-off set-up cost, not timed

    depths = [int(x) for x in args.depths.split(",")]
    ks = [int(x) for x in args.filters.split(",")]
    ss = [int(x) for x in args.strides.split(",")]
    rows = []
    print(f"threads = {args.threads}, torch {torch.__version__}, numpy {np.__version__}")
    header = f"{'L':>2} {'k':>3} {'s':>2} {'n_v':>6} {'path':>5} {'structured s':>13}"
    header += f" {'dense s':>9} {'jacrev s':>9} {'ratio':>6} {'dense ratio':>11}"
    print(header + f" {'max|ΔK|/max|K|':>15} {'J Jᵀ s':>8} {'J-only ratio':>12}")
    for s in ss:
        for L in depths:
            for k in ks:
                arch = LCN((k,) * L, (s,) * (L - 1))
                if arch.n_v > args.max_nv:
                    print(f"{L:>2} {k:>3} {s:>2} {arch.n_v:>6}  skipped (n_v > {args.max_nv})")
                    continue
                th = [rng.standard_normal(k) / np.sqrt(k) for _ in range(L)]
                J = jacobian(arch, th)
                fs = {
                    "ntk": lambda a=arch, t=th: ntk(a, t),
                    "dense": lambda a=arch, t=th: ntk_dense(a, t),
                    "ref": lambda a=arch, t=th: ntk_reference(a, t),
                    "J": lambda a=arch, t=th: jacobian(a, t),
                    "Jref": lambda a=arch, t=th: jacobian_reference(a, t),
                    "JJt": lambda J=J: J @ J.T,
                }
                t, out = best_times(fs, args.repeats)
                K, Kr = out["ntk"], out["ref"]
                err = float(np.max(np.abs(K - Kr)) / np.max(np.abs(Kr)))
                err = max(err, float(np.max(np.abs(out["dense"] - Kr)) / np.max(np.abs(Kr))))
                del out, K, Kr
                path = "rec" if prefers_recursion(arch) else "dense"
                rows.append((L, k, s, arch.n_v, t["ntk"], t["ref"], t["JJt"], t["Jref"] / t["J"]))
                rows[-1] += (t["dense"],)
                print(
                    f"{L:>2} {k:>3} {s:>2} {arch.n_v:>6} {path:>5} {t['ntk']:>13.5f} "
                    f"{t['dense']:>9.5f} {t['ref']:>9.5f} {t['ref'] / t['ntk']:>6.1f} "
                    f"{t['ref'] / t['dense']:>11.1f} {err:>15.1e} {t['JJt']:>8.5f} "
                    f"{t['Jref'] / t['J']:>12.1f}"
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
        L, k, s, n, t_s, t_r, t_g, j_ratio, t_d = head[0]
        print(
            f"headline L=8, k=16, s=2 (n_v = {n}): structured {t_s:.4f} s, jacrev {t_r:.4f} s, "
            f"ratio {t_r / t_s:.1f} (target >= 20); dense J Jᵀ path {t_d:.4f} s "
            f"(ratio {t_r / t_d:.1f}); the product J Jᵀ alone {t_g:.4f} s (jacrev pays it too); "
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
