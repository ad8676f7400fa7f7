"""Train (or load from cache) the `optimizer-sweep` recipe and read each optimizer's ViT.

Run: ``python examples/zoo_sweep_read.py [--out DIR] [--probe N]``

Per optimizer it prints the validation loss/accuracy, the read's readable directions (fit r² ≥
0.95) by class and order k, the genuine singularities found in MLP blocks, and a spread measure of
each MLP's ``fc2`` input second moment ``A = E[[h;1][h;1]ᵀ]`` on the probe set: the number of
eigenvalue ratios ``α_i/α_max`` below 1e-3 and the largest gap between consecutive ratios in
``[1e-12, 1e-2]`` in decades (a clean near-kernel shows as a gap of ≥ 1 decade; a smooth decay
means a diffuse one).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import torch

READABLE_R2 = 0.95
RATIO_FLOOR = 1e-12  # eigenvalue ratios below this are round-off and excluded from the gap
TAIL_TOP = 1e-2  # gaps are measured in the tail below this ratio (the near-kernel candidates)


def _fc2_spread(model: torch.nn.Module, x: torch.Tensor) -> list[tuple[str, int, float]]:
    acts: dict[str, torch.Tensor] = {}
    blocks = [(n, m) for n, m in model.named_modules() if hasattr(m, "fc2") and hasattr(m, "act")]
    hooks = [
        m.act.register_forward_hook(lambda _m, _i, out, n=n: acts.__setitem__(n, out.detach()))
        for n, m in blocks
    ]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    out = []
    for name, _ in blocks:
        h = acts[name].reshape(-1, acts[name].shape[-1]).double()
        h1 = torch.cat([h, torch.ones(h.shape[0], 1, dtype=h.dtype)], dim=1)
        ev = torch.linalg.eigvalsh(h1.T @ h1 / h1.shape[0]).flip(0)
        ratios = ev / ev[0]
        tail = ratios[(ratios >= RATIO_FLOOR) & (ratios <= TAIL_TOP)]
        logs = tail.log10()  # below RATIO_FLOOR: float64 round-off of the Gram
        gap = float((logs[:-1] - logs[1:]).max()) if logs.numel() > 1 else 0.0
        out.append((name, int((ratios < 1e-3).sum()), gap))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="checkpoint directory (cache)")
    parser.add_argument("--probe", type=int, default=128, help="number of validation images")
    args = parser.parse_args()

    from neuromanifold.singular.family import Categorical
    from neuromanifold.singular.read import read
    from neuromanifold.zoo import digits, load_checkpoint, run_recipe

    result = run_recipe("optimizer-sweep", out=args.out, progress=True)
    probe = digits("digits", seed=0).x_val[: args.probe]
    for stage, path in result.checkpoints.items():
        model, meta = load_checkpoint(path)
        t0 = time.perf_counter()
        reading = read(model, probe, Categorical(), progress=False)
        readable = [r for r in reading.directions if r.r2 is not None and r.r2 >= READABLE_R2]
        kinds = Counter((r.klass, r.k) for r in readable)
        genuine_mlp = [
            r for r in reading.directions if r.klass.startswith("genuine") and ".mlp." in r.layer
        ]
        print(
            f"{stage}: val_loss {meta.metrics['val_loss']:.4f} "
            f"val_acc {meta.metrics['val_accuracy']:.4f} | {len(reading.directions)} directions, "
            f"{len(readable)} readable (r2>={READABLE_R2}), "
            f"read in {time.perf_counter() - t0:.0f} s"
        )
        print(f"   readable by (class, k): {dict(sorted(kinds.items(), key=str))}")
        print(f"   all by class: {dict(Counter(r.klass for r in reading.directions))}")
        print(f"   genuine in MLP: {[(r.layer, r.k, r.r2) for r in genuine_mlp]}")
        print(
            f"   fc2 input spectrum (#ratios<1e-3, max gap in decades): {_fc2_spread(model, probe)}"
        )


if __name__ == "__main__":
    main()
