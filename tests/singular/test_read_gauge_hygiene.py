"""Gauge hygiene of the whole-model read: every candidate is tested against the curved gauges.

A live ReLU unit ``y = a·relu(b·x)`` with ``(a, b) = (1.3, 0.7)`` (spec §9, ReLU-rescale row):
its rescale orbit ``(a/c, c·b)`` has tangent ``(b, −a)`` in ``(w_in, w_out)``, and a straight
probe along it reads an apparent order 2. A second hidden unit is dead (``a₂ = b₂ = 0``), so
moving ``a₂`` alone changes nothing: mixing that flat axis into the tangent gives a direction that
still reads order 2 and lies mostly in the tangent's span. Whichever detector proposes it, the read
must class it curved gauge (spec §7.2 step 8), also when ``max_directions`` cuts the gauge
candidate itself.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.classify import GAUGE_OVERLAP_MIN
from neuromanifold.singular.detectors.base import Candidate, DetectionContext, normalise
from neuromanifold.singular.detectors.rescale_detectors import ReLURescaleDetector
from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read
from neuromanifold.singular.read_candidate import MIN_RESIDUAL, read_candidate
from neuromanifold.singular.sweep import T_BATCH

A, B = 1.3, 0.7  # the live unit's output and input weights (spec §9)
N_SAMPLES = 64
# overlaps of unit vectors computed in two ways (gauge span vs explicit cosine): rounding only
ATOL_OVERLAP = 1e-12


def _model() -> nn.Module:
    m = nn.Sequential(nn.Linear(1, 2, bias=False), nn.ReLU(), nn.Linear(2, 1, bias=False))
    m = m.double()
    with torch.no_grad():
        m[0].weight.copy_(torch.tensor([[B], [0.0]]))
        m[2].weight.copy_(torch.tensor([[A, 0.0]]))
    return m


def _data() -> Tensor:
    return torch.randn(
        N_SAMPLES, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )


def _tangent() -> dict[str, Tensor]:
    """The rescale tangent of the live unit, ``(b, −a)``, normalised."""
    t = {
        "0.weight": torch.tensor([[B], [0.0]], dtype=torch.float64),
        "2.weight": torch.tensor([[-A, 0.0]], dtype=torch.float64),
    }
    return normalise(t)


def _mixed(cos: float) -> dict[str, Tensor]:
    """``cos·tangent + sin·e(a₂)``: the dead unit's output weight is an exactly flat axis."""
    u = {k: cos * v for k, v in _tangent().items()}
    u["2.weight"] = u["2.weight"] + torch.tensor([[0.0, math.sqrt(1.0 - cos**2)]])
    return u


def _cosine(u: dict[str, Tensor], v: dict[str, Tensor]) -> float:
    """Brute-force ``|⟨u, v⟩|/(‖u‖‖v‖)`` over the union of keys."""
    keys = sorted(set(u) | set(v))
    a = torch.cat([u[k].reshape(-1) if k in u else torch.zeros(v[k].numel()) for k in keys])
    b = torch.cat([v[k].reshape(-1) if k in v else torch.zeros(u[k].numel()) for k in keys])
    a, b = a.double(), b.double()
    return abs(float(a @ b)) / float(a.norm() * b.norm())


class _Planted:
    """A non-gauge detector that proposes one fixed direction on the pair of Linears."""

    name = "planted"

    def __init__(self, u: dict[str, Tensor]) -> None:
        self.u = u

    def applies_to(self, module: nn.Module) -> bool:
        return type(module) is nn.Linear

    def propose(self, name: str, module: nn.Module, ctx: DetectionContext) -> list[Candidate]:
        if name != "0":
            return []
        return [Candidate(layers=("0", "2"), detector="planted", u=normalise(self.u), ratio=0.0)]


def _planted_record(cos: float, **options):
    detectors = [ReLURescaleDetector(), _Planted(_mixed(cos))]
    reading = read(_model(), _data(), Gaussian(), detectors=detectors, progress=False, **options)
    return [r for r in reading.directions if r.detector == "planted"]


# 0.998: less than MIN_RESIDUAL survives projection (no projected re-read possible);
# 0.95: the projection would leave the flat axis alone, which reads flat
@pytest.mark.parametrize("cos", [0.998, 0.95])
def test_non_gauge_candidate_in_a_curved_gauge_span_reads_curved_gauge(cos: float) -> None:
    m, x = _model(), _data()
    u = _mixed(cos)
    assert _cosine(u, _tangent()) > GAUGE_OVERLAP_MIN
    # without the generator the straight probe reads an apparent order 2: the mimic
    bare = read_direction(m, dict(m.named_parameters()), u, x, Gaussian())
    assert (bare.k, bare.klass.value) == (2, "genuine_singularity")
    (rec,) = _planted_record(cos)
    assert rec.k == 2
    assert rec.klass == "curved_gauge"
    assert rec.gauge_overlap == pytest.approx(_cosine(u, _tangent()), rel=0, abs=ATOL_OVERLAP)
    assert "projected" not in rec.info


