"""The data-flow graph through elementwise functions called inside a ``forward``, and through
pooling that keeps every channel apart.

``F.relu(fc1(x))`` must give the same edge as ``nn.ReLU()(fc1(x))`` (same ``via`` label), so the
detectors that follow edges (ReLU rescale, duality chains) see models written either way; a
function that is not elementwise (a product, a reshape) still breaks the chain.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold.singular.detectors import DetectionContext, ReLURescaleDetector, trace_graph
from neuromanifold.singular.detectors.graph import ELEMENTWISE, FUNCTIONAL_ELEMENTWISE
from neuromanifold.singular.family import Gaussian


class _MLP(nn.Module):
    """``fc2(act(fc1 x))`` with ``act`` a function applied inside ``forward``."""

    def __init__(self, act: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.fc2 = nn.Linear(5, 2)
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


FUNCTIONS = {
    "F.relu": (F.relu, ("ReLU",)),
    "torch.relu": (torch.relu, ("ReLU",)),
    "Tensor.relu": (Tensor.relu, ("ReLU",)),
    "in-place relu": (lambda z: F.relu(z, inplace=True), ("ReLU",)),
    "leaky_relu": (lambda z: F.leaky_relu(z, 0.1), ("LeakyReLU",)),
    "tanh then gelu": (lambda z: F.gelu(torch.tanh(z)), ("Tanh", "GELU")),
    "eval dropout": (lambda z: F.dropout(z, 0.5, training=False), ("Dropout",)),
}


def _x() -> Tensor:
    return torch.randn(6, 3, dtype=torch.float64)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functional_activation_continues_the_chain(name: str) -> None:
    act, via = FUNCTIONS[name]
    torch.manual_seed(0)
    graph = trace_graph(_MLP(act).double(), _x())
    assert graph.consumers["fc1"] == ("fc2",)
    assert graph.via[("fc1", "fc2")] == via


def test_functional_and_module_relu_give_the_same_graph() -> None:
    torch.manual_seed(0)
    functional = trace_graph(_MLP(F.relu).double(), _x())
    module = trace_graph(_MLP(nn.ReLU()).double(), _x())
    assert functional.consumers == module.consumers
    assert functional.via == module.via


def test_a_product_breaks_the_chain() -> None:
    torch.manual_seed(0)
    graph = trace_graph(_MLP(lambda z: F.relu(z) * z).double(), _x())
    assert "fc1" not in graph.consumers


def test_functional_relu_gets_the_rescale_gauge() -> None:
    torch.manual_seed(0)
    model = _MLP(F.relu).double()
    ctx = DetectionContext.from_model(model, torch.randn(32, 3, dtype=torch.float64), Gaussian())
    (cand,) = ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx)
    assert cand.gauge == "curved" and set(cand.u) == {"fc1.weight", "fc1.bias", "fc2.weight"}


def test_every_label_names_an_elementwise_module() -> None:
    """The labels are class names of `ELEMENTWISE` modules (``via`` reads the same either way)."""
    names = {cls.__name__ for cls in ELEMENTWISE}
    assert set(FUNCTIONAL_ELEMENTWISE.values()) <= names


class _ConvHead(nn.Module):
    """``head(pool(relu(conv2(relu(conv1 x)))))`` with ``pool`` a function of the feature map."""

    def __init__(self, pool: Callable[[Tensor], Tensor], n_in: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, 3, padding=1)
        self.conv2 = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(n_in, 2)
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        z = F.relu(self.conv2(F.max_pool2d(F.relu(self.conv1(x)), 2)))
        return self.head(self.pool(z))


CHANNEL_POOLS = {
    "global average": (
        lambda z: torch.flatten(F.adaptive_avg_pool2d(z, 1), 1),
        4,
        ("ReLU", "AdaptiveAvgPool", "Flatten"),
    ),
    "spatial mean": (lambda z: z.mean(dim=(-2, -1)), 4, ("ReLU", "Mean")),
    "global max": (
        lambda z: F.adaptive_max_pool2d(z, 1).flatten(1),
        4,
        ("ReLU", "AdaptiveMaxPool", "Flatten"),
    ),
    "channel mean": (lambda z: z.mean(1).flatten(1), 4, None),  # (N, 2, 2) → (N, 4): mixes
    "feature-map flatten": (lambda z: z.flatten(1), 16, ("ReLU", "FlattenChannels")),
    "feature-map view": (lambda z: z.view(z.shape[0], -1), 16, ("ReLU", "FlattenChannels")),
    "view then dropout": (
        lambda z: F.dropout(z.view(z.shape[0], -1), 0.5, training=False),
        16,
        ("ReLU", "FlattenChannels", "Dropout"),
    ),
    "token-major reshape": (lambda z: z.transpose(1, 3).reshape(z.shape[0], -1), 16, None),
}


def _conv_head_with(pool: Callable[[Tensor], Tensor], n_in: int) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return _ConvHead(pool, n_in).double(), torch.randn(24, 1, 4, 4, dtype=torch.float64)


def _conv_head(name: str) -> tuple[nn.Module, Tensor]:
    pool, n_in, _ = CHANNEL_POOLS[name]
    return _conv_head_with(pool, n_in)


@pytest.mark.parametrize("name", sorted(CHANNEL_POOLS))
def test_channelwise_pooling_continues_the_chain_and_nothing_else_does(name: str) -> None:
    model, x = _conv_head(name)
    graph = trace_graph(model, x[:4])
    assert graph.via[("conv1", "conv2")] == ("ReLU", "MaxPool")
    via = CHANNEL_POOLS[name][2]
    if via is None:
        assert "conv2" not in graph.consumers
    else:
        assert graph.consumers["conv2"] == ("head",) and graph.via[("conv2", "head")] == via


@pytest.mark.parametrize(
    "name", ["global average", "spatial mean", "feature-map view", "view then dropout"]
)
def test_rescale_through_pooling_is_proposed_and_certified(name: str) -> None:
    model, x = _conv_head(name)
    ctx = DetectionContext.from_model(model, x, Gaussian())
    for producer, consumer in (("conv1", "conv2"), ("conv2", "head")):
        (cand,) = ReLURescaleDetector().propose(producer, ctx.model.get_submodule(producer), ctx)
        assert cand.layers == (producer, consumer) and cand.info["certified"] == 0.0


@pytest.mark.parametrize(
    ("act", "via"),
    [
        (nn.ReLU(inplace=True), ("ReLU",)),
        (nn.LeakyReLU(0.1, inplace=True), ("LeakyReLU",)),
        (nn.Dropout(0.5), ("Dropout",)),  # evaluation mode: returns its input object
        (nn.Sequential(nn.ReLU(inplace=True), nn.Dropout(0.2)), ("ReLU", "Dropout")),
    ],
)
def test_module_that_returns_or_changes_its_input_is_labelled_once(act, via) -> None:
    torch.manual_seed(0)
    model = _MLP(act).double().eval()
    graph = trace_graph(model, _x())
    assert graph.via[("fc1", "fc2")] == via


def test_in_place_relu_module_gets_the_rescale_gauge() -> None:
    torch.manual_seed(0)
    model = _MLP(nn.ReLU(inplace=True)).double()
    ctx = DetectionContext.from_model(model, torch.randn(32, 3, dtype=torch.float64), Gaussian())
    (cand,) = ReLURescaleDetector().propose("fc1", ctx.model.fc1, ctx)
    assert cand.info["certified"] == 0.0


@pytest.mark.parametrize(
    ("last", "output"),
    [(nn.Identity(), "fc2"), (nn.Dropout(0.1), "fc2"), (nn.Tanh(), None), (torch.tanh, None)],
)
def test_graph_output_is_a_source_only_without_an_activation(last, output) -> None:
    """The model output is ``fc2``'s own output (logits) only through Identity/Dropout."""

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = _MLP(nn.ReLU())
            self.last = last

        def forward(self, x: Tensor) -> Tensor:
            return self.last(self.body(x))

    torch.manual_seed(0)
    assert trace_graph(Head().double().eval(), _x()).output == (
        None if output is None else f"body.{output}"
    )


