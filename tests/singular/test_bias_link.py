"""Bias-compensated duality links: a dead unit whose output is a nonzero constant.

s17 user trial AD #1: a unit with zero incoming weights, bias ``b`` and zero outgoing weights
outputs ``c = σ(b)`` on every sample. Its consumer's ``A`` has the kernel vector ``(e_j, −c)``;
the plain lift ``(e_j, 0)`` linked only for tiny ``c`` and its chain, without the consumer's bias
shift ``−c·g``, read live (``b = 0.1``) or not at all (``b = 1``: two flat one-sided records).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import neuromanifold.singular.detectors.linear as lin
from neuromanifold import Gaussian, read
from neuromanifold.singular.detectors import DetectionContext, default_registry, trace_graph
from neuromanifold.singular.detectors.bias_link import (
    BIAS_LIVE_MIN,
    SHIFT_ROUNDOFF,
    compensate,
    compensated,
    compensated_reference,
)
from neuromanifold.singular.detectors.link import BlockSpectrum, live_energy, live_energy_batch
from neuromanifold.singular.factors import kfac_factors

# projectors and energies of unit vectors from orthonormal d × d bases, d ≤ 12: rounding ~ d·ε
ATOL_PROJ = 1e-12
# the chain's consumer block against (e_j, −c): an exact kernel vector of A, found through
# eigh of a 7 × 7 factor whose eigenvalue gap is O(1): rounding ~1e-14 measured
ATOL_BLOCK = 1e-10

DEAD = 2


def _spec(d: int, k: int, seed: int) -> BlockSpectrum:
    """A random A with an exact ``k``-dimensional kernel (eigenvalues 0, then 1 … d − k)."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    alpha = torch.cat([torch.zeros(k), torch.arange(1, d - k + 1)]).double()
    return BlockSpectrum(alpha, q, alpha, q, list(range(k)), list(range(k)))


def _projector(spec: BlockSpectrum) -> torch.Tensor:
    ker = spec.ker_a_basis()
    return ker @ ker.T