def test_exact_tangent_proposed_as_non_gauge_reads_curved_gauge() -> None:
    """`read_candidate` on the tangent itself (a K-FAC-style candidate, no gauge label): the
    residual after projection is below ``MIN_RESIDUAL``, so no re-read; the class comes from the
    overlap test."""
    m, x = _model(), _data()
    params = {k: v.detach().clone() for k, v in m.named_parameters()}
    cand = Candidate(layers=("0", "2"), detector="kfac-joint", u=_tangent(), ratio=0.0)
    gauges = [_tangent()]
    assert math.sqrt(max(0.0, 1.0 - _cosine(cand.u, gauges[0]) ** 2)) < MIN_RESIDUAL
    rec, _ = read_candidate(
        cand,
        m,
        params,
        x,
        Gaussian(),
        grid=None,
        snap="auto",
        gauges=gauges,
        project_gauges=True,
        per_layer=False,
        chunk=None,
        t_batch=T_BATCH,
        plan=None,
    )
    assert (rec.k, rec.klass) == (2, "curved_gauge")
    assert rec.gauge_overlap == pytest.approx(1.0, rel=0, abs=ATOL_OVERLAP)


def test_max_directions_keeps_the_gauge_tests() -> None:
    """Gauges are read last, so ``max_directions=1`` cuts the rescale candidate; its generator
    must still classify the planted direction and record its overlap (finding: it did not)."""
    (full,) = _planted_record(0.95)
    (cut,) = _planted_record(0.95, max_directions=1)
    assert cut.klass == full.klass == "curved_gauge"
    assert cut.gauge_overlap == pytest.approx(full.gauge_overlap, rel=0, abs=ATOL_OVERLAP)


def test_max_directions_records_the_overlap_of_a_genuine_read() -> None:
    """A node death in an MLP with a live ReLU unit: the duality chain reads genuine with its
    overlap against the rescale span recorded, also when the rescale candidate is cut."""
    from neuromanifold.cells.planted import planted_mlp

    p = planted_mlp(activation="relu", n=64, seed=4)
    full = read(p.model, p.data, p.family, progress=False)
    (first,) = read(p.model, p.data, p.family, progress=False, max_directions=1).directions
    (ref,) = [r for r in full.directions if r.detector == "duality"]
    assert first.detector == "duality" and first.klass == ref.klass == "genuine_singularity"
    assert first.gauge_overlap is not None
    assert first.gauge_overlap == pytest.approx(ref.gauge_overlap, rel=0, abs=ATOL_OVERLAP)


def test_one_vector_carries_the_span_overlap() -> None:
    """The sweeps classify a candidate against ``P_G û`` alone; oracle: the overlap with the
    whole span of the related generators (`gauge_overlap`), and the residual's orthogonality."""
    from neuromanifold.singular.classify import gauge_overlap
    from neuromanifold.singular.read_candidate import _gauge_split, project_out_gauges

    g = torch.Generator().manual_seed(3)
    params = {
        "a": torch.randn(4, 3, generator=g, dtype=torch.float64),
        "b": torch.randn(5, generator=g, dtype=torch.float64),
        "c": torch.randn(2, 2, generator=g, dtype=torch.float64),
    }
    u = {"a": torch.randn(4, 3, generator=g, dtype=torch.float64)}
    u["b"] = torch.randn(5, generator=g, dtype=torch.float64)
    gens = [
        {"a": torch.randn(4, 3, generator=g, dtype=torch.float64)},
        {
            "b": torch.randn(5, generator=g, dtype=torch.float64),
            "c": torch.ones(2, 2, dtype=torch.float64),
        },
        {"c": torch.randn(2, 2, generator=g, dtype=torch.float64)},  # shares no tensor: unused
    ]
    cand = Candidate(layers=("x",), detector="kfac-joint", u=normalise(u), ratio=0.0)
    u_proj, overlap, line = _gauge_split(cand, gens, params)
    span = gauge_overlap(cand.u, gens[:2])
    assert 0.0 < span < 1.0
    assert overlap == pytest.approx(span, rel=0, abs=ATOL_OVERLAP)
    assert gauge_overlap(cand.u, [line]) == pytest.approx(span, rel=0, abs=ATOL_OVERLAP)
    assert project_out_gauges(cand, gens, params)[1] == overlap
    assert gauge_overlap(u_proj, gens[:2]) == pytest.approx(0.0, rel=0, abs=ATOL_OVERLAP)
