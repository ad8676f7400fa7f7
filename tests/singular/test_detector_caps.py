"""Caps on the linear detector's candidates: keyword options and the truncation record.

A cap that cuts candidates of one kind at a block marks every kept candidate of that kind with
``info["truncated"] = {"cap", "found", "kept"}`` (it reaches the read's `DirectionRecord`); joint
modes follow the near-kernel rule on the products ``γ_i α_j``.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.report import reading_markdown
from neuromanifold.singular.detectors import (
    DetectionContext,
    DetectorRegistry,
    LinearDetector,
    default_registry,
)
from neuromanifold.singular.detectors.base import normalise
from neuromanifold.singular.detectors.linear import MAX_CHAINS, MAX_JOINT, TAU_JOINT, lift
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.near_kernel import near_kernel, near_kernel_reference
from neuromanifold.singular.detectors.one_sided import (
    MAX_ONE_SIDED,
)
from neuromanifold.singular.detectors.rescale_detectors import ReLURescaleDetector
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

ATOL_EXACT = 1e-12
# eigenvectors of the test factors carry ε·λ_max/gap (relative gaps ≥ 1e-3 here)
ATOL_VECS = 1e-9
N_DEAD = 6


def _context(model: nn.Module, x: torch.Tensor, family) -> DetectionContext:
    return DetectionContext.from_model(model, x, family)


def _six_dead_units():
    """GELU MLP 5→16→3 with exactly ``N_DEAD`` dead hidden units (zero in- and out-weights):
    the planted one and the first others."""
    p = planted_mlp(d_in=5, hidden=16, d_out=3, seed=0)
    dead = sorted({p.dead["0"], *[j for j in range(16) if j != p.dead["0"]][: N_DEAD - 1]})
    with torch.no_grad():
        for j in dead:
            p.model[0].weight[j] = 0.0
            p.model[0].bias[j] = 0.0
            p.model[2].weight[:, j] = 0.0
    return p, dead


def _dead_unit_of(c) -> int:
    rows = c.u["0.weight"].norm(dim=1)
    return int(torch.argmax(rows))


def test_chain_cap_records_the_truncation_and_a_raised_cap_reads_every_dead_unit() -> None:
    p, dead = _six_dead_units()
    ctx = _context(p.model, p.data, p.family)
    cut = [c for c in LinearDetector().propose("0", p.model[0], ctx) if c.detector == "duality"]
    assert len(cut) == MAX_CHAINS < N_DEAD
    want = {"cap": MAX_CHAINS, "found": N_DEAD, "kept": MAX_CHAINS}
    assert all(c.info["truncated"] == want for c in cut)
    full = LinearDetector(max_chains=8).propose("0", p.model[0], ctx)
    chains = [c for c in full if c.detector == "duality"]
    assert len(chains) == N_DEAD
    assert all("truncated" not in c.info for c in full)
    # each chain moves one dead unit's row of W1 (and nothing else of W1)
    assert sorted(_dead_unit_of(c) for c in chains) == dead
    for c in chains:
        j = _dead_unit_of(c)
        rows = c.u["0.weight"].norm(dim=1)
        assert float(rows.norm() - rows[j]) < ATOL_VECS


def test_the_truncation_record_reaches_the_reading_and_its_json() -> None:
    p, _ = _six_dead_units()
    grid = torch.logspace(-3, -1, 7, dtype=torch.float64)
    reading = read(p.model, p.data, p.family, grid=grid, progress=False, per_layer=False)
    chains = [d for d in reading.directions if d.detector == "duality"]
    assert len(chains) == MAX_CHAINS
    want = {"cap": MAX_CHAINS, "found": N_DEAD, "kept": MAX_CHAINS}
    assert all(d.info["truncated"] == want for d in chains)
    assert json.loads(json.dumps(chains[0].to_dict()))["info"]["truncated"] == want
    # the reading's meta lists the cut once per block and kind, from the proposals themselves:
    # the same when max_directions reads only one of the four chains
    entry = {"layers": ["0", "2"], "detector": "duality", **want}
    assert entry in reading.meta["truncated"]
    cut_short = read(
        p.model, p.data, p.family, grid=grid, progress=False, per_layer=False, max_directions=1
    )
    assert entry in cut_short.meta["truncated"]
    assert cut_short.meta["truncated"] == reading.meta["truncated"]
    assert "found 6 directions and kept 4 (cap 4)" in reading_markdown(reading)
    reg = DetectorRegistry(
        [
            LinearDetector(max_chains=8) if isinstance(d, LinearDetector) else d
            for d in default_registry()
        ]
    )
    full = read(
        p.model, p.data, p.family, detectors=reg, grid=grid, progress=False, per_layer=False
    )
    chains = [d for d in full.directions if d.detector == "duality"]
    assert len(chains) == N_DEAD
    assert all("truncated" not in d.info for d in full.directions)
    assert not any(t["detector"] == "duality" for t in full.meta["truncated"])
    assert all(d.k == 2 and d.klass == "genuine_singularity" for d in chains)


def _injected(alpha: list[float], gamma: list[float], seed: int):
    """A one-Linear model whose block spectrum is replaced by ``alpha``, ``gamma`` (ascending)
    with random orthonormal eigenvectors."""
    gen = torch.Generator().manual_seed(seed)
    n_a, n_g = len(alpha), len(gamma)
    model = nn.Sequential(nn.Linear(n_a - 1, n_g)).double()
    x = torch.randn(16, n_a - 1, generator=gen, dtype=torch.float64)
    ctx = _context(model, x, Gaussian(sigma=1.0))
    a_vecs = torch.linalg.qr(torch.randn(n_a, n_a, generator=gen, dtype=torch.float64))[0]
    g_vecs = torch.linalg.qr(torch.randn(n_g, n_g, generator=gen, dtype=torch.float64))[0]
    al = torch.tensor(alpha, dtype=torch.float64)
    ga = torch.tensor(gamma, dtype=torch.float64)
    spec = BlockSpectrum(
        alpha=al,
        a_vecs=a_vecs,
        gamma=ga,
        g_vecs=g_vecs,
        ker_a=near_kernel(al, 1e-3),
        ker_g=near_kernel(ga, 1e-3),
    )
    ctx.cache["spectrum"] = {"0": spec}
    return model, ctx, spec


# products/max: 2.5e-5 and 3e-5 (1.2× apart) below τ = 1e-4, a decade under the next (2.5e-3)
ALPHA = [5e-3, 6e-3, 0.5, 1.0]
GAMMA = [5e-3, 1.0]


def _joint_reference(spec: BlockSpectrum) -> list[tuple[int, int, float]]:
    """Brute force: every product ``γ_i α_j``, the shrinking near-kernel reference over them."""
    pairs = [
        (i, j, float(spec.gamma[i] * spec.alpha[j]))
        for i in range(spec.gamma.numel())
        for j in range(spec.alpha.numel())
    ]
    kept = near_kernel_reference(torch.tensor([v for _, _, v in pairs]), TAU_JOINT)
    top = float(spec.gamma[-1] * spec.alpha[-1])
    return [(pairs[k][0], pairs[k][1], pairs[k][2] / top) for k in kept]


def test_every_sub_tau_joint_mode_is_proposed() -> None:
    model, ctx, spec = _injected(ALPHA, GAMMA, seed=0)
    assert spec.ker_a == [] and spec.ker_g == []
    want = _joint_reference(spec)
    assert [(i, j) for i, j, _ in want] == [(0, 0), (0, 1)]
    joint = [c for c in LinearDetector().propose("0", model[0], ctx) if c.detector == "kfac-joint"]
    assert len(joint) == len(want) <= MAX_JOINT
    for c, (i, j, ratio) in zip(joint, want, strict=True):
        assert (c.info["gamma_index"], c.info["alpha_index"]) == (i, j)
        assert c.ratio == pytest.approx(ratio, rel=ATOL_EXACT, abs=0)
        u = normalise(lift("0", model[0], spec.g_vecs[:, i], spec.a_vecs[:, j]))
        for k in u:
            torch.testing.assert_close(c.u[k], u[k], atol=ATOL_EXACT, rtol=0)
        assert "truncated" not in c.info
    one = [
        c
        for c in LinearDetector(max_joint=1).propose("0", model[0], ctx)
        if c.detector == "kfac-joint"
    ]
    assert len(one) == 1 and one[0].info["truncated"] == {"cap": 1, "found": 2, "kept": 1}


def test_no_joint_mode_without_a_gap_or_beside_a_factor_kernel() -> None:
    # products/max 5e-5 and 8e-5 below τ, then 6e-4: no decade gap anywhere, nothing is kept
    model, ctx, spec = _injected([1e-2, 1.6e-2, 1.2e-1, 1.0], [5e-3, 1.0], seed=1)
    prods = torch.outer(spec.gamma, spec.alpha).reshape(-1)
    assert int((prods < TAU_JOINT).sum()) == 2 and spec.ker_a == spec.ker_g == []
    assert near_kernel(prods, TAU_JOINT) == []
    assert not [
        c for c in LinearDetector().propose("0", model[0], ctx) if c.detector == "kfac-joint"
    ]
    # a G-kernel: the one-sided kfac-G modes cover the small products, no joint mode
    model, ctx, spec = _injected(ALPHA, [1e-6, 1.0], seed=2)
    assert spec.ker_g == [0]
    kinds = [c.detector for c in LinearDetector().propose("0", model[0], ctx)]
    assert "kfac-joint" not in kinds and "kfac-G" in kinds


def test_one_sided_cap_marks_kfac_modes_and_a_raised_cap_lists_them_all() -> None:
    """A LayerNorm between two Linears: wide A-kernel of the consumer and G-kernel of the
    producer (N = 64 probes, width 16), more than `MAX_ONE_SIDED` each."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.LayerNorm(16), nn.Linear(16, 3)).double()
    x = torch.randn(64, 4, dtype=torch.float64)
    ctx = _context(net, x, Gaussian(sigma=1.0))
    for name, kind in (("2", "kfac-A"), ("0", "kfac-G")):
        mod = net.get_submodule(name)
        wide = [c for c in LinearDetector(max_one_sided=64).propose(name, mod, ctx)]
        found = sum(c.detector == kind for c in wide)
        assert found > MAX_ONE_SIDED and all("truncated" not in c.info for c in wide)
        cut = [c for c in LinearDetector().propose(name, mod, ctx) if c.detector == kind]
        assert len(cut) == MAX_ONE_SIDED
        want = {"cap": MAX_ONE_SIDED, "found": found, "kept": MAX_ONE_SIDED}
        assert all(c.info["truncated"] == want for c in cut)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_error_caps_must_be_positive_ints(bad) -> None:
    for kw in ("max_chains", "max_one_sided", "max_joint"):
        with pytest.raises(ValueError, match=rf"{kw} must be an int >= 1; got {bad!r}"):
            LinearDetector(**{kw: bad})
    if bad is not None:  # ``max_units=None`` is the entry budget
        with pytest.raises(ValueError, match=rf"max_units must be an int >= 1; got {bad!r}"):
            ReLURescaleDetector(max_units=bad)
