"""The weakest hidden direction of each MLP block, read as a rotated node death.

Not a detector: evidence for a report when the detectors name nothing in an MLP block (the demo's
scratch ViT, whose hidden spectra decay smoothly with no decade gap for the near-kernel rule).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from neuromanifold.singular.coordinate_scan import coordinate_scan
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Categorical, check_family

__all__ = ["hidden_probes"]


def hidden_probes(
    model: Any, x: Any, factors: Any, *, grid: Any = None, index: int = 0, family: Any = None
) -> list[dict[str, Any]]:
    """Read the hidden layer's weakest direction of each MLP block as a node-death probe.

    Not a detector: evidence for the report when the detectors name nothing in an MLP block.
    For block ``fc1 → GELU → fc2`` with factors ``A₁`` (fc1 input), ``A₂`` (fc2 input, the hidden
    activations; bias coordinate dropped) and ``G₂`` (fc2 output), take ``v`` = the eigenvector
    of ``A₂`` with the ``index``-th smallest eigenvalue (a rotated hidden direction the data
    barely excites), ``a`` = the top eigenvector of ``A₁``, ``g`` = the top eigenvector of ``G₂``,
    and read the rotated node-death direction ``ΔW₁ = v aᵀ`` (with ``Δb₁ = v a_bias``),
    ``ΔW₂ = g vᵀ`` (equal halves, unit norm) unsnapped and snapped, beside the coordinate scan
    of ``fc1`` and ``fc2``. Returns one JSON-safe dict per block.

    ``family`` is the output family of the reads and must be the one ``factors`` were computed
    with (``G₂`` depends on it); ``None`` means `Categorical` (the demo's classifiers).
    Blocks are modules with ``fc1`` and ``fc2`` children, both in ``factors``, ``fc1`` with a bias.

    Raises:
        TypeError: ``family`` is not an output family.
    """
    family = Categorical() if family is None else check_family(family)
    work = copy.deepcopy(model).double().eval()
    params = {k: v.detach() for k, v in work.named_parameters()}
    xd = x.double()
    out = []
    for name, mod in work.named_modules():
        if not (hasattr(mod, "fc1") and hasattr(mod, "fc2")):
            continue
        p1, p2 = f"{name}.fc1", f"{name}.fc2"
        if p1 not in factors or p2 not in factors or mod.fc1.bias is None:
            continue
        a2 = factors[p2].A[: mod.fc2.in_features, : mod.fc2.in_features]
        ev, vecs = torch.linalg.eigh(0.5 * (a2 + a2.T))
        v = vecs[:, index]
        a = torch.linalg.eigh(factors[p1].A)[1][:, -1]
        g = torch.linalg.eigh(factors[p2].G)[1][:, -1]
        h = 2.0**-0.5
        u = {
            f"{p1}.weight": h * torch.outer(v, a[:-1]),
            f"{p1}.bias": h * v * a[-1],
            f"{p2}.weight": h * torch.outer(g, v),
        }
        entry: dict[str, Any] = {
            "block": name,
            "eig_index": index,
            "ratio": float(ev[index] / ev[-1]),
        }
        g_list = None if grid is None else list(grid)
        for snap in (False, True):
            r = read_direction(work, params, u, xd, family, grid=g_list, snap=snap)
            entry["snapped" if snap else "unsnapped"] = {
                "k": r.k,
                "k_hat": r.k_hat,
                "r2": r.r2,
                "class": r.klass.value,
                "offset": r.offset,
            }
        scan = coordinate_scan(work, xd, family, layers=[p1, p2], grid=g_list)
        entry["scan"] = {
            layer: {"best_k": scan.best_k(layer), "classes": scan.classes(layer)}
            for layer in (p1, p2)
        }
        out.append(entry)
    return out
