"""Rank-aware factor spectra and the batched linear-detector paths against their oracles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import neuromanifold.singular.detectors.linear as lin
import neuromanifold.singular.detectors.link as link
import neuromanifold.singular.factor_spectrum as spectrum_mod
from neuromanifold.cells.planted import planted_mlp
from neuromanifold.singular.detectors import DetectionContext, default_registry
from neuromanifold.singular.detectors.link import BlockSpectrum
from neuromanifold.singular.detectors.near_kernel import near_kernel
from neuromanifold.singular.detectors.one_sided import (
    MAX_ONE_SIDED,
    one_sided_a_modes,
    one_sided_a_modes_reference,
)
from neuromanifold.singular.factor_spectrum import factor_spectrum, factor_spectrum_reference
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

# eigenvalues from a dense eigh carry an absolute error of order ε·d·λ_max
RTOL_EVALS = 1e-12
# eigenvectors (and the null-space completion built from them) carry ε·λ_max/gap; the test
# spectra have relative gaps ≥ 1e-3, so 1e-9 leaves a margin of about 10³ over what is seen
ATOL_VECS = 1e-9
# a sweep along directions that agree to ATOL_VECS: Fisher values agree to this, relative to the
# sweep's own largest value; a flat gauge's whole sweep sits below its rounding floor, so there the
# bound is FLOOR_FACTOR_SWEEP times that sweep's floor instead
RTOL_SWEEP = 1e-6
FLOOR_FACTOR_SWEEP = 10.0
ATOL_ORTHO = 1e-12


def _low_rank(d: int, rank: int, seed: int) -> torch.Tensor:
    """``XᵀX/rank`` with distinct eigenvalues spread over 2.8 decades.

    The smallest non-zero eigenvalue sits at ``10^-2.8 ≈ 1.6 τ_A`` of the largest, clear of the
    near-kernel threshold: at exactly ``τ_A`` (three decades) the two eigensolvers' last-digit
    differences decided whether it counted as kernel."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(rank, rank, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(d, rank, generator=gen, dtype=torch.float64))[0]
    s = torch.logspace(0, -1.4, rank, dtype=torch.float64)
    x = u @ torch.diag(s) @ v.T
    return x.T @ x / rank


@pytest.mark.parametrize(("d", "rank"), [(40, 3), (97, 8), (200, 30)])
def test_lowrank_spectrum_equals_dense_reference(d: int, rank: int) -> None:
    m = _low_rank(d, rank, seed=d)
    fast = factor_spectrum(m, rank_bound=rank)
    ref = factor_spectrum_reference(m)
    assert fast.method == "lowrank" and ref.method == "dense"
    assert fast.rank == ref.rank == rank
    top = float(ref.evals[-1])
    torch.testing.assert_close(fast.evals, ref.evals, atol=RTOL_EVALS * top, rtol=0)
    assert torch.equal(fast.evals[: d - rank], torch.zeros(d - rank, dtype=torch.float64))
    torch.testing.assert_close(fast.vecs, ref.vecs, atol=ATOL_VECS, rtol=0)
    eye = torch.eye(d, dtype=torch.float64)
    torch.testing.assert_close(fast.vecs.T @ fast.vecs, eye, atol=ATOL_ORTHO, rtol=0)
    recon = fast.vecs @ torch.diag(fast.evals) @ fast.vecs.T
    torch.testing.assert_close(recon, 0.5 * (m + m.T), atol=RTOL_EVALS * top, rtol=0)
    assert near_kernel(fast.evals, lin.TAU_A) == near_kernel(ref.evals, lin.TAU_A)
    assert near_kernel(fast.evals, lin.TAU_A) == list(range(d - rank))


def test_wrong_rank_bound_falls_back_to_dense() -> None:
    m = _low_rank(120, 30, seed=1)
    got = factor_spectrum(m, rank_bound=5)  # 15 probe columns cannot hold a rank-30 range
    assert got.method == "dense"
    torch.testing.assert_close(got.vecs, factor_spectrum_reference(m).vecs, atol=0, rtol=0)


def test_full_rank_bound_and_no_bound_use_dense() -> None:
    m = _low_rank(30, 20, seed=2)
    assert factor_spectrum(m, rank_bound=20).method == "dense"
    assert factor_spectrum(m).method == "dense"


