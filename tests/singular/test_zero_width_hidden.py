"""A hidden layer of zero width (a rank-0 adapter, a width-0 bottleneck) does not break the read.

Between a producer and a consumer through a ReLU, a zero-width layer is a rescaling orbit with no
unit (`UnitRescale`): it has no candidate, and the read lists the empty block in ``not_covered``.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from neuromanifold import read
from neuromanifold.singular.detectors.rescale import UnitRescale
from neuromanifold.singular.family import Gaussian

D = torch.float64
N = 32


def _quiet(build):
    with warnings.catch_warnings():  # torch: "Initializing zero-element tensors is a no-op"
        warnings.simplefilter("ignore", UserWarning)
        return build()


class _Adapter(nn.Module):
    """``head(h + up(relu(down(h))))``, ``h = relu(a(x))``: a residual bottleneck adapter of
    rank ``r``. ``adapter=False`` puts the rank-0 branch's value in its place instead: the
    buffer ``shift`` (= ``up.bias``, the branch's constant output), so the residual sum stays."""

    def __init__(self, r: int = 0, adapter: bool = True) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        if adapter:
            self.down = nn.Linear(8, r)
            self.up = nn.Linear(r, 8)
        else:
            self.register_buffer("shift", torch.zeros(8))
        self.head = nn.Linear(8, 2)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.a(x))
        branch = self.up(torch.relu(self.down(h))) if hasattr(self, "up") else self.shift
        return self.head(h + branch)


def test_orbit_without_units_has_empty_norms() -> None:
    params = {
        "p.weight": torch.randn(0, 4, dtype=D),
        "p.bias": torch.randn(0, dtype=D),
        "c.weight": torch.randn(2, 0, dtype=D),
    }
    orbit = UnitRescale(("p.weight", "p.bias"), ("c.weight",))
    assert orbit.n_units(params) == 0
    assert orbit.strength(params).shape == (0,)
    assert orbit.tangent_norms(params).shape == (0,)
    # units whose consumer columns are empty (a Linear(8, 0) reading them) have zero norm there
    params = {"p.weight": torch.randn(8, 4, dtype=D), "c.weight": torch.randn(0, 8, dtype=D)}
    orbit = UnitRescale(("p.weight",), ("c.weight",))
    assert torch.equal(orbit.strength(params), torch.zeros(8, dtype=D))
    assert torch.equal(orbit.tangent_norms(params), params["p.weight"].norm(dim=1))


def test_zero_width_chain_reads_with_no_record_on_it() -> None:
    torch.manual_seed(0)
    m = _quiet(lambda: nn.Sequential(nn.Linear(4, 0), nn.ReLU(), nn.Linear(0, 2)).to(D).eval())
    x = torch.randn(N, 4, dtype=D)
    got = read(m, x, Gaussian(), progress=False)
    (empty,) = [e for e in got.not_covered if e.name == "0"]
    assert empty.n_params == 0 and "no directions to read" in empty.reason
    # the model is f = b₂ (the bias of "2"): its Fisher is I/σ², so nothing is singular
    assert not [d for d in got.directions if "0" in d.layers]
    assert not [d for d in got.directions if d.klass != "live"]


def test_rank_zero_adapter_reads_the_other_layers_as_without_it() -> None:
    for seed in range(3):
        torch.manual_seed(seed)
        m = _quiet(lambda: _Adapter(0).to(D).eval())
        ref = _Adapter(adapter=False).to(D).eval()
        state = {k: v for k, v in m.state_dict().items() if k.split(".")[0] in ("a", "head")}
        ref.load_state_dict({**state, "shift": m.up.bias.detach()})
        x = torch.randn(N, 4, dtype=D)
        got = read(m, x, Gaussian(), progress=False)
        want = read(ref, x, Gaussian(), progress=False)
        assert [e.name for e in got.not_covered] == ["down"]
        assert not [d for d in got.directions if "down" in d.layers]
        # up is its bias alone, read by head: a flat gauge where head's weight is blind to it
        assert all(d.klass == "flat_gauge" for d in got.directions if "up" in d.layers)
        others = [d.to_dict() for d in got.directions if not {"up", "down"} & set(d.layers)]
        assert others == [d.to_dict() for d in want.directions], seed