@pytest.mark.parametrize(("d", "k"), [(5, 1), (8, 3), (12, 9), (6, 0)])
def test_compensated_spectrum_equals_its_oracle(d: int, k: int) -> None:
    spec = _spec(d, k, seed=d + k)
    fast, ref = compensated(spec), compensated_reference(spec)
    assert fast.spec.ker_a == ref.spec.ker_a == list(range(k + 1))
    torch.testing.assert_close(_projector(fast.spec), _projector(ref.spec), atol=ATOL_PROJ, rtol=0)
    torch.testing.assert_close(fast.shift, ref.shift, atol=ATOL_PROJ, rtol=0)
    # both bases are orthonormal and their quotients sum to trace A over kernel and complement
    eye = torch.eye(d, dtype=torch.float64)
    for comp in (fast, ref):
        vecs = comp.spec.a_vecs
        torch.testing.assert_close(vecs.T @ vecs, eye, atol=ATOL_PROJ, rtol=0)
        torch.testing.assert_close(comp.spec.alpha.sum(), spec.alpha.sum(), atol=1e-10, rtol=0)
    kf = fast.spec.alpha[: k + 1].sum()
    kr = ref.spec.alpha[: k + 1].sum()
    torch.testing.assert_close(kf, kr, atol=1e-10, rtol=0)
    v = torch.randn(d, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    v = v / v.norm(dim=0)
    batch = live_energy_batch(fast.spec, v)
    one = torch.tensor([live_energy(ref.spec, v[:, i]) for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(batch, one, atol=ATOL_PROJ, rtol=0)


def test_the_shift_minimises_the_live_energy_and_the_link_energy_is_that_minimum() -> None:
    """``β = qᵀv`` against a least-squares solve of ``min_β ‖P (v − β e_b)‖``."""
    spec = _spec(7, 2, seed=3)
    comp = compensated(spec)
    proj = torch.eye(7, dtype=torch.float64) - _projector(spec)  # live projector P
    e_b = torch.zeros(7, dtype=torch.float64)
    e_b[-1] = 1.0
    gen = torch.Generator().manual_seed(4)
    for _ in range(5):
        v = torch.randn(7, generator=gen, dtype=torch.float64)
        v = v / v.norm()
        beta = torch.linalg.lstsq((proj @ e_b)[:, None], proj @ v).solution[0]
        torch.testing.assert_close(comp.shift @ v, beta, atol=ATOL_PROJ, rtol=0)
        w = compensate(v[:, None], comp.shift)[:, 0]
        torch.testing.assert_close(w[:-1], v[:-1], atol=0, rtol=0)
        best = (proj @ w).pow(2).sum()
        torch.testing.assert_close(
            live_energy_batch(comp.spec, v[:, None])[0], best, atol=ATOL_PROJ, rtol=0
        )


def test_no_compensation_when_the_bias_coordinate_lies_in_the_kernel() -> None:
    alpha = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    vecs = torch.eye(3, dtype=torch.float64)[:, [2, 0, 1]]  # kernel = e_2, the bias coordinate
    spec = BlockSpectrum(alpha, vecs, alpha, vecs, [0], [0])
    assert float(spec.live_a_basis()[-1].pow(2).sum()) <= BIAS_LIVE_MIN
    assert compensated(spec) is None and compensated_reference(spec) is None


def _dead_constant_mlp(act: type[nn.Module], b: float) -> nn.Sequential:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 6), act(), nn.Linear(6, 3)).double()
    with torch.no_grad():
        m[0].weight[DEAD] = 0.0
        m[0].bias[DEAD] = b
        m[2].weight[:, DEAD] = 0.0
    return m.eval()


def _x() -> torch.Tensor:
    return torch.randn(200, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("act", [nn.ReLU, nn.Tanh])
@pytest.mark.parametrize("b", [0.1, 1.0])
def test_a_dead_unit_of_constant_output_reads_as_its_order_two_chain(
    monkeypatch, reference: bool, act: type[nn.Module], b: float
) -> None:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    m, x = _dead_constant_mlp(act, b), _x()
    r = read(m, x, Gaussian(), progress=False)
    chains = [d for d in r.directions if d.detector == "duality"]
    assert [(d.layers, d.klass, d.k) for d in chains] == [(("0", "2"), "genuine_singularity", 2)]
    # the consumer's (e_j, −c) kernel vector is explained by the chain, not proposed one-sided
    assert not [d for d in r.directions if d.detector in ("kfac-A", "kfac-G")]


@pytest.mark.parametrize("reference", [False, True])
def test_the_chain_moves_the_consumer_bias_by_minus_c_times_its_column(
    monkeypatch, reference: bool
) -> None:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    b = 1.0
    m, x = _dead_constant_mlp(nn.Tanh, b), _x()
    c = math.tanh(b)
    ctx = DetectionContext(
        model=m,
        params={k: v.detach() for k, v in m.named_parameters()},
        factors=kfac_factors(m, x, Gaussian()),
        graph=trace_graph(m, x[:1]),
        family=Gaussian(),
        data=x,
    )
    det = next(d for d in default_registry().for_module(m[0]) if isinstance(d, lin.LinearDetector))
    (chain,) = [cand for cand in det.propose("0", m[0], ctx) if cand.detector == "duality"]
    col = chain.u["2.weight"][:, DEAD]
    assert float(col.norm()) > 0.1
    torch.testing.assert_close(chain.u["2.bias"], -c * col, atol=ATOL_BLOCK, rtol=0)
    others = chain.u["2.weight"].clone()
    others[:, DEAD] = 0.0
    assert float(others.norm()) <= ATOL_BLOCK


def test_a_constant_conv_channel_links_through_its_uniform_taps() -> None:
    """Conv consumer without padding: every patch sees the constant on all 9 taps."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(2, 4, 3), nn.Conv2d(4, 3, 3)
            self.fc = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.tanh(self.c2(torch.tanh(self.c1(x)))).mean((2, 3)))

    torch.manual_seed(0)
    m = Net().double().eval()
    with torch.no_grad():
        m.c1.weight[1] = 0.0
        m.c1.bias[1] = 0.5
        m.c2.weight[:, 1] = 0.0
    x = torch.randn(60, 2, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    r = read(m, x, Gaussian(), progress=False)
    got = [(d.layers, d.detector, d.klass, d.k) for d in r.directions]
    assert got == [(("c1", "c2"), "duality", "genuine_singularity", 2)]


def test_a_unit_of_exactly_zero_output_gets_no_bias_shift() -> None:
    """The planted dead unit (bias 0) has ``qᵀv`` of rounding size (~1e-17): set to 0
    (`SHIFT_ROUNDOFF`), so its chain has no bias entry (a 2e-17 entry once added a first-order
    cross term that made chunked and one-pass sweeps differ by 1e-12 at the smallest t)."""
    from neuromanifold.cells.planted import planted_mlp

    net = planted_mlp(activation="relu", n=128, seed=3)
    m, x = net.model, net.data
    ctx = DetectionContext(
        model=m,
        params={k: v.detach() for k, v in m.named_parameters()},
        factors=kfac_factors(m, x, net.family),
        graph=trace_graph(m, x[:1]),
        family=net.family,
        data=x,
    )
    det = next(d for d in default_registry().for_module(m[0]) if isinstance(d, lin.LinearDetector))
    (chain,) = [cand for cand in det.propose("0", m[0], ctx) if cand.detector == "duality"]
    assert bool((chain.u["2.bias"] == 0).all())
    v = torch.zeros(7, 1, dtype=torch.float64)
    v[0, 0] = 1.0
    shift = torch.full((7,), 0.5 * SHIFT_ROUNDOFF, dtype=torch.float64)
    assert float(compensate(v, shift)[-1, 0]) == 0.0
    shift = torch.full((7,), 2 * SHIFT_ROUNDOFF, dtype=torch.float64)
    assert float(compensate(v, shift)[-1, 0]) == -2 * SHIFT_ROUNDOFF