def test_zero_factor_is_all_null_with_identity_basis() -> None:
    s = factor_spectrum(torch.zeros(7, 7, dtype=torch.float64), rank_bound=0)
    assert s.rank == 0
    assert torch.equal(s.evals, torch.zeros(7, dtype=torch.float64))
    assert torch.equal(s.vecs, torch.eye(7, dtype=torch.float64))


def test_null_basis_does_not_depend_on_the_eigensolver_basis() -> None:
    """Rotating the null eigenvectors (an equally valid eigh output) changes nothing."""
    m = _low_rank(50, 6, seed=3)
    vals, vecs = torch.linalg.eigh(m)
    gen = torch.Generator().manual_seed(4)
    rot = torch.linalg.qr(torch.randn(44, 44, generator=gen, dtype=torch.float64))[0]
    turned = torch.cat([vecs[:, :44] @ rot, -vecs[:, 44:]], 1)  # and flipped range signs
    a = spectrum_mod._canonical(vals, vecs, 50, "dense")
    b = spectrum_mod._canonical(vals, turned, 50, "dense")
    assert float((vecs[:, :44] - turned[:, :44]).abs().max()) > 0.1  # the inputs do differ
    torch.testing.assert_close(a.vecs, b.vecs, atol=ATOL_VECS, rtol=0)


def test_an_axis_orthogonal_to_the_range_is_its_own_null_vector() -> None:
    """A dead coordinate (zero row and column of the factor) is returned as the axis itself."""
    m = _low_rank(40, 5, seed=10)
    m[7] = 0.0
    m[:, 7] = 0.0
    fast = factor_spectrum(m, rank_bound=5)
    axis = torch.zeros(40, dtype=torch.float64)
    axis[7] = 1.0
    hits = [i for i in range(35) if float((fast.vecs[:, i] - axis).abs().max()) < ATOL_ORTHO]
    assert len(hits) == 1


def test_factor_rank_bounds_count_rank_one_terms() -> None:
    model = nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 3)).double()
    conv = nn.Sequential(nn.Conv1d(2, 4, 3), nn.Flatten(), nn.Linear(4 * 6, 3)).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    fac = kfac_factors(model, x, Categorical())
    assert fac["0"].a_rank_bound == 5 and fac["0"].g_rank_bound == 5 * 3
    xc = torch.randn(5, 2, 8, dtype=torch.float64)
    facc = kfac_factors(conv, xc, Categorical())
    assert facc["0"].a_rank_bound == 5 * 6 and facc["0"].g_rank_bound == 5 * 3 * 6
    for bf in list(fac.values()) + list(facc.values()):
        assert int(torch.linalg.matrix_rank(bf.A)) <= bf.a_rank_bound
        assert int(torch.linalg.matrix_rank(bf.G)) <= bf.g_rank_bound


def _synthetic_spectrum(d: int, rank: int, seed: int) -> BlockSpectrum:
    s = factor_spectrum(_low_rank(d, rank, seed), rank_bound=rank)
    g = factor_spectrum_reference(torch.eye(3, dtype=torch.float64))
    return BlockSpectrum(
        alpha=s.evals,
        a_vecs=s.vecs,
        gamma=g.evals,
        g_vecs=g.vecs,
        ker_a=near_kernel(s.evals, lin.TAU_A),
        ker_g=[],
    )


def _pairs_close(fast, ref) -> None:
    assert len(fast) == len(ref)
    for (v, r), (w, q) in zip(fast, ref, strict=True):
        assert r == pytest.approx(q, abs=RTOL_EVALS)
        torch.testing.assert_close(v, w, atol=ATOL_VECS, rtol=0)


@pytest.mark.parametrize("n_up", [0, 3, 39])
def test_one_sided_a_equals_reference_in_a_wide_kernel(n_up: int) -> None:
    """Kernel of dimension 42: the top singular cluster is degenerate (canonical vectors)."""
    spec = _synthetic_spectrum(48, 6, seed=5)
    module = nn.Linear(48, 3, bias=False).double()
    ker = spec.ker_a_basis()
    upstream = [ker[:, i] for i in range(n_up)]
    fast, n_fast = one_sided_a_modes(spec, module, upstream)
    ref, n_ref = one_sided_a_modes_reference(spec, module, upstream)
    assert n_fast == n_ref
    _pairs_close(fast, ref)


