"""`relu-rescale` for a ReLU output read by several blocks (a ResNet block's 1×1 shortcut).

In ``h = relu(stem(x))`` read by both ``c1`` and the shortcut ``sc``, unit ``j`` of ``stem`` is
seen only through column ``j`` of both consumers, so ``stem[j] ×c, c1[:, j] /c, sc[:, j] /c``
(``c > 0``, ReLU of degree 1) leaves the model unchanged. Laws checked: that scaling is exact on
the model, the read proposes it as one ``relu-rescale`` on ``stem + c1 + sc`` and classes it
``curved_gauge``; when one consumer reads ``stem`` through GELU (not positively homogeneous) no
``relu-rescale`` on ``stem`` is proposed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold import Gaussian, read

EXACT_ATOL = 1e-12
"""Bound on ``max |f(g·θ) − f(θ)|`` for an exact symmetry: float64 rounding of outputs of order 1
through five layers (the scaling by factors in [0.5, 2] changes only the rounding)."""


class _Block(nn.Module):
    """stem → ReLU → {c1 → ReLU → c2, sc (1×1 shortcut)} → sum → ReLU → mean → fc.

    ``gelu_shortcut``: the shortcut reads ``gelu(stem(x))`` instead of the shared ReLU output.
    """

    def __init__(self, *, gelu_shortcut: bool = False) -> None:
        super().__init__()
        self.stem = nn.Conv2d(2, 4, 3, padding=1)
        self.c1 = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(6, 6, 3, padding=1)
        self.sc = nn.Conv2d(4, 6, 1, stride=2)
        self.fc = nn.Linear(6, 3)
        self.gelu_shortcut = gelu_shortcut

    def forward(self, x: Tensor) -> Tensor:
        s = self.stem(x)
        h = torch.relu(s)
        short = self.sc(F.gelu(s) if self.gelu_shortcut else h)
        return self.fc(torch.relu(self.c2(torch.relu(self.c1(h))) + short).mean((2, 3)))


def _setup(**kw: bool) -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    x = torch.randn(96, 2, 8, 8, dtype=torch.float64)
    return _Block(**kw).double().eval(), x


def _stem_rescales(model: nn.Module, x: Tensor) -> list:
    r = read(model, x, Gaussian(1.0), progress=False)
    return [d for d in r.directions if d.detector == "relu-rescale" and "stem" in d.layers]


def test_rescaling_against_both_consumers_is_exact() -> None:
    """The law the candidate rests on: per-unit factors c_j on stem's rows and bias, 1/c_j on the
    columns j of c1 and sc, leave every output unchanged."""
    model, x = _setup()
    c = torch.empty(4, dtype=torch.float64).uniform_(
        0.5, 2.0, generator=torch.Generator().manual_seed(1)
    )
    moved = _Block().double().eval()
    moved.load_state_dict(model.state_dict())
    with torch.no_grad():
        moved.stem.weight.mul_(c[:, None, None, None])
        moved.stem.bias.mul_(c)
        moved.c1.weight.div_(c[None, :, None, None])
        moved.sc.weight.div_(c[None, :, None, None])
        gap = float((moved(x) - model(x)).abs().max())
    assert gap <= EXACT_ATOL


def test_relu_output_read_by_two_convolutions_gets_relu_rescale() -> None:
    model, x = _setup()
    found = _stem_rescales(model, x)
    assert len(found) == 1
    assert found[0].layers[0] == "stem" and sorted(found[0].layers[1:]) == ["c1", "sc"]
    assert str(getattr(found[0].klass, "value", found[0].klass)) == "curved_gauge"


def test_consumer_through_gelu_gets_no_relu_rescale() -> None:
    """GELU is not positively homogeneous: scaling stem's unit changes what sc reads."""
    model, x = _setup(gelu_shortcut=True)
    assert _stem_rescales(model, x) == []
