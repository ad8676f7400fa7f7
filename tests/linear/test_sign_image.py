"""The vectorised sign-group search of fiber de-duplication against its loop oracle (s31 trial
LCN #10: the loop, rebuilt per call, was most of a 720-point fiber's 2 min 42 s; a 120-point
stride-one fiber of five 2-tap layers went from 3.3 s to 1.0 s)."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import LCN
from neuromanifold.linear.fiber_numeric import (
    nearest_sign_image,
    nearest_sign_image_reference,
    sign_patterns,
)


@pytest.mark.parametrize("filters", [(2, 2), (3, 2, 2), (2, 2, 2, 2, 2)])
def test_the_nearest_sign_image_equals_its_loop_oracle(filters: tuple[int, ...]) -> None:
    """The vectorised sign-group search (s31 trial LCN #10) against the one-pattern loop,
    including exact sign images of x (a tie between x's own image and none other)."""
    arch = LCN(filters, (1,) * (len(filters) - 1))
    rng = np.random.default_rng(0)
    sizes = arch.layer_sizes
    for trial in range(20):
        x = rng.standard_normal(arch.n_params)
        c = sign_patterns(arch.L)[trial % 2 ** (arch.L - 1)]
        y = x * np.repeat(c, sizes) if trial % 2 else rng.standard_normal(arch.n_params)
        gap, near = nearest_sign_image(arch, x, y)
        ref_gap, ref_near = nearest_sign_image_reference(arch, x, y)
        assert gap == pytest.approx(ref_gap, rel=1e-15, abs=1e-15)
        assert np.array_equal(near, ref_near)
