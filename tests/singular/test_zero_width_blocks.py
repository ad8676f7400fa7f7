"""Zero-width ``nn.Linear`` blocks (an optional branch configured to size 0) do not break the read.

A block holding no parameters at all (``nn.Linear(4, 0)``) has no directions: the factor pass
skips it and the read lists it in ``not_covered`` with the reason. A block whose weight alone is
empty (``nn.Linear(0, 3)`` with a bias) is a bias-only block: it is factored (``A = [[1]]``).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _planting import dead_unit_between_a_and_b
from torch import Tensor, nn

from neuromanifold import read
from neuromanifold.singular.blocks import gradient_positions, patches
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian

D = torch.float64
N = 32
G_RTOL = 1e-12
"""The bias-only block's ``G`` against its closed form: a float64 mean of ``N = 32`` equal
rank-one terms, so rounding only (a few ulps per term)."""


class _Branch(nn.Module):
    """The trial's model (J#6): ``b(cat[relu(a(x)), z(x)])`` with the side branch ``z`` of width
    ``extra``; ``branch=False`` is the same model without it. Hidden unit 3 of ``a`` is dead."""

    def __init__(self, extra: int = 0, branch: bool = True) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        if branch:
            self.z = nn.Linear(4, extra)
        self.b = nn.Linear(6 + extra, 2)

    def forward(self, x: Tensor) -> Tensor:
        side = [self.z(x)] if hasattr(self, "z") else []
        return self.b(torch.cat([torch.relu(self.a(x)), *side], -1))


class _BiasOnly(nn.Module):
    """The trial's second variant: ``nn.Linear(0, 3)`` applied to ``x[:, :0]``, so only its bias
    reaches the output, through columns 6..8 of ``b``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.z = nn.Linear(0, 3)
        self.b = nn.Linear(9, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(torch.cat([torch.relu(self.a(x)), self.z(x[:, :0])], -1))


def _models() -> tuple[nn.Module, nn.Module, Tensor]:
    """The model with the width-0 branch, the same model without it (equal ``a``, ``b``), data."""
    torch.manual_seed(0)
    with warnings.catch_warnings():  # torch: "Initializing zero-element tensors is a no-op"
        warnings.simplefilter("ignore", UserWarning)
        with_z = dead_unit_between_a_and_b(_Branch(0))
    without = _Branch(branch=False).to(D).eval()
    without.load_state_dict({k: v for k, v in with_z.state_dict().items() if k[0] != "z"})
    return with_z, without, torch.randn(N, 4, dtype=D)


def _kinds(reading) -> set[tuple[tuple[str, ...], str, str]]:
    return {(d.layers, d.detector, d.klass) for d in reading.directions}


def test_empty_linear_branch_is_listed_and_the_rest_is_read_as_without_it() -> None:
    with_z, without, x = _models()
    got = read(with_z, x, Gaussian(), progress=False)
    want = read(without, x, Gaussian(), progress=False)
    (z,) = [e for e in got.not_covered if e.name == "z"]
    assert z.type == "Linear" and z.n_params == 0
    assert "zero-size block (weight of shape (0, 4)" in z.reason
    assert "no directions to read" in z.reason
    assert [e for e in got.not_covered if e.name != "z"] == list(want.not_covered)
    # cat with an empty tensor is the identity: every record and sweep bitwise
    assert [d.to_dict() for d in got.directions] == [d.to_dict() for d in want.directions]
    assert got.note == want.note
    # the planted dead unit: a's row 3 (G kernel) and b's column 3 (A kernel), both exactly flat
    assert {(("a",), "kfac-G", "flat_gauge"), (("b",), "kfac-A", "flat_gauge")} <= _kinds(got)


def test_factor_pass_skips_the_empty_block_with_the_reason() -> None:
    with_z, without, x = _models()
    got = kfac_factors(with_z, x, Gaussian())
    want = kfac_factors(without, x, Gaussian())
    assert "z" not in got and list(got) == list(want) == ["a", "b"]
    assert got.skipped["z"].startswith("zero-size block (weight of shape (0, 4), empty bias)")
    for n in want:
        assert torch.equal(got[n].A, want[n].A) and torch.equal(got[n].G, want[n].G), n


def test_bias_only_block_is_factored_in_closed_form_and_read() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        m = dead_unit_between_a_and_b(_BiasOnly())
    x = torch.randn(N, 4, dtype=D)
    family = Gaussian()
    z = kfac_factors(m, x, family)["z"]
    # the block's only input coordinate is the bias augmentation: A = [[1]]
    assert torch.equal(z.A, torch.ones(1, 1, dtype=D))
    # its score is g = W_cᵀ (y − f)/σ² with W_c = b.weight[:, 6:9]: G = W_cᵀ W_c / σ² (Gaussian)
    w_c = m.b.weight.detach()[:, 6:9]
    g_closed = w_c.T @ w_c / family.sigma**2
    assert torch.allclose(z.G, g_closed, rtol=G_RTOL, atol=G_RTOL * float(g_closed.abs().max()))
    reading = read(m, x, family, progress=False)
    assert all(e.name != "z" for e in reading.not_covered)  # its bias is read
    # G has rank 2 (two outputs) on 3 bias entries: its kernel moves z.bias along the null
    # space of W_c, which the output never sees
    kinds = _kinds(reading)
    assert (("z",), "kfac-G", "flat_gauge") in kinds
    assert {(("a",), "kfac-G", "flat_gauge"), (("b",), "kfac-A", "flat_gauge")} <= kinds


@pytest.mark.parametrize(("d_in", "d_out"), [(0, 3), (4, 0)])
def test_linear_positions_of_zero_width_layers(d_in: int, d_out: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lin = nn.Linear(d_in, d_out).to(D)
    x = torch.randn(5, 7, d_in, dtype=D)
    assert patches(lin, x).shape == (5, 7, d_in)
    assert gradient_positions(lin, torch.randn(5, 7, d_out, dtype=D)).shape == (5, 7, d_out)
    assert patches(lin, torch.randn(5, d_in, dtype=D)).shape == (5, 1, d_in)