class _TokenMLP(nn.Module):
    """``head(pool(relu(fc(x))))`` on tokens ``(N, T, d)``: ``fc``'s units are the last axis."""

    def __init__(self, pool: Callable[[Tensor], Tensor], n_in: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(n_in, 2)
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(F.relu(self.fc(x))))


@pytest.mark.parametrize(
    ("pool", "n_in"),
    [
        (lambda z: z.mean(-1), 4),  # over fc's own units
        (lambda z: F.max_pool1d(z, 1).mean(-1), 4),
        (lambda z: z.view(z.shape[0], -1), 16),  # token-major: unit j is every 4th column
    ],
)
def test_pooling_after_a_linear_is_no_channelwise_step(pool, n_in: int) -> None:
    """Channelwise steps apply to sources whose units are channels (dimension 1) only."""
    torch.manual_seed(0)
    graph = trace_graph(_TokenMLP(pool, n_in).double(), torch.randn(6, 4, 4, dtype=torch.float64))
    assert "fc" not in graph.consumers


@pytest.mark.parametrize(
    ("pool", "n_in"),
    [
        (lambda z: z.reshape(z.shape[0], 2, -1).flatten(1), 16),  # regroups channels
        (lambda z: F.adaptive_max_pool2d(z, 1, return_indices=True)[0].flatten(1), 4),
    ],
)
def test_other_reshapes_and_indexed_pooling_break_the_chain(pool, n_in: int) -> None:
    torch.manual_seed(0)
    model = _ConvHead(pool, n_in).double()
    graph = trace_graph(model, torch.randn(6, 1, 4, 4, dtype=torch.float64))
    assert "conv2" not in graph.consumers


