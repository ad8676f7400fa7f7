"""Fixtures of the linear-network CLI tests."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")


def _printed_numbers(output: str, start: str, stop: str) -> np.ndarray:
    """The numbers printed between the first ``start`` and the next ``stop`` of ``output``."""
    text = output.split(start, 1)[1].split(stop, 1)[0]
    return np.array([float(t) for t in _FLOAT.findall(text)])


@pytest.fixture
def printed_numbers() -> Callable[[str, str, str], np.ndarray]:
    """``(output, start, stop) → array``: the numbers a CLI printed between two markers."""
    return _printed_numbers
