"""Transient memory of the read's passes outside the plan's sweeps (s28 trial DIST F3: under a
60 MB budget a one-layer GPT-2 read peaked at 63.0 MB of tracked tensors, set by a certification
pass over all 31 samples, the graph trace's held activations and the gauge projection's copies)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors import rescale
from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.graph import trace_graph
from neuromanifold.singular.detectors.rescale import relative_change
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.memory import peak_allocated
from neuromanifold.singular.read import read
from neuromanifold.singular.read_candidate import _gauge_split

D = torch.float64
# a trace holds its provenance tables and the model output besides the plain forward's peak
TRACE_OVER_FORWARD = 1.5
# the gauge projection holds the generator matrix and the SVD's singular vectors at once, and
# vectors of the entries' length (u, its projection, the residual)
SPLIT_OVER_BASIS = 2.2


def _deep_mlp(depth: int = 10, width: int = 256) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 3)).double().eval()


def test_the_graph_trace_keeps_no_activation_alive() -> None:
    """The trace's provenance drops a tensor's entries when it is freed: its peak is the plain
    forward's (it held all 20 activations of a 10-layer MLP before, ~10× the forward's)."""
    model = _deep_mlp()
    x = torch.randn(64, 256, dtype=D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = peak_allocated(lambda: model(x))
    traced = peak_allocated(lambda: trace_graph(model, x))
    assert traced <= TRACE_OVER_FORWARD * plain
    graph = trace_graph(model, x)  # and the graph is the same as ever: one chain of ten edges
    assert graph.consumers["0"] == ("2",) and graph.consumers["18"] == ("20",)


class _Counting(nn.Module):
    """An MLP that records the batch size of every forward."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
        self.batches: list[int] = []

    def forward(self, x: Tensor) -> Tensor:
        self.batches.append(int(x.shape[0]))
        return self.net(x)


def test_certification_passes_follow_the_context_chunk_and_cache_limit() -> None:
    torch.manual_seed(0)
    model = _Counting().double()
    x = torch.randn(20, 4, dtype=D, generator=torch.Generator().manual_seed(2))
    params = {k: v.detach() for k, v in model.named_parameters()}
    moved = {"net.0.weight": 1.5 * params["net.0.weight"]}

    def ctx(**sizes) -> DetectionContext:
        return DetectionContext(
            model=model,
            params=params,
            factors=kfac_factors(model.net, x, Gaussian()),
            graph=trace_graph(model, x),
            family=Gaussian(),
            data=x,
            **sizes,
        )

    default = ctx()
    model.batches.clear()
    whole = relative_change(default, moved)
    assert model.batches == [20, 20] and "certify_base" in default.cache
    small = ctx(forward_chunk=3, cache_bytes=0)
    model.batches.clear()
    assert relative_change(small, moved) == whole  # a maximum over chunks: the same value
    assert relative_change(small, moved) == whole
    assert max(model.batches) == 3 and "certify_base" not in small.cache
    assert sum(model.batches) == 4 * 20  # base and moved outputs, twice: nothing kept


def test_a_budgeted_read_certifies_in_its_factor_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a budget `read` gives the detection context the plan's factor batch: every
    certification forward covers at most that many samples (all 40 in one pass before)."""
    seen: list[int] = []
    outputs = rescale._outputs

    def spy(ctx: DetectionContext, params: dict[str, Tensor], x: Tensor) -> list[Tensor]:
        seen.append(int(x.shape[0]))
        return outputs(ctx, params, x)

    monkeypatch.setattr(rescale, "_outputs", spy)
    torch.manual_seed(0)
    # per-token layers on 256 tokens: a large cost per sample beside small factors
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), nn.Flatten()).double()
    x = torch.randn(40, 256, 8, dtype=D, generator=torch.Generator().manual_seed(3))
    free = read(model, x, Gaussian(), progress=False, max_directions=0)
    assert seen and max(seen) == 40
    seen.clear()
    budgeted = read(model, x, Gaussian(), progress=False, max_directions=0, max_memory="5MB")
    batch = budgeted.meta["memory_plan"]["factor_batch"]
    assert batch < 40 and seen and max(seen) == batch
    assert [r.klass for r in budgeted.directions] == [r.klass for r in free.directions]


def test_the_gauge_projection_holds_two_generator_matrices_at_most() -> None:
    torch.manual_seed(0)
    n, g = 4000, 120
    params = {"w": torch.randn(n // 40, 40, dtype=D)}
    gens = [{"w": torch.randn(n // 40, 40, dtype=D)} for _ in range(g)]
    cand = Candidate(("layer",), "kfac-G", {"w": torch.randn(n // 40, 40, dtype=D)})
    peak = peak_allocated(lambda: _gauge_split(cand, gens, params))
    assert peak <= SPLIT_OVER_BASIS * n * g * 8
    u_proj, overlap, line = _gauge_split(cand, gens, params)
    # against the projection computed directly: P_G û by least squares on the stacked generators
    basis = torch.stack([q["w"].reshape(-1) for q in gens], 1)
    u = cand.u["w"].reshape(-1) / cand.u["w"].norm()
    proj = basis @ torch.linalg.lstsq(basis, u).solution
    assert abs(overlap - float(proj.norm())) <= 1e-12
    assert torch.allclose(line["w"].reshape(-1), proj, rtol=0, atol=1e-12)
    rest = (u - proj) / (u - proj).norm()
    assert torch.allclose(u_proj["w"].reshape(-1), rest, rtol=0, atol=1e-12)
