"""The NTK-determinacy survey: verdicts are computed, reproducible, and serialisable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from neuromanifold.linear import LCN, regrouping_pairs
from neuromanifold.linear.fiber_report import FiberReport, build_report
from neuromanifold.linear.survey import (
    RowSpec,
    SurveyResult,
    default_rows,
    run_row,
    run_survey,
)
from neuromanifold.linear.survey_report import plot_survey, to_markdown

ROW_KEYS = {
    "architecture",
    "condition",
    "samples",
    "fraction_dependent",
    "max_spread",
    "verdict",
    "paper_claim",
}


def test_every_row_runs_and_verdict_follows_the_samples() -> None:
    res = run_survey(samples=1, seed=3)
    assert len(res.rows) == 10
    for r in res.rows:
        assert r.verdict in ("independent", "dependent")
        assert (r.verdict == "dependent") == (r.n_dependent > 0)
        assert r.paper_claim in ("independent", "dependent", None)
        assert (r.witness is not None) == (r.agrees is False)
    d = json.loads(json.dumps(res.to_dict()))
    assert all(ROW_KEYS <= set(row) for row in d["rows"])
    # mechanisms that hold for every sample (spec §4.1, §4.4 caveat, §4.5)
    assert res.rows[2].condition == "all strides > 1" and res.rows[2].n_dependent == 0
    assert res.rows[1].verdict == "dependent"  # FC generic Δ
    assert res.rows[0].verdict == "independent"  # FC balanced
    assert res.rows[5].verdict == "dependent"  # D = 2 equal shapes, no stride between


def test_reproducible_with_the_same_seed() -> None:
    rows = [default_rows()[i] for i in (3, 6)]
    a = run_survey(samples=2, seed=7, rows=rows).to_dict()
    b = run_survey(samples=2, seed=7, rows=rows).to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_selected_rows_reproduce_the_full_survey() -> None:
    """A row selected by index (`lcn survey --rows`) is seeded by that index: it equals its line
    of the full survey (rows numbered by position), not the stream of selection position 0.

    The rows compared are convolution rows (1-D row 3, 2-D row 5), whose fibers are finite sets:
    their lines are reproduced exactly. An FC row samples points along a continuous fiber family,
    and where Levenberg–Marquardt lands on it moves with rounding (BLAS kernels need not give
    bitwise equal results from run to run), so its max_spread was seen to differ in the fourth
    digit. Both compared rows depend on the seed (checked: another seed changes them), so the
    comparison detects a row seeded by its selection position (audit S12 #5: row 2, compared
    before, gives the same line for every seed)."""
    full = run_survey(samples=1, seed=0, rows=default_rows()[:6])  # rows 0..5 as in the full run
    sub = run_survey(samples=1, seed=0, row_indices=[3, 5])
    assert [r.row_index for r in sub.rows] == [3, 5]
    assert sub.rows[0].to_dict() == full.rows[3].to_dict()
    assert sub.rows[1].to_dict() == full.rows[5].to_dict()
    other = run_survey(samples=1, seed=5, row_indices=[3, 5])
    for a, b in zip(other.rows, sub.rows, strict=True):
        assert a.to_dict() != b.to_dict()
    with pytest.raises(ValueError, match=r"row_indices = \[10\]: expected a non-empty list"):
        run_survey(samples=1, row_indices=[10])
    with pytest.raises(ValueError, match=r"row_indices = \[\]"):
        run_survey(samples=1, row_indices=[])
    with pytest.raises(ValueError, match="rows and row_indices: give at most one"):
        run_survey(samples=1, rows=default_rows()[:1], row_indices=[0])


def _fake_report(n_ntks: int) -> FiberReport:
    ntks = [np.eye(2) * (1 + i) for i in range(n_ntks)]
    return build_report(
        architecture="toy",
        v=np.ones(2),
        delta=np.zeros(1),
        points=[(np.ones(1),)] * n_ntks,
        ntks=ntks,
        residuals=[0.0] * n_ntks,
        best_residual=0.0,
        tolerance=1e-10,
        routes=[],
        routes_agree=None,
    )


def test_disagreement_produces_a_witness_and_markdown_says_so() -> None:
    spec = RowSpec("toy", "two NTKs", "toy notion", "independent", lambda rng: _fake_report(2))
    row = run_row(spec, samples=2, seed=0, row_index=0)
    assert row.verdict == "dependent" and row.agrees is False
    assert row.witness is not None and row.witness["n_distinct_ntks"] == 2
    spec_ok = RowSpec("toy", "one NTK", "toy notion", "dependent", lambda rng: _fake_report(1))
    row_ok = run_row(spec_ok, samples=2, seed=0, row_index=1)
    assert row_ok.verdict == "independent" and row_ok.agrees is False
    assert row_ok.witness is not None and "no sample" in row_ok.witness["note"]
    md = to_markdown(SurveyResult(rows=(row, row_ok), samples=2, seed=0))
    assert md.count("| toy |") == 2 and "Disagreements" in md and "| NO |" in md


def test_plot_writes_png(tmp_path: Path) -> None:
    spec = RowSpec("toy", "c", "n", None, lambda rng: _fake_report(1))
    res = SurveyResult(rows=(run_row(spec, samples=1, seed=0, row_index=0),), samples=1, seed=0)
    out = tmp_path / "survey.png"
    plot_survey(res, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="samples must be a positive int, got 0"):
        run_survey(samples=0)
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -1"):
        run_survey(samples=1, seed=-1)


def test_generic_d2_row_draws_no_regrouping_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial D: the generic D = 2 row (index 4) could draw two layers of one shape with stride
    (1, 1) between them — the swap case of spec §4.4, which is the next row — so its verdict
    depended on the draw. Its architectures now have no regrouping pair; row 5's always have one.
    Over 200 draws the unfiltered sampler would meet a pair about 1 in 16 times (shape 1/4 ×
    stride 1/4 for a neighbouring pair), so the filter is exercised."""
    from neuromanifold.linear import survey

    drawn: list[LCN] = []
    monkeypatch.setattr(survey, "_lcn_from_function", lambda arch, *a, **k: drawn.append(arch))
    for j in range(200):
        survey._lcn_2d(np.random.default_rng([0, 4, j]), equal_pair=False)
    assert len(drawn) == 200 and all(regrouping_pairs(a) == [] for a in drawn)
    drawn.clear()
    for j in range(50):
        survey._lcn_2d(np.random.default_rng([0, 5, j]), equal_pair=True)
    assert all(regrouping_pairs(a) for a in drawn)
    assert "no two layers of one shape and dilation" in default_rows()[4].condition