def test_one_sided_a_equals_reference_with_tilted_upstream() -> None:
    """Upstream units partly outside the kernel: distinct singular values below the cluster."""
    spec = _synthetic_spectrum(20, 12, seed=6)
    module = nn.Linear(20, 3, bias=False).double()
    ker, live = spec.ker_a_basis(), spec.live_a_basis()
    tilt = ker[:, :6] + 0.3 * live[:, :6] * torch.linspace(0.5, 1.5, 6, dtype=torch.float64)
    q = torch.linalg.qr(tilt)[0]
    upstream = [q[:, i] for i in range(6)]
    fast, n_fast = one_sided_a_modes(spec, module, upstream)
    ref, n_ref = one_sided_a_modes_reference(spec, module, upstream)
    assert len(fast) == 2 and n_fast == n_ref
    _pairs_close(fast, ref)


@pytest.mark.parametrize("n_up", [0, 3])
def test_one_sided_a_counts_and_cap_match_the_reference(n_up: int) -> None:
    """``(modes, n_found)`` fast vs brute force, at the default cap and a raised one."""
    spec = _synthetic_spectrum(24, 6, seed=4)
    module = nn.Linear(24, 3, bias=False).double()
    upstream = [spec.ker_a_basis()[:, i] for i in range(n_up)]
    n_ker = len(spec.ker_a)
    for cap in (MAX_ONE_SIDED, 5):
        fast, n_fast = one_sided_a_modes(spec, module, upstream, max_modes=cap)
        ref, n_ref = one_sided_a_modes_reference(spec, module, upstream, max_modes=cap)
        assert n_fast == n_ref == n_ker - n_up
        assert len(fast) == len(ref) == cap
        _pairs_close(fast, ref)


def _context(model: nn.Module, x: torch.Tensor) -> DetectionContext:
    return DetectionContext.from_model(model, x, Categorical())


def _detect(p, reference: bool, monkeypatch) -> tuple[DetectionContext, list]:
    monkeypatch.setattr(lin, "REFERENCE", reference)
    ctx = _context(p.model, p.data)
    cands = [
        c
        for name, mod in ctx.model.named_modules()
        for det in default_registry().for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]
    return ctx, cands


def _wide_planted():
    """A dead GELU unit in a hidden layer of width 96 read on 8 samples: rank-deficient factors."""
    return planted_mlp(d_in=40, hidden=96, d_out=3, n=8, seed=7, categorical=True)


def test_detection_on_a_wide_layer_equals_reference(monkeypatch) -> None:
    p = _wide_planted()
    ctx_f, fast = _detect(p, False, monkeypatch)
    ctx_r, ref = _detect(p, True, monkeypatch)
    methods = {n: s.methods for n, s in ctx_f.cache["spectrum"].items() if s is not None}
    assert methods["0"] == ("lowrank", "lowrank") and methods["2"][0] == "lowrank"
    assert {n: s.methods for n, s in ctx_r.cache["spectrum"].items() if s is not None} == {
        n: ("dense", "dense") for n in methods
    }
    for name in ctx_f.cache["linked"]:
        assert ctx_f.cache["linked_idx"][name] == ctx_r.cache["linked_idx"][name]
    assert [(c.detector, c.layers) for c in fast] == [(c.detector, c.layers) for c in ref]
    assert any(c.detector == "kfac-A" for c in fast) and any(c.detector == "kfac-G" for c in fast)
    for a, b in zip(fast, ref, strict=True):
        if a.ratio is None:
            assert b.ratio is None
        else:
            assert a.ratio == pytest.approx(b.ratio, abs=RTOL_EVALS)
        assert set(a.u) == set(b.u)
        for k in a.u:
            torch.testing.assert_close(a.u[k], b.u[k], atol=ATOL_VECS, rtol=0)


