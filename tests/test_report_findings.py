"""Findings vs expectation follow the records (synthetic readings, no model needed)."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from neuromanifold.demo_result import ModelRead, OptimizerRow
from neuromanifold.report.findings import (
    cell_finding,
    gauge_findings,
    node_death_findings,
    optimizer_finding,
)
from neuromanifold.report.spectra import ROUNDOFF_RATIO, block_spectra, spread
from neuromanifold.singular.reading import Reading

R2_MIN = 0.95
ATOL_LOG = 1e-12
# block_spectra of Q diag(λ) Qᵀ (random orthogonal Q): ratios to λ_max agree with λ_i/λ_max up
# to eigensolver rounding (measured ≤ 7.8e-16 absolute over 20 seeds, O(1) ratios); λ_max
# relative (measured ≤ 8.9e-16).
ATOL_RATIO = 1e-13
RTOL_MAX = 1e-13
CLEAN = [1.0, 0.5, 0.2, 1e-9, 1e-10]  # a 8.3-decade gap before a two-dim kernel
DIFFUSE = [1.0, 1e-1, 1e-2, 2e-3, 4e-4, 8e-5]  # ratio 5 per step through 1e-3


def _model(recs, name="vit-digits-scratch"):
    spectra = {
        "blocks.0.mlp.fc1": {"A": CLEAN, "G": DIFFUSE, "A_kernel": 2, "G_kernel": 0},
        "blocks.0.mlp.fc2": {"A": DIFFUSE, "G": CLEAN, "A_kernel": 0, "G_kernel": 2},
    }
    return ModelRead(
        name,
        name,
        "digits",
        "x",
        {"mlp_compressed_units": {"b0": 3}},
        Reading(tuple(recs), (), {}),
        spectra,
        False,
        0.0,
    )


def test_spread_of_clean_and_diffuse_spectra():
    c = spread(CLEAN)
    assert c["n_small"] == 2 and abs(c["max_gap"] - math.log10(0.2 / 1e-9)) < ATOL_LOG
    d = spread(DIFFUSE)
    assert d["n_small"] == 2 and abs(d["max_gap"] - math.log10(5.0)) < ATOL_LOG


def test_spread_gives_no_gap_in_decades_to_round_off_zeros():
    """s15 trial S #5: zeros were clamped to 1e-300, so [1, 0.5, 1e-20, 0] had a "280-decade"
    gap and any rank-deficient factor read as clean. Round-off zeros are counted apart; with no
    row count every zero may come from the probe size and makes no gap."""
    assert spread([1.0, 0.5, 1e-20, 0.0]) == {
        "n_small": 2,
        "n_zero": 2,
        "n_probe_zero": 2,
        "max_gap": 0.0,
    }
    mixed = spread([1.0, 0.5, 1e-7, 0.0, 0.0])  # the gap to the tiny non-zero ratio counts
    assert (mixed["n_small"], mixed["n_zero"]) == (3, 2)
    assert abs(mixed["max_gap"] - math.log10(0.5 / 1e-7)) < ATOL_LOG
    at_floor = spread([1.0, 2 * ROUNDOFF_RATIO, ROUNDOFF_RATIO])  # the floor itself is a zero
    assert at_floor["n_zero"] == 1
    assert abs(at_floor["max_gap"] - math.log10(0.5 / ROUNDOFF_RATIO)) < ATOL_LOG


def test_zeros_of_dead_units_are_a_gap_and_probe_size_zeros_are_not():
    """s15 audit U #6: two dead GELU units read on 512 samples (17 inputs of the second layer)
    give exact zero ratios after 4.3e-3; the drop to them is a gap of at least
    log10(4.3e-3 / ROUNDOFF_RATIO) decades, not 0. Zeros the row count explains are no gap."""
    from neuromanifold.singular.factors import kfac_factors
    from neuromanifold.singular.family import Categorical

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    m = m.double()
    with torch.no_grad():
        m[0].weight[:2].zero_()
        m[0].bias[:2] = -12.0  # GELU(−12) = −2e-32: the units' outputs are 0 in float64
    x = torch.randn(512, 8, dtype=torch.float64)
    s = block_spectra(kfac_factors(m, x, Categorical()))["2"]
    assert s["A_rows"] == 512 and s["A"][-2:] == [0.0, 0.0] and s["A_kernel"] == 2
    assert s["G_rows"] is None  # G's row count only bounds its rank (s15 audit V #1)
    sp = spread(s["A"], rows=s["A_rows"])
    assert (sp["n_zero"], sp["n_probe_zero"]) == (2, 0)
    assert sp["max_gap"] == pytest.approx(math.log10(s["A"][-3] / ROUNDOFF_RATIO), abs=ATOL_LOG)
    few = spread(s["A"], rows=len(s["A"]) - 2)  # had the probe set 15 rows: the zeros are its
    assert (few["n_probe_zero"], few["max_gap"] < 1.0) == (2, True)


def test_node_death_evidence_says_whether_the_probe_size_explains_the_zeros():
    """s15 audit W #1: G keeps no row count, so its zeros may, not must, come from the probe
    size; A's do when its row count leaves that many."""
    spectra = {"blocks.0.mlp.fc1": {"A": [1.0], "G": [1.0, 0.2, 0.0], "A_kernel": 0,
                                    "G_kernel": 1, "G_rows": None},
               "blocks.0.mlp.fc2": {"A": [1.0, 0.2, 0.0], "G": [1.0], "A_kernel": 1,
                                    "G_kernel": 0, "A_rows": 2}}  # fmt: skip
    mr = ModelRead("s", "s", "digits", "x", {}, Reading((), (), {}), spectra, False, 0.0)
    (f, *_) = node_death_findings(mr, r2_min=R2_MIN)
    assert "fc1 G: 1 of 3 ratios < 1e-3 (1 zero within round-off, 1 of them possibly from" in (
        f.observed
    )
    assert "fc2 A: 1 of 3 ratios < 1e-3 (1 zero within round-off, 1 of them from the" in (
        f.observed
    )


