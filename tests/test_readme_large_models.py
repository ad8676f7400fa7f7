"""The README's "Large models" section covers torchrun, --max-memory and --device, and its numbers
are the library's."""

from __future__ import annotations

import re
from pathlib import Path

from neuromanifold.singular.memory import BUDGET_FRACTION, JVP_FRACTION

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {title}\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_large_models_section_covers_the_scale_options() -> None:
    text = README.read_text(encoding="utf-8")
    section = _section(text, "Large models")
    for needle in ("torchrun", "--max-memory", "per process", "--device", "--resume"):
        assert needle in section, needle
    # the budget's planned shares, as the plan uses them
    assert f"{BUDGET_FRACTION:.0%} for the factor pass and the detection" in section
    assert f"{JVP_FRACTION:.0%} for the sweeps" in section


def test_the_data_parallel_read_is_not_called_exact() -> None:
    """Distributed sums differ from one process's in the summation order (≈1e-11 relative on the
    sweeps, `tests/singular/test_distributed.py`): the README says so instead of "exact"."""
    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `torchrun"))
    assert "exact" not in row
    assert "floating-point summation order" in row
