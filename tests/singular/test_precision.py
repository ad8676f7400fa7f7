"""Steps of a float64 forward below float64 are named in the reading (s27 trial HF D3: Hugging
Face's eager ViT attention takes its softmax in float32, and the reading said only that the
parameters were up-cast)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.precision import lower_precision_note, lower_precision_steps
from neuromanifold.singular.read import read


class _Mixer(nn.Module):
    """A token mixer whose attention weights come from a softmax taken in ``dtype``."""

    def __init__(self, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.score = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)
        self.dtype = dtype

    def forward(self, x: Tensor) -> Tensor:
        s = self.score(x) @ x.transpose(-1, -2)
        w = torch.softmax(s, -1, dtype=self.dtype).to(x.dtype)
        return self.out((w @ x).mean(1))


def _x() -> Tensor:
    return torch.randn(12, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_a_float32_softmax_is_named_and_a_float64_forward_is_not() -> None:
    low = _Mixer(torch.float32).double()
    assert lower_precision_steps(low, _x()) == {"torch.softmax": "float32"}
    assert lower_precision_steps(_Mixer(None).double(), _x()) == {}
    reading = read(low, _x(), Gaussian(), max_directions=0, progress=False)
    assert reading.meta["lower_precision_steps"] == {"torch.softmax": "float32"}
    assert "torch.softmax → float32" in reading.note
    clean = read(_Mixer(None).double(), _x(), Gaussian(), max_directions=0, progress=False)
    assert clean.meta["lower_precision_steps"] == {}
    assert "below float64" not in clean.note


def test_the_note_names_ten_steps_and_counts_the_rest() -> None:
    steps = {f"f{i}": "float16" for i in range(12)}
    note = lower_precision_note(steps)
    assert "f8 → float16, f9 → float16 and 2 more" in note and "f10" not in note
    assert lower_precision_note({}) == ""
