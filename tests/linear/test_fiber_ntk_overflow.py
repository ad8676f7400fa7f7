"""The NTK at the fiber over an extreme (v, δ): its overflow is said in terms of (v, δ), which
the caller gave, not of θ (s19 audit AM #1). ``θ ↦ cθ`` maps the fiber over (v, δ) onto the
fiber over (c^L v, c² δ) and K by c^{2(L−1)}, so a large enough δ makes K overflow float64."""

from __future__ import annotations

import numpy as np
import pytest

from neuromanifold.linear import LCN, lcn_fiber, mu, ntk_from_function
from neuromanifold.linear.ntk import NTKOverflowError, ntk

ARCH = LCN((2, 2, 2), (2, 2))
THETA = [np.array([1.0, 2.0]), np.array([3.0, 1.0]), np.array([1.0, -1.0])]
HUGE_DELTA = [1e200, 1e200]
MESSAGE = r"the NTK over this \(v, δ\) is not representable in float64.*smaller \(v, δ\)"


def test_lcn_fiber_says_the_overflow_in_terms_of_v_and_delta() -> None:
    with pytest.raises(ValueError, match=MESSAGE) as info:
        lcn_fiber(ARCH, mu(ARCH, THETA), HUGE_DELTA)
    assert isinstance(info.value.__cause__, NTKOverflowError)
    assert "rescale θ" not in str(info.value)


def test_ntk_from_function_says_the_overflow_in_terms_of_v_and_delta() -> None:
    with pytest.raises(ValueError, match=MESSAGE):
        ntk_from_function(ARCH, mu(ARCH, THETA), HUGE_DELTA)


def test_ntk_itself_keeps_its_theta_message() -> None:
    with pytest.raises(NTKOverflowError, match=r"^ntk: K = Jμ Jμᵀ is not representable"):
        ntk(ARCH, [w * 1e120 for w in THETA])


def test_a_moderate_delta_still_gives_the_fiber_and_its_finite_ntk() -> None:
    report = lcn_fiber(ARCH, mu(ARCH, THETA), [1e6, 1e6])
    assert report.points and all(np.isfinite(np.asarray(k)).all() for k in report.ntks)
