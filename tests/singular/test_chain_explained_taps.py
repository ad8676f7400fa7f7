"""The consumer's taps of a linked unit are explained by its chain only when the consumer does not
read the unit (a node death). Trial G #1: a unit with zero incoming weights that the next layer
still reads links into a chain that reads live, and its consumer columns, exact flat directions,
were never proposed. They are now proposed one-sided (``kfac-A``) and read flat; a node death
(the consumer's columns zero too) still reads as its chain alone."""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold import Gaussian, read, read_direction
from neuromanifold.singular.detectors.linear import UNIT_READ_TOL, _reads_unit

DEAD = 2


def _mlp(read_by_consumer: bool) -> nn.Sequential:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3))
    m = m.double()
    with torch.no_grad():
        m[0].weight[DEAD] = 0.0
        m[0].bias[DEAD] = 0.0
        if not read_by_consumer:
            m[2].weight[:, DEAD] = 0.0
    return m.eval()


def _x() -> torch.Tensor:
    return torch.randn(64, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_taps_of_a_unit_the_consumer_reads_are_proposed_and_flat() -> None:
    m, x = _mlp(read_by_consumer=True), _x()
    r = read(m, x, Gaussian(1.0), progress=False)
    chains = [d for d in r.directions if d.detector == "duality" and d.layers == ("0", "2")]
    assert [d.klass for d in chains] == ["live"]
    taps = [d for d in r.directions if d.detector == "kfac-A" and d.layers == ("2",)]
    assert taps and all(d.klass == "flat_gauge" for d in taps)
    # the claim itself: the consumer's column of the dead unit is an exactly flat direction
    params = {k: v.detach() for k, v in m.named_parameters()}
    u = {"2.weight": torch.zeros_like(m[2].weight)}
    u["2.weight"][:, DEAD] = torch.randn(4, dtype=torch.float64)
    assert read_direction(m, params, u, x, Gaussian(1.0)).klass.value == "flat_gauge"


def test_a_node_death_still_reads_as_its_chain_alone() -> None:
    r = read(_mlp(read_by_consumer=False), _x(), Gaussian(1.0), progress=False)
    chains = [d for d in r.directions if d.detector == "duality" and d.layers == ("0", "2")]
    assert [(d.klass, d.k) for d in chains] == [("genuine_singularity", 2)]
    assert not [d for d in r.directions if d.detector == "kfac-A" and d.layers == ("2",)]


def test_reads_unit_threshold() -> None:
    lin = nn.Linear(4, 3).double()
    g = torch.zeros(4, dtype=torch.float64)
    g[DEAD] = 1.0
    assert _reads_unit(lin, g, 1)
    with torch.no_grad():
        lin.weight[:, DEAD] = 0.0
    assert not _reads_unit(lin, g, 1)
    with torch.no_grad():  # just below and above the relative threshold
        lin.weight[:, DEAD] = 0.0
        norm = float(lin.weight.norm())
        lin.weight[0, DEAD] = 0.5 * UNIT_READ_TOL * norm
    assert not _reads_unit(lin, g, 1)
    with torch.no_grad():
        lin.weight[0, DEAD] = 2.0 * UNIT_READ_TOL * norm
    assert _reads_unit(lin, g, 1)
