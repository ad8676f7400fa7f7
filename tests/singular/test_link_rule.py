"""The duality link rule against a random vector's null expectation; candidate overlaps."""

from __future__ import annotations

import math

import pytest
import torch

import neuromanifold.singular.detectors.linear as lin
import neuromanifold.singular.detectors.link as link
from neuromanifold.cells.planted import planted_mlp
from neuromanifold.singular.detectors import DetectionContext, default_registry, trace_graph
from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.detectors.link import (
    EXACT_DEAD_ENERGY,
    MATCH_MIN,
    NULL_FRACTION,
    BlockSpectrum,
    link_energy_max,
)
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

ATOL_EXACT = 1e-12
# batched vs one-vector input lift of unit vectors: measured ≤ 2.3e-16
ATOL_LIFT = 1e-13
# energies of unit vectors in float64 after a d × r projection (d ≤ 2048): rounding of order ε·d
ATOL_ENERGY = 1e-12
# kernel projections ‖P_ker v‖ through the complement are √(1 − e): away from ‖P_ker v‖ = 0 (the
# test vectors stay there) rounding stays far below this; near 0 the square root would amplify it
ATOL_MATCH = 1e-9
# sample mean of n_draws random energies: within this many standard errors of r/d
MEAN_SIGMAS = 5.0


