"""Checks of benchmarks/scaling.py's command line that run no section: ``--quick`` shrinks every
section (the batching and data-parallel ones included) and ``--worlds`` sets the process counts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "scaling.py"


def test_quick_shrinks_every_section(bench) -> None:
    quick = bench.sections(**_sizes(bench, ["--quick"]))
    full = bench.sections(**_sizes(bench, []))
    assert quick.keys() == full.keys()
    for key in full:  # no larger and no more sizes than the full run
        assert max(quick[key]) <= max(full[key]) and len(quick[key]) <= len(full[key]), key
    for key in ("batching", "parallel_n", "worlds"):  # the sections --quick once left alone
        assert max(quick[key]) < max(full[key]), key
    assert max(quick["worlds"]) <= 2  # a 2-core machine is not oversubscribed


def test_worlds_sets_the_process_counts(bench) -> None:
    for argv in (["--worlds", "1", "2"], ["--quick", "--worlds", "3"]):
        args = bench.parse_args(argv)
        assert bench.sections(args.quick, args.worlds)["worlds"] == args.worlds
        assert args.worlds == [int(w) for w in argv[argv.index("--worlds") + 1 :]]
    with pytest.raises(SystemExit):
        bench.parse_args(["--worlds", "0"])
    with pytest.raises(ValueError, match=r"--worlds must be positive process counts; got \[\]"):
        bench.sections(False, [])


def _sizes(bench, argv: list[str]) -> dict:
    args = bench.parse_args(argv)
    return {"quick": args.quick, "worlds": args.worlds}


#: slope of an exact power law y = 3·x² fitted in float64 over three sizes: log-space rounding
SLOPE_ATOL = 1e-12
#: a one-size panel's x range (x/c, x·c) is centred on x up to float64 rounding of the division
LOG_CENTRE_RTOL = 1e-12


def test_a_slope_needs_two_sizes(bench) -> None:
    """s15 trial S #9: one size per series printed least-squares "slopes" through one point
    (numpy's RankWarning) and plotted blank panels."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.polyfit's RankWarning on one point
        assert math.isnan(bench.slope([1000.0], [0.5]))
        assert math.isnan(bench.slope([1000.0, 1000.0], [0.5, 0.6]))  # one distinct size
    xs = [10.0, 100.0, 1000.0]
    assert abs(bench.slope(xs, [3 * x * x for x in xs]) - 2.0) <= SLOPE_ATOL
    one = bench.fit_line("  sweep  ", [1000.0], [0.5])
    assert one == "  sweep  : slope all = no slope: 1 size, needs ≥ 2, upper half = " + (
        "no slope: 1 size, needs ≥ 2"
    )
    four = bench.fit_line("  sweep  ", [10.0, 100.0, 1000.0, 1e4], [1.0, 10.0, 100.0, 1e3])
    assert "no slope" not in four and four.count("= 1.000") == 2


def _plotted(bench, results: list[dict], tmp_path: Path, monkeypatch) -> list:
    import matplotlib.figure

    saved: list = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    bench.plot_series(results, str(tmp_path / "s.png"))
    (fig,) = saved
    return fig.axes


def test_one_size_draws_its_points_and_says_there_is_no_slope(
    bench, tmp_path: Path, monkeypatch
) -> None:
    one = {
        "name": "params", "x": [1000.0], "sweep": [0.5], "factors": [0.2],
        "detect": [float("nan")], "read": [float("nan")],
    }  # fmt: skip
    (ax,) = _plotted(bench, [one], tmp_path, monkeypatch)
    drawn = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines()}
    # the measured costs are drawn as their one point each; no guide, no fitted slope
    assert drawn == {
        "sweep (no slope: 1 size, needs ≥ 2)": [0.5],
        "factors (no slope: 1 size, needs ≥ 2)": [0.2],
    }
    assert ax.get_title() == "params\none size only: no slope"
    lo, hi = ax.get_xlim()
    # centred on a log axis: x/c and x·c, each one float64 rounding off
    assert lo < 1000.0 < hi
    assert math.isclose(math.log(1000.0 / lo), math.log(hi / 1000.0), rel_tol=LOG_CENTRE_RTOL)


def test_several_sizes_keep_their_slopes_and_guide(bench, tmp_path: Path, monkeypatch) -> None:
    xs = [10.0, 100.0, 1000.0]
    res = {
        "name": "params", "x": xs, "sweep": [2 * x for x in xs], "factors": [x * x for x in xs],
        "detect": [x for x in xs], "read": [3 * x for x in xs],
    }  # fmt: skip
    (ax,) = _plotted(bench, [res], tmp_path, monkeypatch)
    labels = {ln.get_label() for ln in ax.get_lines()}
    assert labels == {
        "sweep (slope 1.00)", "factors (slope 2.00)", "detect (slope 1.00)",
        "read (slope 1.00)", "slope 1",
    }  # fmt: skip
    assert ax.get_title() == "params"


def test_timed_repeats_within_its_budget(bench, monkeypatch) -> None:
    """The costs are the best of up to ``repeats`` calls, and no call starts once the calls so
    far took ``budget_s`` in all (a slow model's cost is one call, a fast one's the best of 3)."""
    clock = iter([0.0, 5.0, 5.0, 7.0, 7.0, 8.5, 8.5, 10.0])  # calls of 5, 2, 1.5 and 1.5 s
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    calls: list[int] = []
    assert bench.timed(lambda: calls.append(1), repeats=3, budget_s=4.0) == 5.0
    assert len(calls) == 1  # the first call already spent the budget
    assert bench.timed(lambda: calls.append(1), repeats=3, budget_s=4.0) == 1.5
    assert len(calls) == 1 + 3  # 2 + 1.5 s < 4 s: a third call, and 3 is the cap
