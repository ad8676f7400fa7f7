"""The NaN/Inf test of the probe data (`first_nonfinite`) runs in slices: ``torch.isfinite`` of
the whole probe set made a temporary of the data's size in every sweep, outside the memory plan."""

from __future__ import annotations

import pytest
import torch

from neuromanifold.singular._validate import (
    FINITE_CHECK_ELEMENTS,
    first_nonfinite,
    prepare_data,
)
from neuromanifold.singular.memory import peak_allocated

#: one slice's temporaries: its float64 |x|, two boolean masks (x == x, |x| != inf) and their
#: conjunction, with room for the allocator's rounding (measured 0.72 MB)
SLICE_BYTES = FINITE_CHECK_ELEMENTS * (8 + 3) + (1 << 16)


def test_checking_a_large_probe_set_allocates_one_slice_not_a_copy() -> None:
    x = torch.randn(8192, 256, dtype=torch.float64)  # 16.8 MB
    y = torch.randn(8192, 4, dtype=torch.float64)
    peak = peak_allocated(lambda: prepare_data((x, y)))
    assert peak <= SLICE_BYTES < x.numel() * x.element_size() // 4, peak


@pytest.mark.parametrize("bad", [0, 1, 999, 1000, 4095])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_first_bad_sample_is_found_in_any_slice(bad: int, value: float) -> None:
    x = torch.randn(4096, 3, 100, dtype=torch.float64)  # 300 entries a sample: 218 per slice
    x[bad, 2, 7] = value
    x[4095, 0, 0] = value  # a later one does not hide the first
    assert first_nonfinite(x) == bad
    with pytest.raises(ValueError, match="data inputs contain non-finite values"):
        prepare_data(x)


def test_finite_integer_and_huge_samples() -> None:
    assert first_nonfinite(torch.randn(10, 4, dtype=torch.float64)) is None
    assert first_nonfinite(torch.arange(12).reshape(3, 4)) is None  # not floating
    big = torch.zeros(3, FINITE_CHECK_ELEMENTS + 5, dtype=torch.float32)  # > one slice a sample
    big[2, -1] = float("nan")
    assert first_nonfinite(big) == 2