def _spectrum(d: int, k: int, seed: int) -> BlockSpectrum:
    """A-factor with a ``k``-dimensional exact kernel in a random orthonormal basis of ``R^d``."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    ev = torch.cat([torch.zeros(k), torch.linspace(0.5, 1.0, d - k)]).double()
    return BlockSpectrum(ev, q, ev, q, list(range(k)), list(range(k)))


def _with_energy(spec: BlockSpectrum, e: float, seed: int) -> torch.Tensor:
    """A unit vector whose out-of-kernel energy is exactly ``e`` (up to rounding)."""
    gen = torch.Generator().manual_seed(seed)
    ker, live = spec.ker_a_basis(), spec.live_a_basis()
    x = ker @ torch.randn(ker.shape[1], generator=gen, dtype=torch.float64)
    y = live @ torch.randn(live.shape[1], generator=gen, dtype=torch.float64)
    return math.sqrt(1.0 - e) * x / x.norm() + math.sqrt(e) * y / y.norm()


def test_threshold_closed_forms() -> None:
    small = _spectrum(100, 3, seed=0)  # r/d = 0.97: the old ‖P_ker v‖ ≥ MATCH_MIN
    assert link_energy_max(small) == pytest.approx(1.0 - MATCH_MIN**2, abs=ATOL_EXACT)
    wide = _spectrum(200, 190, seed=1)  # r/d = 0.05
    assert link_energy_max(wide) == pytest.approx(NULL_FRACTION * 10 / 200, abs=ATOL_EXACT)
    half = _spectrum(100, 50, seed=2)  # the old rule holds unchanged up to k = d/2
    assert NULL_FRACTION * 0.5 >= 1.0 - MATCH_MIN**2
    assert link_energy_max(half) == pytest.approx(1.0 - MATCH_MIN**2, abs=ATOL_EXACT)
    ev = torch.zeros(6, dtype=torch.float64)  # a vanishing factor: everything is kernel
    gone = BlockSpectrum(ev, torch.eye(6).double(), ev, torch.eye(6).double(), list(range(6)), [])
    assert link_energy_max(gone) == EXACT_DEAD_ENERGY


@pytest.mark.parametrize(("d", "k"), [(40, 4), (40, 36)])
def test_batched_live_energy_equals_one_vector_at_a_time(d: int, k: int) -> None:
    """Explicit-kernel (small kernel) and complement (wide kernel) formulas against the oracles
    (`live_energy`, `match`), and the two batched quantities against each other."""
    spec = _spectrum(d, k, seed=2)
    gen = torch.Generator().manual_seed(3)
    vecs = torch.randn(d, 10, generator=gen, dtype=torch.float64)
    vecs = torch.cat([vecs, spec.ker_a_basis()[:, :2] + 1e-4 * vecs[:, :2]], 1)
    vecs = vecs / vecs.norm(dim=0)
    batch = link.live_energy_batch(spec, vecs)
    one = [link.live_energy(spec, vecs[:, i]) for i in range(vecs.shape[1])]
    torch.testing.assert_close(
        batch, torch.tensor(one, dtype=torch.float64), atol=ATOL_ENERGY, rtol=0
    )
    match = link.match_batch(spec, vecs)
    torch.testing.assert_close(batch, 1.0 - match.pow(2), atol=ATOL_ENERGY, rtol=0)
    one_match = [link.match(spec, vecs[:, i]) for i in range(vecs.shape[1])]
    torch.testing.assert_close(
        match, torch.tensor(one_match, dtype=torch.float64), atol=ATOL_MATCH, rtol=0
    )


def test_random_vectors_have_energy_r_over_d_and_do_not_link() -> None:
    """The null law E[e] = r/d, and a kernel of 2048 − 64 dimensions links no random vector."""
    d, r, n_draws = 2048, 64, 400
    spec = _spectrum(d, d - r, seed=4)
    gen = torch.Generator().manual_seed(5)
    v = torch.randn(d, n_draws, generator=gen, dtype=torch.float64)
    e = link.live_energy_batch(spec, v / v.norm(dim=0))
    # e ~ Beta(r/2, (d−r)/2): variance (r/d)(1 − r/d)·2/(d + 2)
    p = r / d
    se = math.sqrt(p * (1 - p) * 2 / (d + 2) / n_draws)
    assert abs(float(e.mean()) - p) < MEAN_SIGMAS * se
    # the old rule's projection for such vectors sits near √(1 − r/d) ≈ 0.984 and crosses
    # MATCH_MIN for some; the new rule links none (threshold NULL_FRACTION·r/d, far in the tail)
    assert bool((e > link_energy_max(spec)).all())


def test_barely_excited_vector_links_only_when_the_kernel_is_small() -> None:
    e = 0.01  # ‖P_ker v‖ = 0.995 ≥ MATCH_MIN: the old rule linked it at any kernel size
    wide = _spectrum(1024, 1024 - 32, seed=6)  # r/d = 1/32: threshold 0.04/32 = 0.00125
    small = _spectrum(64, 8, seed=7)  # r/d = 7/8: the old threshold 1 − 0.99² = 0.0199
    for spec, linked in ((wide, False), (small, True)):
        v = _with_energy(spec, e, seed=8)
        assert float(link.live_energy(spec, v)) == pytest.approx(e, abs=ATOL_ENERGY)
        assert (link.live_energy(spec, v) <= link_energy_max(spec)) is linked
        assert (float(link.match(spec, v)) >= MATCH_MIN) is True  # the old rule, for contrast
    for spec in (wide, small):  # an exactly dead unit links at any kernel size
        v = _with_energy(spec, 0.0, seed=9)
        assert link.live_energy(spec, v) <= EXACT_DEAD_ENERGY <= link_energy_max(spec)


@pytest.mark.parametrize("reference", [False, True])
def test_planted_dead_unit_in_a_wide_layer_still_links(monkeypatch, reference: bool) -> None:
    """Hidden width 96 read on 8 samples (A-kernel 89 of 97): only the dead unit's chain is found.

    The old rule (``‖P_ker v‖ ≥ MATCH_MIN`` alone) also linked the lifts of barely excited units
    (out-of-kernel energy ``0.07–0.25 · r/d``) and proposed ``MAX_CHAINS`` chains here.
    """
    p = planted_mlp(d_in=40, hidden=96, d_out=3, n=8, seed=7, categorical=True)
    monkeypatch.setattr(lin, "REFERENCE", reference)
    model = p.model.double()
    factors = kfac_factors(model, p.data, p.family)
    ctx = DetectionContext(
        model=model,
        params={k: v.detach() for k, v in model.named_parameters()},
        factors=factors,
        graph=trace_graph(model, p.data[:1]),
        family=p.family,
        data=p.data,
    )
    cands = [c for name, mod in model.named_modules() for c in _propose(name, mod, ctx)]
    chains = [c for c in cands if c.detector == "duality"]
    assert len(chains) == 1 and chains[0].layers == ("0", "2")
    j = p.dead["0"]
    w0 = chains[0].u["0.weight"]
    assert float(w0[j].norm()) == pytest.approx(float(w0.norm()), abs=ATOL_EXACT)


def _propose(name, mod, ctx):
    dets = [d for d in default_registry().for_module(mod) if isinstance(d, lin.LinearDetector)]
    return [c for d in dets for c in d.propose(name, mod, ctx)]


def _candidate(u: dict[str, torch.Tensor]) -> Candidate:
    norm = math.sqrt(sum(float((v**2).sum()) for v in u.values()))
    return Candidate(layers=("x",), detector="test", u={k: v / norm for k, v in u.items()})


def test_overlap_equals_reference_over_partly_shared_keys() -> None:
    gen = torch.Generator().manual_seed(10)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    a = _candidate({"l0.weight": rnd(7, 5), "l0.bias": rnd(7), "l2.weight": rnd(3, 7)})
    b = _candidate({"l0.weight": rnd(7, 5), "l2.weight": rnd(3, 7), "l2.bias": rnd(3)})
    c = _candidate({"l4.weight": rnd(2, 2)})
    for x, y in ((a, b), (b, a), (a, a), (a, c)):
        assert x.overlap(y) == pytest.approx(x.overlap_reference(y), abs=ATOL_EXACT)
    assert a.overlap(a) == pytest.approx(1.0, abs=ATOL_EXACT)
    assert a.overlap(c) == 0.0


def test_overlap_rejects_mismatched_shapes() -> None:
    a = _candidate({"w": torch.ones(2, 3, dtype=torch.float64)})
    b = _candidate({"w": torch.ones(3, 2, dtype=torch.float64)})
    with pytest.raises(ValueError, match=r"tensor 'w' has shape \(2, 3\).*\(3, 2\)"):
        a.overlap(b)


@pytest.mark.parametrize(("n", "seed", "n_glu"), [(8, 1, 1), (8, 2, 1), (64, 0, 1)])
def test_glu_detector_applies_the_link_rule_on_a_wide_hidden_layer(
    n, seed, n_glu, dead_swiglu
) -> None:
    """A planted dead hidden dimension (gate and up rows, down column zero) of a SwiGLU whose
    hidden width 128 exceeds the probe set: the GLU detector proposes it, and with 8 samples
    nothing else (the fixed ``‖P_ker v‖ ≥ MATCH_MIN`` test proposed 5–6 candidates here, the
    hidden directions the 8 samples barely excite)."""
    from neuromanifold.singular.detectors.glu import GLUDetector
    from neuromanifold.singular.detectors.registry import DetectorRegistry

    model = dead_swiglu(8, 128, 2, seed=seed)  # hidden wider than the probe sets
    x = torch.randn(n, 8, dtype=torch.float64)
    reading = read(
        model, x, Gaussian(), detectors=DetectorRegistry([GLUDetector()]), progress=False
    )
    glu = [d for d in reading.directions if d.detector == "glu-dead-dimension"]
    assert len(glu) == n_glu
    assert glu[0].klass == "genuine_singularity" and glu[0].k == 3


@pytest.mark.parametrize(
    "consumer",
    [
        lambda bias: torch.nn.Linear(5, 3, bias=bias),
        lambda bias: torch.nn.Conv1d(5, 3, 3, bias=bias),
        lambda bias: torch.nn.Conv2d(5, 3, (2, 3), bias=bias),
    ],
    ids=["linear", "conv1d", "conv2d"],
)
@pytest.mark.parametrize("bias", [True, False])
def test_input_lift_batch_equals_input_lift_column_by_column(consumer, bias: bool) -> None:
    """The batched lift (kron over taps as repeat_interleave) against the one-vector lift."""
    module = consumer(bias).double()
    gs = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    batch = link.input_lift_batch(module, gs)
    single = torch.stack([link.input_lift(module, gs[:, i]) for i in range(4)], 1)
    taps = module.weight[0, 0].numel()
    assert batch.shape == (5 * taps + bias, 4)
    torch.testing.assert_close(batch, single, atol=ATOL_LIFT, rtol=0)
    # wrong channel count: both decline
    assert (
        link.input_lift_batch(module, gs[:4]) is None and link.input_lift(module, gs[:4, 0]) is None
    )
