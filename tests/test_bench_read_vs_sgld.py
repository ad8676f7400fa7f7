"""Checks of benchmarks/read_vs_sgld.py that need no sampler run: the read it times, assembled
with the architecture's dimensions, gives the closed form with and without the per-layer
diagnostic; its two columns (read + architecture dims, the read alone) are the assemblies they
are documented to be; its pass count is the documented sum; and the settling/pass helpers shared
by both samplers agree with brute-force versions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from neuromanifold.singular.assembly import assemble_from_reading
from neuromanifold.singular.closed_forms import rrr
from neuromanifold.singular.llc_convergence import (
    running_llc_reference,
    settling_point_reference,
)
from neuromanifold.singular.read import read

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "read_vs_sgld.py"

#: passes of one direction's sweep: the default 32-point grid + the floor's random direction.
SWEEP_PASSES = 33
#: structure passes of a read (output check + graph trace).
STRUCTURE_PASSES = 2
#: the probe-rank count's passes (one forward and one backward over the probe set).
PROBE_RANK_PASSES = 2
#: running LLC of a constant trace vs λ, float64 (measured 2.2e-16 at the end, 1.3e-15 at worst).
RTOL_RUNNING_LLC = 1e-12
#: read rows checked here (fast; the L4 chain and the re-read rows are left to the benchmark).
ROWS = ("rrr 3-2-3 r1", "rrr 5-3-4 r2", "dln L3 w4", "node relu", "node relu2")


def _rows(bench):
    return {name: row for name, *row in bench.benchmark_rows(0, lambda n: n in ROWS)}


def test_read_without_per_layer_assembles_the_same_closed_form(bench, monkeypatch):
    rows = _rows(bench)
    assert sorted(rows) == sorted(ROWS)
    fast = {name: row[-1]() for name, row in rows.items()}

    def read_with_per_layer(*args, **kwargs):
        return read(*args, **{**kwargs, "per_layer": True})

    monkeypatch.setattr(bench, "read", read_with_per_layer)
    full = {name: row[-1]() for name, row in rows.items()}
    for name, (lam_cf, *_rest) in rows.items():
        a, b = fast[name], full[name]
        assert (a.lam_arch, a.m_arch, a.ks) == (b.lam_arch, b.m_arch, b.ks), name
        assert (a.lam_read, a.m_read) == (b.lam_read, b.m_read), name
        assert a.lam_arch == lam_cf, name
        assert a.passes <= b.passes, name
        if name.startswith("node"):
            # no architecture dims passed: both columns are the same assembly of the read
            assert (a.lam_read, a.m_read) == (a.lam_arch, a.m_arch), name
        else:
            # the read alone leaves out the live part r(M + N − r) / 2: it is not λ
            assert a.lam_read < lam_cf, name
    # the per-layer rates cost one pass per t-value of each multi-layer chain direction
    assert full["dln L3 w4"].passes - fast["dln L3 w4"].passes == SWEEP_PASSES - 1


def test_read_columns_are_the_documented_assemblies(bench):
    # rrr 3-2-3 r1: λ_rd+arch adds the regular dims r(M + N − r) of the end-to-end rank and the
    # dead unit's component dims (M − r, N − r); λ_rd is assemble_from_reading on the read alone
    M, H, N, r = 3, 2, 3, 1
    model = bench.rrr_model(M, H, N, r, seed=0)
    probe = torch.randn(
        bench.N_PROBE, M, generator=torch.Generator().manual_seed(7), dtype=torch.float64
    )
    family = bench.Gaussian(sigma=1.0)
    out = bench.read_row(model, probe, family, bench._rrr_dims)
    reading = read(model, probe, family, progress=False, per_layer=False)
    rank = int(torch.linalg.matrix_rank(model[1].weight @ model[0].weight).item())
    assert rank == r == bench.numerical_rank(model)
    genuine = [i for i, d in enumerate(reading.directions) if d.klass == "genuine_singularity"]
    assert out.ks == tuple(reading.directions[i].k for i in genuine)
    with_arch = assemble_from_reading(
        reading, regular_dims=r * (M + N - r), component_dims={i: (M - r, N - r) for i in genuine}
    )
    alone = assemble_from_reading(reading)
    assert (out.lam_arch, out.m_arch) == (with_arch.lam, with_arch.m)
    assert (out.lam_read, out.m_read) == (alone.lam, alone.m)
    cf = rrr(M, H, N, r)
    assert (out.lam_arch, out.m_arch) == (cf.lam, cf.m)
    assert out.lam_read != cf.lam


def test_read_passes_are_the_documented_sum(bench):
    model, _x, _y, _read_fn = _rows(bench)["rrr 3-2-3 r1"][1:]
    probe = torch.randn(
        bench.N_PROBE, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64
    )
    reading = read(model, probe, bench.Gaussian(sigma=1.0), progress=False, per_layer=False)
    n_out = model[-1].weight.shape[0]
    re_reads = sum("unsnapped" in d.info or "unprojected" in d.info for d in reading.directions)
    sweeps = SWEEP_PASSES * (len(reading.directions) + re_reads)
    # a genuine read is also evaluated at the mirrored t of its fitted window (one_sided_check)
    mirror = sum(
        sum(d.window[0] <= t <= d.window[1] for t in d.sweep["t"])
        for d in reading.directions
        if d.klass == "genuine_singularity"
    )
    assert mirror > 0  # the rank-1 RRR at r = 1 has genuine records
    expected = STRUCTURE_PASSES + PROBE_RANK_PASSES + (1 + n_out) + sweeps + mirror
    total = reading.meta["n_forward_passes"] + reading.meta["n_backward_passes"]
    assert total == expected
    assert bench.read_row(model, probe, bench.Gaussian(sigma=1.0), bench._rrr_dims).passes == total


@pytest.mark.parametrize("read_passes", [1, 39, 172, 1000])
def test_long_draws_puts_the_deadline_at_125x_the_read(bench, read_passes):
    d = bench.long_draws(read_passes, 4000)
    assert d % 2 == 0 and d >= 4000
    assert bench.LONG_CHAINS * d // 2 >= bench.DEADLINE_RATIO * read_passes
    assert d == 4000 or bench.LONG_CHAINS * (d // 2 - 1) < bench.DEADLINE_RATIO * read_passes


def test_pass_counts_of_both_samplers(bench):
    # library: ∇U at w* + one per draw, per chain, + L_n(w*); devinterp: one per draw + L_n(w*)
    assert bench.library_passes(4, 10) == 4 * 11 + 1
    assert bench.devinterp_passes(4, 10) == 4 * 10 + 4


def _brute_settle(trace, init, nbeta, lam, by):
    est = running_llc_reference(trace, init, nbeta)
    t = settling_point_reference(est, lam, rtol=0.10)
    return None if t is None or t > by else t


@pytest.mark.parametrize("seed", range(6))
def test_settle_steps_and_short_rule_match_brute_force(bench, seed):
    g = torch.Generator().manual_seed(seed)
    nbeta, lam, init = 10.0, 2.0, 1.0
    draws = 2400
    # approaches init + lam/nbeta with decaying noise: settles at a seed-dependent point
    decay = torch.exp(-torch.arange(draws, dtype=torch.float64) / (200.0 * (seed + 1)))
    trace = init + lam / nbeta * (1.0 + 0.6 * decay) + 0.05 * torch.randn(4, draws, generator=g)
    for by in (draws // 2, draws):
        got = bench.settle_steps(trace, init, nbeta, lam, by)
        assert got == _brute_settle(trace, init, nbeta, lam, by)
    head = trace[: bench.DEFAULT_CHAINS, : bench.DEFAULT_DRAWS]
    assert bench.short_rule(trace, init, nbeta, lam) == _brute_settle(
        head, init, nbeta, lam, bench.DEFAULT_DRAWS // 2
    )


def test_settle_steps_rejects_a_late_settling(bench):
    nbeta, lam, init = 10.0, 2.0, 1.0
    trace = torch.full((4, 200), init + lam / nbeta, dtype=torch.float64)
    trace[:, :60] = init + 1.25 * lam / nbeta  # 25 % high first: the estimate enters the band late
    late = bench.settle_steps(trace, init, nbeta, lam, 200)
    assert late is not None and 50 < late == _brute_settle(trace, init, nbeta, lam, 200)
    assert bench.settle_steps(trace, init, nbeta, lam, 50) is None
    ok = torch.full((4, 100), init + lam / nbeta, dtype=torch.float64)
    assert bench.settle_steps(ok, init, nbeta, lam, 50) == 1
    assert math.isclose(
        float(running_llc_reference(ok, init, nbeta)[-1]), lam, rel_tol=RTOL_RUNNING_LLC
    )
