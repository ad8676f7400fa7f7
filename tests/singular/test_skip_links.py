"""Skip edges through residual sums, and dead paths the whole read follows past residual blocks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuromanifold.singular.detectors.linear as lin
from neuromanifold.cells import residual_path
from neuromanifold.singular.detectors import trace_graph
from neuromanifold.singular.read import read

# k̂ of an exact power law read on the default grid: |k̂ − 2| measured ≤ 4.4e-16 for 1–3 blocks
# (1 and 2 threads); the bound leaves a wide margin for other BLAS builds
K_HAT_TOL = 1e-10


class _Stream(nn.Module):
    """``a → (+ b(·)) → c``, ``a → relu(+ b(·)) → d`` and ``a → 2·(+ b(·)) → e``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 4)
        self.c, self.d, self.e = nn.Linear(4, 2), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.a(x)
        s = z + self.b(z)
        t = torch.add(self.b(z), z)
        return self.c(s) + self.d(torch.relu(s)) + self.e(2 * t)


def test_skip_edges_follow_additions_only() -> None:
    g = trace_graph(_Stream().double(), torch.randn(5, 3, dtype=torch.float64))
    assert g.consumers["a"] == ("b",)  # the direct edge, unchanged
    assert g.skips["a"] == ("c",)  # relu(·) and 2·(·) end the provenance
    assert g.skips["b"] == ("c",)
    assert "d" not in g.skips.get("a", ()) and "e" not in g.skips.get("a", ())


class _InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.a(x)
        z += self.b(z)
        return self.c(z)


def test_in_place_addition_turns_the_direct_edge_into_a_skip_edge() -> None:
    g = trace_graph(_InPlace().double(), torch.randn(5, 3, dtype=torch.float64))
    assert g.consumers == {"a": ("b",)}
    assert g.skips == {"a": ("c",), "b": ("c",)}


def test_plain_chain_has_no_skip_edges() -> None:
    cell = residual_path(skip=False, blocks=2)
    g = trace_graph(cell.model, cell.data[:4])
    assert g.skips == {}
    assert g.consumers == {"inp": ("blocks.0",), "blocks.0": ("blocks.1",), "blocks.1": ("out",)}


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_whole_read_follows_the_residual_stream_to_order_two(blocks: int) -> None:
    """Spec §6.6: past n dead residual blocks the shortest weighted path has κ = 2, so the read
    proposes the chain ``inp → out`` through the skips and reads k = 2 (the cell's prediction);
    without skip edges the only chains end inside the dead stack and read flat."""
    cell = residual_path(skip=True, blocks=blocks)
    g = trace_graph(cell.model, cell.data[:4])
    assert g.skips["inp"] == (*(f"blocks.{i}" for i in range(1, blocks)), "out")
    r = read(cell.model, cell.data, cell.family, progress=False)
    skip = [d for d in r.directions if d.layers == ("inp", "out")]
    assert skip, [d.layers for d in r.directions]
    for d in skip:
        assert d.detector == "duality"
        assert d.k == cell.expected_k == 2
        assert d.klass == cell.expected_class
        assert abs(d.k_hat - 2.0) < K_HAT_TOL
    # every other candidate moves weights that no path to the output crosses: F ≡ 0
    assert all(d.k is None for d in r.directions if d.layers != ("inp", "out"))


def test_plain_read_is_unchanged_by_skip_links() -> None:
    cell = residual_path(skip=False, blocks=2)
    r = read(cell.model, cell.data, cell.family, progress=False)
    assert {d.layers for d in r.directions} == {("inp", "blocks.0", "blocks.1", "out")}
    assert all(d.k == cell.expected_k == 4 for d in r.directions)


def test_chains_ending_without_output_gradient_are_dropped(monkeypatch) -> None:
    """Skip links into ``blocks.1`` exist (its input is dead too) but lead nowhere live."""
    cell = residual_path(skip=True, blocks=2)
    proposed: list[tuple[str, ...]] = []
    original = lin.LinearDetector._skip_chains

    def spy(self, ctx, name, spec):
        links = self.skip_linked(ctx, name)
        if name == "inp":
            assert {c for _, c, _ in links} == {"blocks.1", "out"}
        out = original(self, ctx, name, spec)
        proposed.extend(c.layers for c, _ in out)  # (candidate, first-block G vector)
        return out

    monkeypatch.setattr(lin.LinearDetector, "_skip_chains", spy)
    read(cell.model, cell.data, cell.family, progress=False, max_directions=0)
    assert proposed and set(proposed) == {("inp", "out")}
