"""Closed-form sizes may be NumPy integers; bools, floats and non-integers stay refused
(s17 trial AE #9: ``rrr(np.int64(5), 3, 5, 0)`` raised TypeError "M must be an int")."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from neuromanifold.singular.closed_forms import (
    additive,
    deep_linear,
    normal_crossing,
    normal_form,
    regular,
    rrr,
    width_one_chain,
    width_one_hidden,
)

NUMPY_INTS = (np.int64, np.int32, np.uint8)


@pytest.mark.parametrize("np_int", NUMPY_INTS)
def test_numpy_integers_give_the_python_int_result(np_int: type) -> None:
    # the same closed form as with Python ints, and the fields are plain ints (JSON-safe)
    cf, ref = rrr(np_int(5), np_int(3), np_int(5), np_int(0)), rrr(5, 3, 5, 0)
    assert (cf.lam, cf.m, cf.model) == (ref.lam, ref.m, ref.model)
    dl = deep_linear([np_int(3), np_int(1), np_int(3), np_int(3)], np_int(0))
    assert dl == deep_linear([3, 1, 3, 3], 0)
    assert type(dl.m) is int and type(dl.m_restated) is int
    assert width_one_hidden([np_int(2), np_int(1), np_int(3)]) == width_one_hidden([2, 1, 3])
    assert normal_form(np_int(3)).lam == Fraction(1, 6)
    assert regular(np_int(4)).lam == Fraction(2)
    assert width_one_chain(np_int(4)).m == 4
    assert normal_crossing(np.array([1, 2, 2])).m == 2
    assert additive([np_int(2)], regular_dims=np_int(2)) == additive([2], regular_dims=2)


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: rrr(5.0, 3, 5, 0), TypeError, r"M must be an int >= 1, got float 5\.0"),
        (lambda: rrr(np.float64(5), 3, 5, 0), TypeError, r"M must be an int >= 1, got float64"),
        (lambda: rrr(True, 3, 5, 0), TypeError, r"M must be an int >= 1, got bool True"),
        (lambda: rrr(np.bool_(True), 3, 5, 0), TypeError, r"M must be an int >= 1, got bool"),
        (lambda: rrr(5, 3, 5, Fraction(0)), TypeError, r"r must be an int >= 0, got Fraction"),
        (lambda: rrr(5, 3, 5, "0"), TypeError, r"r must be an int >= 0, got str '0'"),
        (lambda: deep_linear([3, 2.5, 3], 0), TypeError, r"widths\[1\] must be an int >= 1"),
        (lambda: deep_linear([3, 3], np.float32(0)), TypeError, r"rank must be an int >= 0"),
        # a NumPy integer below the minimum is a ValueError that prints the number, not its type
        (lambda: rrr(np.int64(0), 3, 5, 0), ValueError, r"M must be an int >= 1, got 0$"),
        (
            lambda: deep_linear([3, 3], np.int64(-1)),
            ValueError,
            r"rank must be an int >= 0, got -1$",
        ),
    ],
)
def test_non_integers_and_out_of_range_are_refused(
    call: Callable[[], object], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=message):
        call()
