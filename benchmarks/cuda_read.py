"""The whole read on a CUDA device against the CPU: time, agreement, peak GPU memory, batching.

Needs a CUDA device (run by ``benchmarks/cuda_check.sh`` on a lent GPU machine). Printed in one
run, float64 on both devices:

1. **Whole read.** Zoo MLPs (``64 → w → w → 10``) and zoo ViTs (8×8 images, patch 2, depth 2,
   4 heads) of increasing size on ``--n`` Gaussian probe images (default 256), Categorical
   family: `read` with ``max_directions=2``, ``snap=False``, ``per_layer=False`` (the factor
   pass, the detection and two sweeps, as ``benchmarks/scaling.py``'s ``read`` column), on the
   CPU with every core as intra-op threads and on the GPU after one warm-up read of the smallest
   model. Per model: both times, their ratio, whether the readings agree
   (`neuromanifold.singular.agreement.reading_differences`: identical decisions, F equal up to
   its rounding tolerance; each difference is printed), the largest F difference in units of
   that tolerance, and the GPU's peak allocated memory during the read. The CPU
   read is skipped for the larger models once one CPU read took ``--cpu-budget`` seconds. The
   log–log slope of the GPU time against parameter count is fitted over the models of each
   family.
2. **Batching on the GPU.** 16 pseudo-random directions on the ViT of dim 32 (as
   ``benchmarks/scaling.py`` section 5): one ``vmap``-batched `directional_fisher` call
   against 16 calls of one direction, best of ``--rounds`` interleaved rounds, N = 16, 64, 256.

Run:  python benchmarks/cuda_read.py                  (a few minutes on one H200 and 16 cores)
      python benchmarks/cuda_read.py --n 64 --cpu-budget 10
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaling import Case, mlp_case, n_params, paired_rounds, random_direction, vit_case

from neuromanifold.singular.agreement import (
    T_RTOL,
    fisher_excess,
    grid_gap,
    reading_differences,
)
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read

READ_OPTIONS = {"max_directions": 2, "snap": False, "per_layer": False, "progress": False}


def _read(case: Case, device: str) -> tuple[dict, float, int]:
    """(reading as a dict, seconds, peak GPU bytes allocated during the read; 0 on the CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    reading = read(case.model, case.data, case.family, device=device, **READ_OPTIONS)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    took = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() - start if device.startswith("cuda") else 0
    return reading.to_dict(), took, peak


def _excess(a: dict, b: dict) -> float:
    """Largest F difference over the directions read on one grid (to `T_RTOL`), in rounding
    tolerances (`fisher_excess`)."""
    return max(
        (
            fisher_excess(
                x["sweep"]["F"], y["sweep"]["F"], max(x["sweep"]["floor"], y["sweep"]["floor"])
            )
            for x, y in zip(a["directions"], b["directions"], strict=False)
            if grid_gap(x["sweep"]["t"], y["sweep"]["t"]) <= T_RTOL
        ),
        default=0.0,
    )


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def whole_reads(name: str, cases: list[Case], cpu_budget: float, device: str) -> None:
    print(f"\n== whole read, {name} (N = {int(cases[0].data.shape[0])}) ==")
    print("params      cpu s   gpu s   cpu/gpu  agree  ΔF/tol      gpu peak")
    xs, ys = [], []
    cpu_on = True
    for case in cases:
        gpu, t_gpu, peak = _read(case, device)
        p = n_params(case.model)
        xs.append(p)
        ys.append(t_gpu)
        if cpu_on:
            cpu, t_cpu, _ = _read(case, "cpu")
            cpu_on = t_cpu < cpu_budget
            diffs = reading_differences(gpu, cpu)
            excess = _excess(gpu, cpu)
            row = f"{t_cpu:7.2f} {t_gpu:7.2f} {t_cpu / t_gpu:8.2f}  {not diffs!s:>5}  {excess:8.1e}"
        else:
            diffs, row = [], f"{'–':>7} {t_gpu:7.2f} {'–':>8}  {'–':>5}  {'–':>8}"
        print(f"{p:>9,}  {row}  {peak / 1e6:9.1f} MB", flush=True)
        for line in diffs:
            print(f"           differs: {line}")
    if len(xs) >= 2:
        slope = np.polyfit(np.log(xs), np.log(ys), 1)[0]
        half = len(xs) // 2
        upper = math.nan
        if len(xs) - half >= 2:
            upper = np.polyfit(np.log(xs[half:]), np.log(ys[half:]), 1)[0]
        print(f"gpu time vs parameters: log–log slope {slope:.2f} (upper half {upper:.2f})")


def gpu_batching(sizes: list[int], rounds: int, device: str) -> None:
    print("\n== batching on the GPU: ViT dim 32, 16 directions ==")
    for n in sizes:
        case = vit_case(32, n)
        model = case.model.to(device)
        x = case.data.to(device)
        params = dict(model.named_parameters())
        dirs = [
            {k: v.to(device) for k, v in random_direction(model, seed=s).items()} for s in range(16)
        ]
        directional_fisher(model, params, dirs[:2], x[:4], case.family)  # warm-up

        def batched(model=model, params=params, dirs=dirs, x=x, fam=case.family):
            out = directional_fisher(model, params, dirs, x, fam)
            _sync(device)
            return out

        def loop(model=model, params=params, dirs=dirs, x=x, fam=case.family):
            out = torch.stack([directional_fisher(model, params, d, x, fam) for d in dirs])
            _sync(device)
            return out

        tb, tl = paired_rounds(batched, loop, rounds)
        vb, vl = batched(), loop()
        err = float(((vb - vl).abs() / vl.abs()).max())
        print(
            f"N {n}: batched {min(tb) * 1e3:.1f} ms, one at a time {min(tl) * 1e3:.1f} ms, "
            f"ratio {min(tl) / min(tb):.2f}× (best of {rounds}; max rel. diff {err:.1e})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="probe samples")
    ap.add_argument("--cpu-budget", type=float, default=30.0, help="seconds; see the docstring")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 256, 1024, 3072])
    ap.add_argument("--dims", type=int, nargs="+", default=[16, 64, 256, 640])
    ap.add_argument(
        "--device", default="cuda", help="the device set against the CPU ('cpu': a dry run)"
    )
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("cuda_read.py needs a CUDA device (torch.cuda.is_available() is False)")
    torch.set_num_threads(os.cpu_count() or 1)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"torch {torch.__version__}, {name}, CPU threads {torch.get_num_threads()}")
    t0 = time.perf_counter()
    for warm in (mlp_case(64, 8), vit_case(16, 8)):  # the CUDA context and kernels, untimed
        _read(warm, args.device)
    mlps = [mlp_case(w, args.n) for w in args.widths]
    whole_reads("MLP", mlps, args.cpu_budget, args.device)
    whole_reads("ViT", [vit_case(d, args.n) for d in args.dims], args.cpu_budget, args.device)
    gpu_batching([16, 64, 256], args.rounds, args.device)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
