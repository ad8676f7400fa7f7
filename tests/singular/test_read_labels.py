"""`read` with labels: their checks before the read (s21 trial AS #7, #8).

#7: a NaN or Inf in floating labels made the labelled-loss check NaN (``info["loss_along_u"]``
with ``slope: nan``, unflagged, and a literal NaN in the JSON); such labels are refused up front,
naming the first bad sample, by its index in the whole probe set under data parallelism."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from neuromanifold.singular import distributed as dp
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import GRAPH_SAMPLES, read

N = 50  # more than GRAPH_SAMPLES: the early checks see a sub-batch
NOISE = 0.1  # label noise around the model's outputs


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _xy(n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    with torch.no_grad():
        y = _mlp()(x) + NOISE * torch.randn(n, 2, dtype=torch.float64, generator=gen)
    return x, y


@pytest.mark.parametrize(("bad", "value"), [(3, float("nan")), (40, float("inf"))])
def test_non_finite_labels_are_refused_naming_the_first_bad_sample(bad: int, value: float) -> None:
    assert N > 40 > GRAPH_SAMPLES  # sample 40 lies beyond the early checks' sub-batch
    x, y = _xy()
    y[bad, 1] = value
    y[bad + 5, 0] = float("nan")  # a later bad sample is not the one named
    with pytest.raises(
        ValueError, match=rf"^data labels y hold NaN or Inf values \(first in sample {bad}\)$"
    ) as info:
        read(_mlp(), (x, y), Gaussian(), max_directions=0, progress=False)
    assert dp.is_agreed(info.value)


def test_non_finite_inputs_are_named_before_non_finite_labels() -> None:
    x, y = _xy()
    x[7, 0] = float("nan")
    y[2, 0] = float("nan")
    with pytest.raises(
        ValueError, match=r"^data inputs hold NaN or Inf values \(first in sample 7"
    ):
        read(_mlp(), (x, y), Gaussian(), max_directions=0, progress=False)


def nan_label_in_the_second_shard() -> SimpleNamespace:
    """Factory for `launch_local`: 7 labelled samples (shards [0, 3) and [3, 7)) with a NaN in
    the labels of sample 6, which only rank 1 holds."""
    x, y = _xy(7)
    y[6, 1] = float("nan")
    return SimpleNamespace(model=_mlp(), data=(x, y), family=Gaussian())


def test_a_non_finite_label_in_one_shard_is_named_by_its_global_index() -> None:
    with pytest.raises(
        ValueError, match=r"^data labels y hold NaN or Inf values \(first in sample 6\)"
    ):
        dp.launch_local(
            2, "test_read_labels:nan_label_in_the_second_shard", read_kwargs={"progress": False}
        )