class _Write(nn.Module):
    """``b(write(a(x)))`` and the output written by ``last``: in-place changes of the tensors."""

    def __init__(self, write, last=None) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)
        self.write, self.last = write, last

    def forward(self, x: Tensor) -> Tensor:
        h = self.a(x)
        self.write(h)
        y = self.b(h)
        if self.last is not None:
            self.last(y)
        return y


def _set_first(h: Tensor) -> None:
    h[:, 0] = 0.0


WRITES = {
    "tanh_": (Tensor.tanh_, False),
    "setitem": (_set_first, False),
    "through a view": (lambda h: h.view(-1).mul_(3.0), False),
    "out=": (lambda h: torch.mul(h, 2.0, out=h), False),
    "requires_grad_": (lambda h: h.requires_grad_(False), True),  # no value changes
    "detach_": (Tensor.detach_, True),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_an_in_place_write_ends_a_sources_output(name: str) -> None:
    """Any write into the tensor (its version counter moves) voids what the graph knew of it;
    calls that change no value keep the edge."""
    write, kept = WRITES[name]
    torch.manual_seed(0)
    graph = trace_graph(_Write(write, last=write).double(), _x())
    assert ("a" in graph.consumers) is kept
    assert (graph.output == "b") is kept


def test_chained_spatial_reductions_keep_the_channels() -> None:
    """``mean(-1)`` twice: the first leaves ``(N, C, H)``, still channels first."""
    model, x = _conv_head_with(lambda z: z.mean(-1).mean(-1), 4)
    graph = trace_graph(model, x[:4])
    assert graph.via[("conv2", "head")] == ("ReLU", "Mean", "Mean")
    ctx = DetectionContext.from_model(model, x, Gaussian())
    (cand,) = ReLURescaleDetector().propose("conv2", ctx.model.conv2, ctx)
    assert cand.info["certified"] == 0.0
