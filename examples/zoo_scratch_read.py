"""Train (or load from cache) the `vit-digits-scratch` recipe and read its dead directions.

Run: ``python examples/zoo_scratch_read.py [--out DIR] [--probe N] [--baseline]``

Prints the validation metrics, the per-block MLP usage (compressed units, participation ratio; see
`neuromanifold.zoo.compression`) and a table of the read's directions grouped by layer, detector,
class and order k. The spec (dead_directions.md §0, §11) expects rotated node deaths in the MLP
blocks at the activation's order (k = 2 for GELU) and architectural gauges elsewhere; what the read
finds is printed as is.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="checkpoint directory (cache)")
    parser.add_argument(
        "--probe", type=int, default=128, help="number of validation images to probe"
    )
    parser.add_argument("--recipe", default="vit-digits-scratch")
    parser.add_argument("--stage", default=None, help="stage to read (default: the last)")
    parser.add_argument(
        "--baseline", action="store_true", help="per-coordinate scan beside genuine"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the reading's JSON here")
    args = parser.parse_args()

    from neuromanifold.singular.family import Categorical
    from neuromanifold.singular.read import read
    from neuromanifold.zoo import digits, load_checkpoint, mlp_usage, run_recipe

    t0 = time.perf_counter()
    result = run_recipe(args.recipe, out=args.out, progress=True)
    stage = args.stage or list(result.checkpoints)[-1]
    model, meta = load_checkpoint(result.checkpoints[stage])
    print(f"{stage}: trained/loaded in {time.perf_counter() - t0:.1f} s (cached: {result.cached})")
    print(
        {
            k: meta.metrics[k]
            for k in ("val_loss", "val_accuracy", "train_accuracy")
            if k in meta.metrics
        }
    )
    data = digits(meta.task, seed=0)
    for u in mlp_usage(model, data.x_train):
        print(
            f"  {u.layer}: {u.compressed}/{u.hidden} units < {u.threshold:g} of max, "
            f"participation ratio {u.participation_ratio:.1f}"
        )

    probe = data.x_val[: args.probe]
    t1 = time.perf_counter()
    reading = read(model, probe, Categorical(), baseline=args.baseline, progress=True)
    print(f"read: {len(reading.directions)} directions in {time.perf_counter() - t1:.1f} s")
    counts = Counter((r.layer, r.detector, r.klass, r.k) for r in reading.directions)
    for (layer, det, klass, k), n in sorted(counts.items(), key=lambda kv: str(kv[0])):
        print(f"  {layer:28s} {det:18s} {klass:22s} k={k}  x{n}")
    mlp = [r for r in reading.directions if ".mlp." in r.layer]
    genuine = [r for r in mlp if r.klass.startswith("genuine")]
    print(
        f"MLP directions: {len(mlp)}; genuine: {len(genuine)}; "
        f"orders {Counter(r.k for r in genuine)}"
    )
    for r in genuine[:10]:
        print(f"  {r.layer} {r.detector} k={r.k} k_hat={r.k_hat} r2={r.r2} baseline={r.baseline}")
    if reading.not_covered:
        print("not covered:", [n.to_dict() for n in reading.not_covered])
    if args.json:
        args.json.write_text(json.dumps(reading.to_dict(), indent=1))


if __name__ == "__main__":
    main()
