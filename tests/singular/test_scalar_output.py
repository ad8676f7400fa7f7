"""A Gaussian model returning a scalar regression ``(N,)`` is read as the same model returning
``(N, 1)``: ``H_out = 1/σ²`` per sample either way (trial B #5: ``read`` rejected ``(N,)``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

# the two models run the same float64 operations (a squeeze is a view), so the factors and
# every number of the reading agree to rounding; measured difference 0.0
REL_TOL = 1e-12
SIGMA = 2.0  # a σ ≠ 1, so H_out = I/σ² is not the identity


class _ScalarMLP(nn.Module):
    """tanh MLP 4 → 8 → 1 with hidden unit 3 dead on both sides (a node death, k = 2)."""

    def __init__(self, squeeze: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)
        self.squeeze = squeeze

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc2(torch.tanh(self.fc1(x)))
        return out.squeeze(-1) if self.squeeze else out


def _pair() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(2)
    flat = _ScalarMLP(squeeze=True).double().eval()
    with torch.no_grad():
        flat.fc1.weight[3] = 0.0
        flat.fc1.bias[3] = 0.0
        flat.fc2.weight[:, 3] = 0.0
    column = _ScalarMLP(squeeze=False).double().eval()
    column.load_state_dict(flat.state_dict())
    return flat, column, torch.randn(48, 4, dtype=torch.float64)


def _assert_same(path: str, a: Any, b: Any) -> None:
    """``a`` and ``b`` agree: equal structure and strings, floats to ``REL_TOL``."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            _assert_same(f"{path}.{key}", a[key], b[key])
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _assert_same(f"{path}[{i}]", u, v)
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=REL_TOL, abs=REL_TOL), path
    else:
        assert a == b, path


def test_kfac_factors_of_a_scalar_output_equal_those_of_a_column_output() -> None:
    flat, column, x = _pair()
    assert flat(x).shape == (48,)
    f_flat = kfac_factors(flat, x, Gaussian(sigma=SIGMA))
    f_col = kfac_factors(column, x, Gaussian(sigma=SIGMA))
    assert f_flat.fisher == f_col.fisher == "exact"
    assert f_flat.blocks.keys() == f_col.blocks.keys() == {"fc1", "fc2"}
    for name in f_flat.blocks:
        for side in ("A", "G"):
            a = getattr(f_flat.blocks[name], side)
            b = getattr(f_col.blocks[name], side)
            torch.testing.assert_close(a, b, rtol=REL_TOL, atol=REL_TOL)
    # the head's G is H_out = 1/σ² exactly (Gaussian: g = ∂ log p/∂out, E[g²] = 1/σ²)
    torch.testing.assert_close(
        f_flat.blocks["fc2"].G,
        torch.full((1, 1), 1.0 / SIGMA**2, dtype=torch.float64),
        rtol=REL_TOL,
        atol=REL_TOL,
    )


def test_read_of_a_scalar_output_equals_the_read_of_a_column_output() -> None:
    flat, column, x = _pair()
    r_flat = read(flat, x, Gaussian(sigma=SIGMA), progress=False)
    r_col = read(column, x, Gaussian(sigma=SIGMA), progress=False)
    # the planted node death is found in both, at its order
    genuine = [r for r in r_flat.directions if r.klass == "genuine_singularity"]
    assert [(r.layers, r.k) for r in genuine] == [(("fc1", "fc2"), 2)]
    _assert_same("reading", r_flat.to_dict(), r_col.to_dict())
