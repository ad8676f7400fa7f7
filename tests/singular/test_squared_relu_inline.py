"""Squared ReLU written inline (``F.relu(h) ** 2``, ``h.square()``, ``h * h``, ``torch.pow``) or
inside a module of any name continues the data-flow chain, so its node death is read as one
duality chain of order 3 (spec §9.1 "Squared-ReLU node death | ∝ t⁴ | k = 3"), and the unit
rescaling through it has degree 2 (``relu(cz)² = c² relu(z)²``, c > 0).

Before, only a module named ``SquaredReLU`` (or marked ``elementwise = True``) continued the
chain: written any other way, the node death read as two unconnected flat gauges.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold.cells.planted import planted_mlp
from neuromanifold.singular.detectors import DetectionContext, ReLURescaleDetector, trace_graph
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read

K_HAT_TOL = 0.05  # |k̂ − k| on planted cells (as tests/singular/test_read.py)
R2_MIN = 0.99
# outputs of an exact reparametrisation (rescale a unit by 3 and its column by 3^−p) on O(1)
# outputs: rounding of the same sums, a few ε (as tests/singular/test_detectors.py ATOL_EXACT)
ATOL_EXACT = 1e-12
# the smallest relative output change a broken rescaling is allowed to show: a wrong degree
# changes the unit's contribution by a factor 3^±1, O(1) relative on these outputs
BROKEN_MIN = 1e-3


def _relu_square_by_mul(z: Tensor) -> Tensor:
    r = F.relu(z)
    return r * r


def _relu_square_by_torch_mul(z: Tensor) -> Tensor:
    r = F.relu(z)
    return torch.mul(r, r)


def _relu_square_in_place(z: Tensor) -> Tensor:
    r = F.relu(z)
    r **= 2
    return r


SQUARES: dict[str, Callable[[Tensor], Tensor]] = {
    "**2": lambda z: F.relu(z) ** 2,
    "**2.0": lambda z: torch.relu(z) ** 2.0,
    "Tensor.square": lambda z: F.relu(z).square(),
    "torch.square": lambda z: torch.square(F.relu(z)),
    "h*h": _relu_square_by_mul,
    "torch.mul(h, h)": _relu_square_by_torch_mul,
    "torch.pow": lambda z: torch.pow(F.relu(z), 2),
    "torch.pow exponent=": lambda z: torch.pow(F.relu(z), exponent=2),
    "Tensor.pow": lambda z: F.relu(z).pow(2),
    "in-place **=": _relu_square_in_place,
    "Tensor.square_": lambda z: F.relu(z).square_(),
}
READ_SQUARES = ("**2", "Tensor.square", "torch.square", "h*h", "torch.pow")


class _InlineMLP(nn.Module):
    """``fc2(square(fc1 x))`` with the activation written inside ``forward``."""

    def __init__(self, act: Callable[[Tensor], Tensor], d_in: int, hidden: int, d_out: int):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SqReLU(nn.Module):
    """A user's squared ReLU module: not named ``SquaredReLU``, no ``elementwise`` attribute."""

    def forward(self, z: Tensor) -> Tensor:
        return F.relu(z) ** 2


class ClampSquare(nn.Module):
    """``clamp(z, min=0)²``: the same function through ``clamp``, which the graph does not know."""

    def forward(self, z: Tensor) -> Tensor:
        return torch.clamp(z, min=0.0) ** 2


class MarkedClampSquare(ClampSquare):
    """`ClampSquare` marked elementwise by the user."""

    elementwise = True


def _x() -> Tensor:
    return torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _mlp(act: Callable[[Tensor], Tensor]) -> nn.Module:
    torch.manual_seed(0)
    return _InlineMLP(act, 3, 5, 2).double().eval()


@pytest.mark.parametrize("name", sorted(SQUARES))
def test_inline_square_continues_the_chain(name: str) -> None:
    graph = trace_graph(_mlp(SQUARES[name]), _x())
    assert graph.consumers["fc1"] == ("fc2",)
    assert graph.via[("fc1", "fc2")] == ("ReLU", "Square")


@pytest.mark.parametrize(
    ("act", "via"),
    [
        (lambda z: F.relu(z) ** 3, ("ReLU", "Pow(3)")),
        (lambda z: torch.tanh(z).pow(0.5), ("Tanh", "Pow(0.5)")),
        (lambda z: z * z, ("Square",)),
        (SqReLU(), ("ReLU", "Square")),  # traced into: the inline rule covers the module
        (MarkedClampSquare(), ("MarkedClampSquare",)),
        (lambda z: F.relu(z) * 2.0, ("ReLU", "Scale")),  # a constant factor (test_graph_scale)
    ],
)
def test_powers_and_user_modules_are_labelled(act, via) -> None:
    graph = trace_graph(_mlp(act), _x())
    assert graph.via[("fc1", "fc2")] == via


