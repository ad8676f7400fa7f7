"""A ``kfac-A`` record that reads flat says why: its input side is not excited on the probes.

s33 trial USER O1: a ReLU unit that never fires (bias −100) gave a ``flat_gauge`` record on its
consumer with only "F ≤ 10×floor on the whole grid" — the class's word "gauge" suggests a symmetry
of the model, while the direction is flat because the probe set never excites its input (O5: the
data-span kernel of an embedding reads the same way).
"""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular import Gaussian

CLAUSE = "the layer's inputs have no component, or a vanishing one, along the direction's input"


def test_a_never_firing_units_consumer_record_says_it_is_the_probe_sets_flatness() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double().eval()
    with torch.no_grad():
        model[0].bias[0] = -100.0  # unit 0 never fires on standard-normal inputs
    x = torch.randn(64, 3, dtype=torch.float64)
    reading = read(model, x, Gaussian(), progress=False)
    flat_a = [r for r in reading.directions if r.detector == "kfac-A"]
    assert flat_a and all(r.klass == "flat_gauge" for r in flat_a)
    for r in flat_a:
        assert CLAUSE in r.reason and "an input unit that never fires on them" in r.reason
    # the other records keep their own reasons: the clause is the kfac-A input side's
    assert all(CLAUSE not in r.reason for r in reading.directions if r.detector != "kfac-A")