def test_optimizer_with_only_round_off_zeros_is_not_clean():
    """A near-kernel made of round-off zeros (fewer probe samples than fc2 inputs) gives no gap,
    so it cannot make an optimizer's structure "clean"."""
    from neuromanifold.demo_result import optimizer_row
    from neuromanifold.report.findings import _clean

    spectra = {"blocks.0.mlp.fc2": {"A": [1.0, 0.4, 0.0, 0.0], "A_kernel": 2}}
    name = "sweep-muon-polar-svd"
    mr = ModelRead(name, name, "digits", "x", {}, Reading((), (), {}), spectra, False, 0.0)
    row = optimizer_row(mr)
    assert (row.fc2_n_small, row.fc2_n_zero, row.fc2_kernel, row.fc2_max_gap) == (2, 2, 2, 0.0)
    assert not _clean(row)


def _sym(evals, seed):
    """``Q diag(evals) Qᵀ`` with a random orthogonal Q: a factor with known eigenvalues."""
    gen = torch.Generator().manual_seed(seed)
    n = len(evals)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q @ torch.diag(torch.tensor(evals, dtype=torch.float64)) @ q.T


def test_block_spectra_of_hand_built_factors():
    """Ratios, near-kernel sizes and maxima of factors with known eigenvalues."""
    a_ev = [0.0, 4.0, 4e-9, 2.0]  # ratios 1, 0.5, 1e-9, 0: two tiny ones a decade below the rest
    g_ev = [2e-4, 1.0, 5e-4, 2e-3]  # smooth decay through 1e-3: two small ratios, no gap
    factors = {
        "fc": SimpleNamespace(A=_sym(a_ev, 0), G=_sym(g_ev, 1)),
        "dead": SimpleNamespace(A=_sym([3.0, 1.0], 2), G=torch.zeros(2, 2, dtype=torch.float64)),
    }
    out = block_spectra(factors)
    assert list(out) == ["fc", "dead"]
    fc = out["fc"]
    assert set(fc) == {"A", "G", "A_kernel", "G_kernel", "A_max", "G_max", "A_rows", "G_rows"}
    assert fc["A_rows"] is None  # these factors do not say how many rows they summed
    np.testing.assert_allclose(fc["A"], [1.0, 0.5, 1e-9, 0.0], rtol=0, atol=ATOL_RATIO)
    np.testing.assert_allclose(fc["G"], [1.0, 2e-3, 5e-4, 2e-4], rtol=0, atol=ATOL_RATIO)
    assert fc["A_kernel"] == 2 and fc["G_kernel"] == 0
    assert fc["A_max"] == pytest.approx(4.0, rel=RTOL_MAX, abs=0)
    assert fc["G_max"] == pytest.approx(1.0, rel=RTOL_MAX, abs=0)
    assert spread(fc["G"])["n_small"] == 2  # small, but not a kernel the detector names
    dead = out["dead"]  # a vanishing factor: all ratios 0, every direction in its kernel
    assert dead["G"] == [0.0, 0.0] and dead["G_kernel"] == 2 and dead["G_max"] == 0.0
    np.testing.assert_allclose(dead["A"], [1.0, 1.0 / 3.0], rtol=0, atol=ATOL_RATIO)
    assert dead["A_kernel"] == 0
    json.dumps(out)  # plain floats and ints (stored in report.json)