@pytest.mark.parametrize(
    ("filters", "strides", "dim", "pairs"),
    [
        ((3, 2), (1,), 1, [(0, 1)]),  # spec §4.3: stride one in 1-D
        ((3, 2, 2), (2, 1), 1, [(1, 2)]),  # only the pair with equal dilation
        ((3, 1, 2), (1, 1), 1, [(0, 2)]),  # a scalar layer takes part in none
        (((2, 2), (2, 2)), ((1, 1),), 2, [(0, 1)]),  # §4.4 swap caveat
        (((2, 2), (3, 3)), ((1, 1),), 2, []),  # different shapes
        (((2, 2), (2, 2)), ((2, 1),), 2, []),  # a stride in between
        (((3, 1), (2, 1)), ((1, 1),), 2, [(0, 1)]),  # univariate along one axis
        (((3, 1), (1, 2)), ((1, 1),), 2, []),  # univariate along different axes
        # user trial L #1: a stride on an axis no filter uses changes no variable
        (((2, 1), (2, 1)), ((1, 2),), 2, [(0, 1)]),
        (((2, 1), (3, 1)), ((1, 5),), 2, [(0, 1)]),
        (((1, 2), (1, 2)), ((3, 1),), 2, [(0, 1)]),
        (((2, 1), (2, 1)), ((2, 1),), 2, []),  # ... but one on the used axis does
        (((2, 2, 1), (2, 2, 1)), ((1, 1, 3),), 3, [(0, 1)]),  # same shape, unused third axis
        (((2, 2, 2), (2, 2, 2)), ((1, 1, 3),), 3, []),  # a stride on a used axis counts
    ],
)
def test_regrouping_pairs(filters: tuple, strides: tuple, dim: int, pairs: list) -> None:
    assert regrouping_pairs(LCN(filters, strides, dim=dim)) == pairs
