"""Ratios below τ that the near-kernel gap rule leaves unproposed are named by the read.

s17 user trial AF #4: a trained ViT's MLP factors decayed smoothly to ratios of 1e-10, the gap
rule proposed nothing there, and the reading gave no hint of it.
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold import Gaussian, read
from neuromanifold.singular.detectors.gapless import (
    NOTE_BLOCKS,
    gapless_note,
    gapless_small_ratios,
)
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.near_kernel import below_tau_not_kept, near_kernel

TAU = 1e-3


def _spec(alpha: list[float], gamma: list[float]) -> BlockSpectrum:
    a = torch.tensor(sorted(alpha), dtype=torch.float64)
    g = torch.tensor(sorted(gamma), dtype=torch.float64)
    return BlockSpectrum(
        a,
        torch.eye(len(alpha), dtype=torch.float64),
        g,
        torch.eye(len(gamma), dtype=torch.float64),
        near_kernel(a, TAU),
        near_kernel(g, TAU),
    )


def test_counts_equal_a_brute_force_count() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        ev = 10.0 ** (-12 * torch.rand(9, generator=gen, dtype=torch.float64))
        kept = near_kernel(ev, TAU)
        ratios = (ev / ev.max()).tolist()
        below = [r for i, r in enumerate(ratios) if r < TAU and i not in kept]
        n, smallest = below_tau_not_kept(ev, TAU, kept)
        assert n == len(below)
        if below:
            assert smallest == min(below)


def test_rows_and_note() -> None:
    smooth = [3.0**-i for i in range(12)]  # steps of 3×, no gap: 3^-7 … 3^-11 are below τ
    gapped = [1.0, 0.5, 1e-8]  # a kernel behind a gap: kept, nothing to report
    spectra = {
        "a": _spec(smooth, gapped),
        "b": _spec(gapped, gapped),
        "c": None,
        "d": _spec(gapped, [2.0**-i for i in range(30)]),
    }
    rows = gapless_small_ratios(spectra)
    assert [(r["block"], r["factor"], r["n"]) for r in rows] == [("a", "A", 5), ("d", "G", 20)]
    assert rows[0]["min_ratio"] == 3.0**-11
    note = gapless_note(rows)
    assert note.startswith("25 factor eigenvalue ratio(s) below τ = 0.001 were not proposed")
    assert note.index("d G: 20 down to") < note.index("a A: 5 down to")  # smallest first
    assert gapless_note([]) == ""
    many = [dict(rows[0], block=f"x{i}") for i in range(NOTE_BLOCKS + 2)]
    assert "and 2 more" in gapless_note(many)
    root = [dict(rows[0], block="")]  # a model that is itself a block (s17 audit AH #9)
    assert "<root> A: 5 down to" in gapless_note(root)


def test_a_read_names_a_smoothly_decaying_input_factor() -> None:
    """Inputs scaled by 2^-i: the first layer's A ratios fall by about 4× per step (sampling
    moves a step by well under the 2.5× it would need to reach a decade), ratios 4^-5 … 4^-11
    lie below τ."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 3)).double().eval()
    scale = torch.tensor([2.0**-i for i in range(12)], dtype=torch.float64)
    x = torch.randn(256, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = read(m, x * scale, Gaussian(), progress=False, max_directions=0)
    rows = r.meta["gapless_small_ratios"]
    first = [row for row in rows if row["block"] == "0" and row["factor"] == "A"]
    assert first and first[0]["n"] >= 5 and first[0]["min_ratio"] < 1e-6
    assert "were not proposed because no one-decade spectral gap" in r.note