def test_node_death_found_and_scan_deviates(record_of):
    death = record_of(
        ["blocks.0.mlp.fc1", "blocks.0.mlp.fc2"],
        "duality",
        "genuine_singularity",
        2,
        0.999,
        {"blocks.0.mlp.fc1": {"best_k": None, "classes": ["live"]}},
    )
    f = node_death_findings(_model([death]), r2_min=R2_MIN)
    assert [x.holds for x in f] == [True, True]
    assert "1 at k = 2" in f[0].observed
    assert "blocks.0.mlp.fc2 A: 2 of 6 ratios < 1e-3" in f[0].observed
    assert "Units compressed (< 1 % RMS contribution, zoo.mlp_usage): b0 3." in f[0].observed


def test_node_death_missing_or_unreadable_or_scan_agrees(record_of):
    live = record_of(["blocks.0.mlp.fc2"], "kfac-G", "live", 1, 1.0)
    assert node_death_findings(_model([live]), r2_min=R2_MIN)[0].holds is False
    weak = record_of(["blocks.0.mlp.fc1"], "duality", "genuine_singularity", 2, 0.9)
    assert node_death_findings(_model([weak]), r2_min=R2_MIN)[0].holds is False
    agree = record_of(
        ["blocks.0.mlp.fc1"],
        "duality",
        "genuine_singularity",
        2,
        0.99,
        {"blocks.0.mlp.fc1": {"best_k": 2, "classes": ["genuine_singularity"]}},
    )
    assert [x.holds for x in node_death_findings(_model([agree]), r2_min=R2_MIN)] == [True, False]


def test_gauge_findings(record_of):
    ok = [
        record_of(["blocks.0.attn.q_proj"], "ln-kernel", "flat_gauge"),
        record_of(["blocks.0.attn.q_proj"], "qk-rotation", "curved_gauge", 2, 0.99),
        record_of(["blocks.0.norm1", "blocks.0.attn.q_proj"], "norm-scale", "curved_gauge", 2, 1.0),
    ]
    f = gauge_findings(_model(ok, "ft"), r2_min=R2_MIN, expect_no_deaths=True)
    assert [x.holds for x in f] == [True, True, True, True]
    bad = [
        *ok,
        record_of(["blocks.0.mlp.fc1"], "ln-kernel", "live", 1, 1.0),
        record_of(["blocks.0.mlp.fc1"], "duality", "genuine_singularity", 2, 0.99),
        record_of(["blocks.0.norm2", "blocks.0.mlp.fc1"], "norm-scale", "genuine_singularity", 2),
    ]
    f = gauge_findings(_model(bad, "ft"), r2_min=R2_MIN, expect_no_deaths=True)
    assert [x.holds for x in f] == [False, False, True, False]
    assert "1 of 2 ln-kernel records flat" in f[1].observed
    assert "1 of 2 norm-scale records curved" in f[3].observed
    none = gauge_findings(_model([], "ft"), r2_min=R2_MIN, expect_no_deaths=False)
    assert [x.holds for x in none] == [None, None, None]


def _row(stage, kernel, gap):
    return OptimizerRow(stage, stage, 0.1, 0.9, 4, 2, {}, 2, 0.5, 3, kernel, gap)


def test_optimizer_and_cell_findings():
    rows = [
        _row("sweep-adamw", 0, 0.1),
        _row("sweep-muon", 0, 0.3),
        _row("sweep-muon-polar-express", 2, 5.0),
        _row("sweep-muon-polar-svd", 1, 1.0),
    ]
    assert optimizer_finding(rows).holds is True
    rows[1] = _row("sweep-muon", 3, 2.0)  # Muon clean too
    assert optimizer_finding(rows).holds is False
    rows[1] = _row("sweep-muon", 3, 0.5)  # a kernel, but no decade gap: diffuse
    assert optimizer_finding(rows).holds is True
    rows[3] = _row("sweep-muon-polar-svd", 0, 3.0)  # no kernel named: not clean
    assert optimizer_finding(rows).holds is False
    assert optimizer_finding(rows[:2]).holds is None
    cells = [{"name": "a", "passed": True}, {"name": "b", "passed": False}]
    f = cell_finding(cells)
    assert f.holds is False and "failing: b" in f.observed
    assert cell_finding(cells[:1]).holds is True


