"""`run_survey(rows=...)` takes RowSpec objects only, and says where indices go.

s19 trial AL #1: ``run_survey(samples=1, rows=[2])`` failed with ``AttributeError: 'int' object
has no attribute 'sample'`` from inside ``run_row``; the row indices that ``lcn survey --rows``
takes belong to ``row_indices``.
"""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear.fiber_report import FiberReport, build_report
from neuromanifold.linear.survey import RowSpec, run_survey


def _one_ntk_report(rng: np.random.Generator) -> FiberReport:
    """A fiber with one point and one NTK, built without a fiber search (fast)."""
    return build_report(
        architecture="toy",
        v=np.ones(2),
        delta=np.zeros(1),
        points=[(np.ones(1),)],
        ntks=[np.eye(2)],
        residuals=[0.0],
        best_residual=0.0,
        tolerance=1e-10,
        routes=[],
        routes_agree=None,
    )


TOY = RowSpec("toy", "one NTK", "toy notion", "independent", _one_ntk_report)


@pytest.mark.parametrize("rows", [[2], [0, 3], [np.int64(2)]])
def test_indices_given_as_rows_point_to_row_indices(rows: list) -> None:
    with pytest.raises(ValueError, match=r"^rows = .*: rows takes RowSpec objects") as info:
        run_survey(samples=1, rows=rows)
    assert f"use row_indices={list(rows)!r}" in str(info.value)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["toy"], r"rows holds str 'toy': expected RowSpec objects"),
        ([TOY, 1], r"rows holds int 1: expected RowSpec objects"),  # mixed: not all indices
        ([TOY, None], r"rows holds NoneType None: expected RowSpec objects"),
        (TOY, r"rows = RowSpec\(.*\): expected a list of RowSpec objects"),
        (2, r"rows = 2: expected a list of RowSpec objects"),
    ],
)
def test_other_rows_that_are_not_row_specs_are_refused(rows: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_survey(samples=1, rows=rows)  # type: ignore[arg-type]


def test_a_bad_rows_is_named_before_the_clash_with_row_indices() -> None:
    with pytest.raises(ValueError, match=r"rows takes RowSpec objects"):
        run_survey(samples=1, rows=[2], row_indices=[2])


def test_row_specs_in_a_list_or_a_tuple_run() -> None:
    for rows in ([TOY, TOY], (TOY, TOY)):
        res = run_survey(samples=2, rows=rows)
        assert [r.row_index for r in res.rows] == [0, 1]
        assert all(r.verdict == "independent" and r.agrees is True for r in res.rows)


@pytest.mark.parametrize("rows", [[], ()])
def test_an_empty_rows_is_refused_like_an_empty_row_indices(rows: object) -> None:
    with pytest.raises(ValueError, match=r"expected a non-empty list of RowSpec objects"):
        run_survey(samples=1, rows=rows)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"non-empty"):
        run_survey(samples=1, row_indices=[])


@pytest.mark.parametrize("rows", [np.array([2]), np.array([0, 3]), range(2)])
def test_an_index_array_given_as_rows_points_to_row_indices(rows: object) -> None:
    with pytest.raises(ValueError, match=r"rows takes RowSpec objects") as info:
        run_survey(samples=1, rows=rows)  # type: ignore[arg-type]
    assert f"use row_indices={[int(r) for r in rows]!r}" in str(info.value)  # type: ignore[attr-defined]
