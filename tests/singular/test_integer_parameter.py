"""A model holding an integer ``nn.Parameter`` (user trial s19 AK #3).

``Net`` scales its output by ``nn.Parameter(torch.tensor([2, 3, 1]), requires_grad=False)``.
The factor pass's float64 copy called ``requires_grad_(True)`` on every parameter, so
``kfac_factors`` (and the whole read) crashed with torch's "only Tensors of floating point dtype
can require gradients"; a direction along the integer parameter failed with torch's "Expected
primal to be floating point", which does not name the key.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.factor_inputs import float64_copy
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.fisher import directional_fisher

SCALE = (2, 3, 1)


class _Net(nn.Module):
    """Linear → tanh → Linear, times a fixed per-output scale held as an integer parameter
    (``as_buffer``: the same scale as a float64 buffer, the reference)."""

    def __init__(self, *, as_buffer: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(5, 4), nn.Linear(4, 3)
        if as_buffer:
            self.register_buffer("scale", torch.tensor(SCALE, dtype=torch.float64))
        else:
            self.scale = nn.Parameter(torch.tensor(SCALE), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(torch.tanh(self.a(x))) * self.scale


def _x() -> Tensor:
    return torch.randn(11, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_float64_copy_leaves_the_integer_parameter_frozen() -> None:
    m = float64_copy(_Net().double(), None)
    named = dict(m.named_parameters())
    assert named["scale"].dtype == torch.int64 and not named["scale"].requires_grad
    assert torch.equal(named["scale"], torch.tensor(SCALE))
    assert all(
        named[k].dtype == torch.float64 and named[k].requires_grad for k in named if k != "scale"
    )


def test_factors_equal_those_of_the_same_model_with_a_float_buffer() -> None:
    got = kfac_factors(_Net().double(), _x(), Gaussian())
    ref = kfac_factors(_Net(as_buffer=True).double(), _x(), Gaussian())
    assert set(got.blocks) == set(ref.blocks) == {"a", "b"}
    for name in ("a", "b"):
        torch.testing.assert_close(got[name].A, ref[name].A, rtol=0, atol=0)
        torch.testing.assert_close(got[name].G, ref[name].G, rtol=0, atol=0)


def test_direction_along_the_integer_parameter_is_refused_by_name() -> None:
    model = _Net().double().eval()
    params = dict(model.named_parameters())
    with pytest.raises(
        ValueError,
        match=r"direction u\['scale'\] is along parameter 'scale' of dtype torch\.int64.*"
        r"floating-point parameters only",
    ):
        directional_fisher(model, params, {"scale": torch.ones(3)}, _x(), Gaussian())
    along_a = {"a.weight": torch.ones(4, 5, dtype=torch.float64)}
    with pytest.raises(ValueError, match=r"direction u\[1\]\['scale'\] is along parameter 'scale'"):
        directional_fisher(model, params, [along_a, {"scale": torch.ones(3)}], _x(), Gaussian())


class _WideNet(_Net):
    """`_Net` with 16 inputs, more than the 11 probe samples: the first layer's ``A`` factor has a
    null space, so the read has candidate directions to read."""

    def __init__(self, *, as_buffer: bool = False) -> None:
        super().__init__(as_buffer=as_buffer)
        torch.manual_seed(0)
        self.a = nn.Linear(16, 4)


def test_whole_read_equals_that_of_the_same_model_with_a_float_buffer() -> None:
    """The read's rank pass (`probe_rank`) also leaves the integer parameter frozen, so the whole
    read runs and names the same directions, orders and classes as the float-buffer model."""
    from neuromanifold.singular.read import read

    x = torch.randn(11, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = read(_WideNet().double(), x, Gaussian(), progress=False)
    ref = read(_WideNet(as_buffer=True).double(), x, Gaussian(), progress=False)

    def key(r):
        return [(d.layers, d.detector, d.klass, d.k) for d in r.directions]

    assert len(ref.directions) > 0
    assert key(got) == key(ref)


def test_a_params_value_the_integer_parameter_cannot_store_is_refused_by_name() -> None:
    """``params`` replaces the parameters for the pass: an integral value is taken exactly (the
    factors equal those of the float-buffer model with that scale), a fraction is refused rather
    than truncated (s19 audit AM #5)."""
    scale = torch.tensor([4.0, 1.0, 2.0], dtype=torch.float64)
    got = kfac_factors(_Net().double(), _x(), Gaussian(), params={"scale": scale})
    ref_model = _Net(as_buffer=True).double()
    ref_model.scale.copy_(scale)
    ref = kfac_factors(ref_model, _x(), Gaussian())
    torch.testing.assert_close(got["b"].G, ref["b"].G, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"params\['scale'\] holds values that parameter 'scale'"):
        kfac_factors(_Net().double(), _x(), Gaussian(), params={"scale": torch.tensor([1.5, 1, 1])})


def test_a_direction_along_a_complex_parameter_is_refused_as_unsupported() -> None:
    model = _Net().double().eval()
    model.scale = nn.Parameter(torch.tensor(SCALE, dtype=torch.complex128), requires_grad=False)
    params = dict(model.named_parameters())
    with pytest.raises(ValueError, match=r"complex parameters are not supported"):
        directional_fisher(model, params, {"scale": torch.ones(3)}, _x(), Gaussian())