def _probe(k, klass, k_hat=2.1, r2=0.999):
    return {"k": k, "class": klass, "k_hat": k_hat, "r2": r2}


def test_the_weakest_hidden_direction_is_a_finding_of_its_own(record_of):
    """s32 trial TRAIN #3: "node deaths: does not hold" (no detector named one) stood beside k = 2
    reads of both blocks' weakest hidden directions, which the verdict did not count."""
    live = record_of(["blocks.0.mlp.fc2"], "kfac-G", "live", 1, 1.0)
    scan = {"blocks.0.mlp.fc1": {"best_k": 2}}
    both = [
        {
            "block": f"blocks.{i}.mlp",
            "ratio": 1e-9,
            "scan": scan,
            "unsnapped": _probe(2, "genuine_singularity"),
            "snapped": _probe(2, "genuine_singularity"),
        }
        for i in (0, 1)
    ]
    mr = dataclasses.replace(_model([live]), probes=tuple(both))
    named, weakest = node_death_findings(mr, r2_min=R2_MIN)
    assert named.holds is False and "named by the read's detectors" in named.expectation
    assert weakest.holds is True and "blocks.1.mlp (A ratio 1.0e-09)" in weakest.observed
    one_live = [both[0], {**both[1], "unsnapped": _probe(1, "live"), "snapped": _probe(1, "live")}]
    mr = dataclasses.replace(mr, probes=tuple(one_live))
    assert node_death_findings(mr, r2_min=R2_MIN)[1].holds is False


def test_records_near_not_on_or_in_a_probe_size_kernel_are_no_node_deaths(record_of):
    """s34 trial DEMO D2: with 16 probe digits the fine-tune's control ("no node deaths") failed
    on kfac-G records of a G whose kernel the probe size makes (16·4 rows for 128), and the
    scratch ViT's "node deaths" held on records marked near, not on. Neither counts as a node
    death now; a record only the probe size may explain leaves the control undecided (its
    kernel holds the probe's directions and any dead unit's alike; s34 review #8), and the
    findings say how many were left out and why."""
    near = dataclasses.replace(
        record_of(
            ["blocks.0.mlp.fc1", "blocks.0.mlp.fc2"], "duality", "genuine_singularity", 2, 0.99
        ),
        info={"order_below": {"k": 1, "t": [1e-4, 1e-3], "slope": 0.01}},
    )
    probe = record_of(["blocks.0.mlp.fc1"], "kfac-G", "genuine_singularity", 2, 0.99)
    limited = {"layer": "blocks.0.mlp.fc1", "factor": "G", "dim": 128, "rows": 64, "n_min": 32}

    def with_meta(recs, meta):
        mr = _model(recs, "ft")
        return dataclasses.replace(mr, reading=Reading(tuple(recs), (), meta))

    mr = with_meta([near, probe], {"probe_rank_limited": [limited]})
    (deaths, *_) = node_death_findings(mr, r2_min=R2_MIN)
    assert deaths.holds is False and "0 at k = 2" in deaths.observed
    left = "1 in a probe-size kernel (may be an artefact of the probe size), 1 near, not on"
    assert f"(left out as no node death at θ0: {left})" in deaths.observed
    (control, *_) = gauge_findings(mr, r2_min=R2_MIN, expect_no_deaths=True)
    assert control.holds is None
    assert f"(left out as no singularity at θ0: {left})" in control.observed
    # near, not on alone: no singularity at θ0, the control holds
    assert gauge_findings(with_meta([near], {}), r2_min=R2_MIN, expect_no_deaths=True)[0].holds
    # the same kfac-G record on a factor the probe set fills is a node death
    full = with_meta([probe], {"probe_rank_limited": []})
    assert node_death_findings(full, r2_min=R2_MIN)[0].holds is True
    assert gauge_findings(full, r2_min=R2_MIN, expect_no_deaths=True)[0].holds is False