@pytest.mark.parametrize(
    "act",
    [
        lambda z: F.relu(z) * F.relu(z),  # two different tensors: a product
        lambda z: 2.0**z,  # a scalar base
        lambda z: z ** torch.tensor(2.0, dtype=torch.float64),  # a tensor exponent
        ClampSquare(),  # clamp is not recognised, and the module is not marked
    ],
)
def test_other_products_and_powers_break_the_chain(act) -> None:
    graph = trace_graph(_mlp(act), _x())
    assert "fc1" not in graph.consumers


@torch.no_grad()
def _relative_change(model: nn.Module, moved: nn.Module, x: Tensor) -> float:
    base = model(x)
    return float((moved(x) - base).abs().max() / base.abs().max())


def _rescaled(model: nn.Module, j: int, c: float, p: int) -> nn.Module:
    """``(c·W1[j], c·b1[j], W2[:, j]/c^p)``: the unit rescaling of degree ``p``."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        m.fc1.weight[j] *= c
        m.fc1.bias[j] *= c
        m.fc2.weight[:, j] /= c**p
    return m


@pytest.mark.parametrize(
    ("act", "degree"),
    [
        (SQUARES["**2"], 2),
        (SQUARES["h*h"], 2),
        (SqReLU(), 2),
        (lambda z: z.square(), 2),  # a square alone: (cz)² = c²z²
        (lambda z: F.relu(z) ** 3, 3),
        (lambda z: F.relu(F.relu(z)), 1),
        (lambda z: F.leaky_relu(z, 0.1).square(), 2),
    ],
)
def test_rescale_through_powers_has_the_product_degree(act, degree: int) -> None:
    model = _mlp(act)
    x = torch.randn(32, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx)
    assert cand.info["degree"] == degree and cand.info["certified"] == 0.0
    j = cand.info["unit"]
    # the law itself: rescaling unit j by c and its column by c^−p leaves the outputs unchanged;
    # any other degree does not
    assert _relative_change(model, _rescaled(model, j, 3.0, degree), x) <= ATOL_EXACT
    assert _relative_change(model, _rescaled(model, j, 3.0, degree + 1), x) >= BROKEN_MIN


@pytest.mark.parametrize(
    "act",
    [
        lambda z: torch.tanh(z) ** 2,  # tanh is not homogeneous
        lambda z: F.relu(z) ** 0.5,  # fractional degree: not an integer orbit
        MarkedClampSquare(),  # labelled by its class name, which names no known degree
    ],
)
def test_no_rescale_without_an_integer_homogeneous_chain(act) -> None:
    model = _mlp(act)
    ctx = DetectionContext.from_model(model, _x(), Gaussian())
    assert ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx) == []


def _planted(act: Callable[[Tensor], Tensor] | nn.Module) -> tuple[nn.Module, Tensor, tuple]:
    """The planted squared-ReLU node death of `planted_mlp`, its activation written as ``act``:
    inline in an `_InlineMLP` (a function) or as the middle module of the Sequential."""
    p = planted_mlp(activation="relu2", n=64, seed=11)
    if isinstance(act, nn.Module):
        model = copy.deepcopy(p.model)
        model[1] = act
        return model, p.data, ("0", "2")
    lin1, lin2 = p.model[0], p.model[2]
    model = _InlineMLP(act, lin1.in_features, lin1.out_features, lin2.out_features).double()
    model.fc1.load_state_dict(lin1.state_dict())
    model.fc2.load_state_dict(lin2.state_dict())
    return model.eval(), p.data, ("fc1", "fc2")


def _check_order_three(model: nn.Module, x: Tensor, layers: tuple[str, ...]) -> None:
    reading = read(model, x, Gaussian(), progress=False)
    (rec,) = [r for r in reading.directions if r.klass == "genuine_singularity"]
    assert rec.detector == "duality" and rec.layers == layers
    assert rec.k == 3 and abs(rec.k_hat - 3) <= K_HAT_TOL and rec.r2 >= R2_MIN


@pytest.mark.parametrize("name", READ_SQUARES)
def test_inline_squared_relu_node_death_reads_order_three(name: str) -> None:
    _check_order_three(*_planted(SQUARES[name]))


@pytest.mark.parametrize("act", [SqReLU(), MarkedClampSquare()], ids=lambda m: type(m).__name__)
def test_user_squared_relu_module_node_death_reads_order_three(act: nn.Module) -> None:
    _check_order_three(*_planted(act))
