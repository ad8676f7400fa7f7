"""The spectra figure's key states the whole near-kernel rule, and the circles follow it.

s17 trial AF #3: the key said "red ○: detected near-kernel; dotted: its threshold τ", so ratios
far below the dotted line without a circle looked like misses; the rule (spec §6.2,
`neuromanifold.singular.detectors.near_kernel`) also needs a one-decade gap.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import torch

from neuromanifold.report import figures
from neuromanifold.report.spectra import SPREAD_TAU, block_spectra
from neuromanifold.singular.detectors.near_kernel import GAP
from test_report_figure_titles import _captured


def test_the_key_states_tau_and_the_gap() -> None:
    key = figures.SPECTRA_KEY
    assert f"below τ = {SPREAD_TAU:g} (dotted)" in key
    assert f"gap of at least {math.log10(GAP):g} decade (consecutive ratios ×{GAP:g} apart)" in key
    assert "ratios below τ with no such gap above them are not marked" in key
    assert "its threshold τ" not in key  # the old key, read as "all below the line"


def _as_worded(ratios: list[float]) -> set[int]:
    """The ratios the key's words mark (descending list, indices): those below τ that a gap of at
    least ``GAP`` between consecutive ratios separates from all larger ratios — a pair
    ``r[j-1] ≥ GAP · r[j]`` with ``r[j] < τ`` and ``j ≤ i`` (``r[-1] = ∞``: nothing is larger)."""
    above = [math.inf, *ratios]
    gaps = [j for j, r in enumerate(ratios) if r < SPREAD_TAU and above[j] >= GAP * r]
    return {i for i in range(len(ratios)) if gaps and min(gaps) <= i}


def test_the_circles_are_the_ratios_the_key_describes(tmp_path: Path, monkeypatch) -> None:
    # A: decays smoothly (×2 a step) far below τ: no gap, nothing circled although many lie below
    # the dotted line; G: a smooth part below τ, then a gap of three decades to two small ratios
    a_eig = [0.5**i for i in range(40)]  # down to 1.8e-12
    g_eig = [1.0, 0.5, 2e-3, 9e-4, 5e-4, 2e-4, 1e-7, 5e-8]
    factors = {
        "fc": SimpleNamespace(
            A=torch.diag(torch.tensor(a_eig, dtype=torch.float64)),
            G=torch.diag(torch.tensor(g_eig, dtype=torch.float64)),
        )
    }
    spectra = block_spectra(factors)
    drawn = _captured(monkeypatch)
    figures.plot_spectra(spectra, tmp_path / "s.png", title="law")
    (fig,) = drawn
    (ax,) = [a for a in fig.axes if a.axison]
    circled = {
        (round(float(x)), float(y))
        for ln in ax.get_lines()
        if ln.get_marker() == "o"
        for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True)
    }
    wanted = set()
    for which in ("A", "G"):
        ratios = spectra["fc"][which]
        wanted |= {(i + 1, ratios[i]) for i in _as_worded(ratios)}
    below = sum(r < SPREAD_TAU for r in spectra["fc"]["A"] + spectra["fc"]["G"])
    assert len(wanted) == 2 and below > 20  # the case is the one in the key: most are not marked
    assert circled == wanted
