"""The loader's value check (`neuromanifold.io._cast_change`) against the exact values.

s18 audit AJ: a uint64 value of 2**63 into an int64 buffer (and int64 -1 into uint64) wraps, but
was said to keep every value (#1: the check compared in int64); a float8 checkpoint tensor into
an integer buffer crashed the load (#2); the check made several full-size copies (#6). The
reference here is Python's own comparison of the values before and after torch's cast (Python
compares ints, floats and complex numbers exactly), one value at a time.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

from neuromanifold import io
from neuromanifold.io import load_state_dict_checked

INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
            torch.uint16, torch.uint32, torch.uint64]  # fmt: skip
FLOATS = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]  # fmt: skip
COMPLEX = [torch.complex64, torch.complex128]
DTYPES = [torch.bool, *INTEGERS, *FLOATS, *COMPLEX]

# integers at the edges of every integer dtype's range and of the float dtypes' exact integers
# (2**24 + 1: float32's 24-bit significand; 2**53 + 1: float64's; 65504: float16's largest)
INTEGER_VALUES = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 2**15, 2**16, 65504, 65520,
                  70000, 2**24 + 1, 2**31, -(2**31) - 1, 2**32, 2**53 + 1, 2**63 - 1, -(2**63),
                  2**63, 2**64 - 1]  # fmt: skip
FLOAT_VALUES = [0.0, 1.0, -1.0, 0.5, -0.5, 2.5, 255.5, 256.0, -128.5, 448.0, 500.0, 65504.0,
                70000.0, 2.0**24 + 1, 2.0**31, 2.0**53, 2.0**63, 2.0**64, 1e10, 1e-40, 1e300,
                -math.inf, math.inf, math.nan]  # fmt: skip
COMPLEX_VALUES = [1 + 0j, 1 + 1j, 0.5 + 0j, 1 / 3 + 0j, complex(2**24 + 1, 0), 1e300 + 0j,
                  complex(0, math.nan)]  # fmt: skip


def _values(dtype: torch.dtype) -> list[torch.Tensor]:
    """One-element tensors of ``dtype`` holding its edge values (`INTEGER_VALUES` in its range,
    `FLOAT_VALUES` / `COMPLEX_VALUES` rounded into it)."""
    if dtype == torch.bool:
        return [torch.tensor([b]) for b in (False, True)]
    if dtype in INTEGERS:
        info = torch.iinfo(dtype)
        return [torch.tensor([x], dtype=dtype) for x in INTEGER_VALUES if info.min <= x <= info.max]
    if dtype in COMPLEX:
        return [torch.tensor([x], dtype=dtype) for x in COMPLEX_VALUES]
    return [torch.tensor([x], dtype=torch.float64).to(dtype) for x in FLOAT_VALUES]


def _same(a: object, b: object) -> bool:
    """Python's exact comparison, NaN equal to NaN (in each part of a complex number)."""
    if isinstance(a, complex) or isinstance(b, complex):  # part by part: complex(int) rounds
        parts = [(x.real, x.imag) if isinstance(x, complex) else (x, 0.0) for x in (a, b)]
        return _same(parts[0][0], parts[1][0]) and _same(parts[0][1], parts[1][1])
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


CAST_PAIRS = [
    (src, dst)
    for src in DTYPES
    for dst in DTYPES
    if src != dst  # equal dtypes are not cast
    # torch cannot copy float8 into a complex tensor (load_state_dict raises too)
    and not (dst.is_complex and src.is_floating_point and src.itemsize == 1)
]


@pytest.mark.parametrize(("src", "dst"), CAST_PAIRS, ids=str)
def test_value_check_agrees_with_the_exact_values(src: torch.dtype, dst: torch.dtype) -> None:
    """``_cast_change`` is ``None`` exactly when the value ``load_state_dict`` stores (a
    ``copy_`` into the module's dtype) equals the checkpoint's value, for each edge value of
    every dtype pair; the 64-bit integer pairs included (AJ #1)."""
    for v in _values(src):
        stored = torch.empty(1, dtype=dst)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's warning on discarding imaginary parts
            stored.copy_(v)
        kept = _same(v.tolist()[0], stored.tolist()[0])
        change = io._cast_change(v, dst)
        assert (change is None) == kept, (v.tolist(), stored.tolist(), change)


class _Buffer(nn.Module):
    def __init__(self, dtype: torch.dtype, n: int = 2) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(n, dtype=dtype))


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        # 2**63 is one beyond int64's largest: the cast wraps it to -2**63
        (torch.tensor([2**63, 1], dtype=torch.uint64), torch.int64),
        # -1 is below uint64's range: the cast wraps it to 2**64 - 1
        (torch.tensor([-1, 1], dtype=torch.int64), torch.uint64),
    ],
)
def test_64_bit_integer_wrap_is_said(value: torch.Tensor, dtype: torch.dtype) -> None:
    """s18 audit AJ #1: both casts were said to keep every value."""
    model = _Buffer(dtype)
    name = str(dtype).removeprefix("torch.")
    with pytest.warns(UserWarning, match=rf"values change when cast to _Buffer's {name}: values "
                      rf"outside {name}'s range wrap around"):  # fmt: skip
        load_state_dict_checked(model, {"b": value})
    assert model.b.tolist()[0] != value.tolist()[0]  # the wrap the warning says
    assert model.b.tolist()[1] == 1


def test_float8_tensor_into_an_integer_buffer_is_said_not_a_crash() -> None:
    """s18 audit AJ #2: ``isfinite`` is not implemented for float8, and the load raised."""
    model = _Buffer(torch.int64)
    value = torch.tensor([1.0, 2.5]).to(torch.float8_e4m3fn)  # 2.5 is a float8_e4m3fn value
    with pytest.warns(UserWarning, match="float8_e4m3fn tensors .* fractions are truncated"):
        load_state_dict_checked(model, {"b": value})
    assert model.b.tolist() == [1, 2]


@pytest.mark.parametrize("where", [0, 4, 5, 9])
def test_value_check_in_pieces_sees_a_change_in_any_piece(monkeypatch, where: int) -> None:
    """AJ #6: the check runs on pieces of ``_CHECK_CHUNK`` elements; a change in the first, a
    middle or the last (shorter) piece is found, and a piece boundary is no change."""
    monkeypatch.setattr(io, "_CHECK_CHUNK", 4)
    value = torch.arange(10, dtype=torch.float64)
    assert io._cast_change(value, torch.int64) is None
    value[where] += 0.5
    assert io._cast_change(value, torch.int64) == "fractions are truncated toward zero"
    wide = torch.arange(10, dtype=torch.int64)
    wide[where] = 2**40  # beyond int32's range
    assert io._cast_change(wide, torch.int32) == "values outside int32's range wrap around"


def test_value_check_of_a_tensor_larger_than_a_piece() -> None:
    """A buffer of several pieces (the default size): integral floats are kept, one fraction in
    the last piece is said; the stored values are the truncation."""
    n = 2 * io._CHECK_CHUNK + 3
    model = _Buffer(torch.int64, n)
    value = torch.arange(n, dtype=torch.float64)
    with pytest.warns(UserWarning, match="cast to _Buffer's int64 with every value kept"):
        load_state_dict_checked(model, {"b": value})
    value[-1] = -0.5
    with pytest.warns(UserWarning, match="fractions are truncated toward zero"):
        load_state_dict_checked(model, {"b": value})
    assert torch.equal(model.b, value.trunc().to(torch.int64))