def test_whole_read_equals_reference_on_a_wide_layer(monkeypatch) -> None:
    p = _wide_planted()
    kw = {"max_directions": 4, "snap": False, "per_layer": False, "progress": False}
    monkeypatch.setattr(lin, "REFERENCE", False)
    fast = read(p.model, p.data, p.family, **kw)
    monkeypatch.setattr(lin, "REFERENCE", True)
    ref = read(p.model, p.data, p.family, **kw)
    assert fast.meta["n_candidates"] == ref.meta["n_candidates"]
    assert len(fast.directions) == len(ref.directions) == 4
    for a, b in zip(fast.directions, ref.directions, strict=True):
        assert (a.detector, a.layers, a.k, a.klass) == (b.detector, b.layers, b.k, b.klass)
        fa, fb = torch.tensor(a.sweep["F"]), torch.tensor(b.sweep["F"])
        atol = max(RTOL_SWEEP * float(fb.abs().max()), FLOOR_FACTOR_SWEEP * b.sweep["floor"])
        torch.testing.assert_close(fa, fb, atol=atol, rtol=0)


def test_reading_order_puts_duality_first_among_equal_ratios() -> None:
    from neuromanifold.singular.detectors.base import Candidate
    from neuromanifold.singular.read import _reading_order

    u = {"w": torch.ones(1, dtype=torch.float64)}
    cands = [
        Candidate(layers=("a",), detector="kfac-G", u=u, ratio=0.0),
        Candidate(layers=("a", "b"), detector="duality", u=u, ratio=0.0),
        Candidate(layers=("c",), detector="kfac-A", u=u, ratio=1e-9),
        Candidate(layers=("d",), detector="ce-shift", u=u, gauge="flat"),
        Candidate(layers=("e",), detector="duality", u=u, ratio=1e-5),
    ]
    got = [(c.detector, c.layers) for c in _reading_order(cands)]
    assert got == [
        ("duality", ("a", "b")),
        ("kfac-G", ("a",)),
        ("kfac-A", ("c",)),
        ("duality", ("e",)),
        ("ce-shift", ("d",)),
    ]


def test_reading_order_treats_round_off_ratios_as_equal() -> None:
    """s16 trial Y #2: a dim-16 ViT on 37 digits gave two kfac-G candidates the ratios 1.5e-36
    (fc2) and 1.7e-35 (out_proj) with the default factor batch and swapped values with batch 32
    (set by max_memory), so candidates 3 and 4 swapped and a resumed read refused its own log.
    Round-off ratios keep the proposal order; resolved ratios still sort."""
    from neuromanifold.singular.detectors.base import Candidate
    from neuromanifold.singular.read import ROUNDOFF_ORDER_RATIO, _reading_order

    u = {"w": torch.ones(1, dtype=torch.float64)}

    def order(r1: float, r2: float, r3: float = 1e-6) -> list[tuple[str, ...]]:
        cands = [
            Candidate(layers=("attn.out_proj",), detector="kfac-G", u=u, ratio=r1),
            Candidate(layers=("mlp.fc2",), detector="kfac-G", u=u, ratio=r2),
            Candidate(layers=("fc1",), detector="kfac-A", u=u, ratio=r3),
        ]
        return [c.layers for c in _reading_order(cands)]

    want = [("attn.out_proj",), ("mlp.fc2",), ("fc1",)]
    assert order(1.7e-35, 1.5e-36) == order(1.5e-36, 1.7e-35) == want
    assert order(ROUNDOFF_ORDER_RATIO, 0.0) == want
    assert order(1e-6, 1e-9, 1e-3) == [("mlp.fc2",), ("attn.out_proj",), ("fc1",)]


def test_factor_spectrum_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"m must be a square 2-D tensor \(d, d\); got \(3, 4\)"):
        factor_spectrum(torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"rank_bound must be a non-negative int or None; got -1"):
        factor_spectrum(torch.zeros(3, 3, dtype=torch.float64), rank_bound=-1)
    with pytest.raises(ValueError, match=r"rank_bound must be .* got 2\.0"):
        factor_spectrum(torch.zeros(3, 3, dtype=torch.float64), rank_bound=2.0)


def test_tap_span_of_several_units_is_their_spans_side_by_side() -> None:
    conv = nn.Conv1d(5, 2, 3).double()
    gen = torch.Generator().manual_seed(11)
    gs = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    batch = link.tap_span(conv, gs)
    single = torch.cat([link.tap_span(conv, gs[:, i]) for i in range(4)], 1)
    assert batch.shape == (5 * 3 + 1, 4 * 3)
    torch.testing.assert_close(batch, single, atol=0, rtol=0)
