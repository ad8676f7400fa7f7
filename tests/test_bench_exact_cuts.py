"""benchmarks/exact_cuts.py takes ``--help`` and ``--only`` (s33 trial DOCS D2: ``--help`` ran the
whole two-minute benchmark); its rare-class section runs alone and prints the fewest rare labels
each cut flags."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "exact_cuts.py"


def test_help_prints_usage_and_runs_nothing(bench, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "usage: exact_cuts.py" in out or "--only {confident,rare,cost}" in out
    assert "flagged from" not in out


def test_only_runs_the_named_section(bench, capsys) -> None:
    bench.main(["--only", "rare"])
    out = capsys.readouterr().out
    assert "flagged from K =" in out and "(Bernstein alone:" in out
    assert "1. Confident" not in out and "3. Cost" not in out and "2. A rare class" in out
    with pytest.raises(SystemExit):
        bench.main(["--only", "nope"])
