"""Checks of benchmarks/scaling.py's command line that run no section: ``--quick`` shrinks every
section (the batching and data-parallel ones included) and ``--worlds`` sets the process counts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "scaling.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("scaling", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
