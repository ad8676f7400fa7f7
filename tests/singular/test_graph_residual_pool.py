"""Skip edges past the pooled head of a residual network (ResNet's ``fc(h.mean((2, 3)))``).

A residual sum of channel-wise terms (convolution outputs, a ReLU of one, an earlier such sum)
keeps every channel on dimension 1, so pooling that keeps channels passes after it as after a
convolution, and the summands reach the Linear head as skip edges. A node death planted through
the skip then reads as one order-2 ``duality`` chain, as it does with a 1×1 convolution after
the sum. A sum whose units are not channels (Linear outputs, units on the last axis) and a sum
with a term of no known layout are not followed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold import Gaussian, read, read_direction
from neuromanifold.singular.detectors import trace_graph
from neuromanifold.singular.detectors.graph_steps import channel_label

N, C_IN, C, S, D_OUT = 96, 2, 4, 6, 3
DEAD = 1  # the stream channel nothing writes and the head does not read
GENUINE_K = 2  # c2 row DEAD × fc column DEAD: a product of two zero factors, order 2


def _mean(h: Tensor) -> Tensor:
    return h.mean((2, 3))


def _adaptive_flatten(h: Tensor) -> Tensor:
    return F.adaptive_avg_pool2d(h, 1).flatten(1)


def _max_view(h: Tensor) -> Tensor:
    return F.max_pool2d(h, S).view(h.shape[0], -1)


class _Res(nn.Module):
    """``h = relu(stem(x)); h = h + c2(relu(c1(h))) [; h = h + c4(relu(c3(h)))];
    fc(pool(h))``."""

    def __init__(self, pool: Callable[[Tensor], Tensor] = _mean, blocks: int = 1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(C_IN, C, 3, padding=1)
        self.c1 = nn.Conv2d(C, C, 3, padding=1)
        self.c2 = nn.Conv2d(C, C, 3, padding=1)
        if blocks == 2:
            self.c3 = nn.Conv2d(C, C, 3, padding=1)
            self.c4 = nn.Conv2d(C, C, 3, padding=1)
        self.fc = nn.Linear(C, D_OUT)
        self.pool, self.blocks = pool, blocks

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        h = h + self.c2(torch.relu(self.c1(h)))
        if self.blocks == 2:
            h = h + self.c4(torch.relu(self.c3(h)))
        return self.fc(self.pool(h))


def _x() -> Tensor:
    torch.manual_seed(0)
    return torch.randn(N, C_IN, S, S, dtype=torch.float64)


def _dead_stream() -> _Res:
    """The audit's model (s11 trial G, finding 4): stream channel ``DEAD`` is written by no
    block and read by no head column."""
    torch.manual_seed(0)
    m = _Res().double()
    with torch.no_grad():
        for conv in (m.stem, m.c2):
            conv.weight[DEAD] = 0
            conv.bias[DEAD] = 0
        m.fc.weight[:, DEAD] = 0
    return m.eval()


@pytest.mark.parametrize("pool", [_mean, _adaptive_flatten, _max_view])
def test_pooling_after_a_channelwise_sum_gives_the_head_a_skip_edge(pool) -> None:
    g = trace_graph(_Res(pool).double(), _x())
    assert "fc" in g.skips.get("c2", ())
    assert "fc" not in g.consumers.get("c2", ())  # a skip edge, not a direct one


def test_an_earlier_channelwise_sum_is_a_channelwise_summand() -> None:
    g = trace_graph(_Res(blocks=2).double(), _x())
    assert "fc" in g.skips.get("c2", ())
    assert "fc" in g.skips.get("c4", ())


def test_node_death_through_the_skip_reads_as_one_order_two_chain() -> None:
    m, x = _dead_stream(), _x()
    r = read(m, x, Gaussian(1.0), progress=False)
    chains = [d for d in r.directions if d.detector == "duality" and d.layers == ("c2", "fc")]
    assert len(chains) == 1
    assert chains[0].klass == "genuine_singularity"
    assert chains[0].k == GENUINE_K
    # the hand-made diagonal (c2 row DEAD, fc column DEAD) is read the same way on its own
    params = {k: v.detach() for k, v in m.named_parameters()}
    u = {"c2.weight": torch.zeros_like(m.c2.weight), "fc.weight": torch.zeros_like(m.fc.weight)}
    u["c2.weight"][DEAD] = 1.0
    u["fc.weight"][:, DEAD] = 1.0
    d = read_direction(m, params, u, x, Gaussian(1.0))
    assert (d.klass.value, d.k) == ("genuine_singularity", GENUINE_K)


def test_the_skip_chain_s_g_vector_is_not_proposed_again_one_sided() -> None:
    """A linked G vector is explained by its chain and not proposed one-sided (LinearDetector,
    step 2); for a skip chain it was, giving a second record ``c2 kfac-G`` (flat: c2's row DEAD
    with the top input, which fc does not read) next to ``c2+fc``. c2's other one-sided G mode,
    not linked to anything, is still proposed (it reads live here)."""
    r = read(_dead_stream(), _x(), Gaussian(1.0), progress=False)
    assert any(d.layers == ("c2", "fc") for d in r.directions)
    one_sided = [d.klass for d in r.directions if d.layers == ("c2",) and d.detector == "kfac-G"]
    assert one_sided == ["live"]


class _LinearRes(nn.Module):
    """The same shape of network over Linear layers: units on the last axis, so a mean over
    dimension 2 mixes the units and must not pass."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(S, C)
        self.c1 = nn.Linear(C, C)
        self.c2 = nn.Linear(C, C)
        self.fc = nn.Linear(C_IN, D_OUT)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        h = h + self.c2(torch.relu(self.c1(h)))
        return self.fc(h.mean(2))


class _OffsetRes(_Res):
    """A channel-wise sum plus a constant tensor of no known layout: not channel-wise."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.ones(S, S))

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        h = h + self.c2(torch.relu(self.c1(h))) + self.offset
        return self.fc(h.mean((2, 3)))


class _FlattenRes(_Res):
    """A flatten of the whole summed feature map: channel c becomes a block of S·S columns,
    which a skip edge (no steps recorded) could not tell, so it is not followed."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(C * S * S, D_OUT)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        h = h + self.c2(torch.relu(self.c1(h)))
        return self.fc(h.flatten(1))


def test_a_sum_whose_units_are_not_channels_is_not_pooled_into_the_head() -> None:
    x = torch.randn(N, C_IN, S, dtype=torch.float64)
    g = trace_graph(_LinearRes().double(), x)
    assert all("fc" not in sinks for sinks in g.skips.values())
    # the call alone would pass as a channel-keeping mean: only the units' layout excludes it
    h = torch.zeros(N, C_IN, C, dtype=torch.float64)
    assert channel_label(Tensor.mean, (h, 2), {}, h.mean(2), True) == "Mean"


@pytest.mark.parametrize("model", [_OffsetRes, _FlattenRes])
def test_sums_the_rule_excludes_give_the_head_no_skip_edge(model) -> None:
    g = trace_graph(model().double(), _x())
    assert all("fc" not in sinks for sinks in g.skips.values())
