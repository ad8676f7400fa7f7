"""`read` refuses a model whose forward is random (it needs a fixed function of θ), with one
line, instead of reading structure from noise or failing in a functorch traceback."""

from __future__ import annotations

import pytest
import torch
from _planting import dead_unit_between_a_and_b
from torch import Tensor, nn
from torch.nn import functional as F

from neuromanifold import read
from neuromanifold.singular.family import Gaussian

D = torch.float64
RANDOM = r"the model's forward is random: two evaluations on the same 16 probe samples"


class _MCDropout(nn.Module):
    """The trial's Monte Carlo dropout model (J#2): dropout hard-wired on in ``forward``, which
    no eval mode turns off; hidden unit 3 is dead."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 16)
        self.b = nn.Linear(16, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.b(F.dropout(torch.relu(self.a(x)), 0.3, training=True))


@pytest.mark.parametrize("per_layer", [False, True])
def test_mc_dropout_model_is_refused(per_layer: bool) -> None:
    torch.manual_seed(0)
    m = dead_unit_between_a_and_b(_MCDropout())
    x = torch.randn(64, 4, dtype=D)
    with pytest.raises(ValueError, match=RANDOM) as err:
        read(m, x, Gaussian(), progress=False, per_layer=per_layer)
    assert "F.dropout(..., training=True)" in str(err.value)
    assert "fixed function of its parameters" in str(err.value)
