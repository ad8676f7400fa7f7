"""Errors every rank meets alike are marked as agreed (`distributed.mark_agreed`), so that the CLI
prints them once; an error of one rank's own shard is not marked and is printed by that rank.
Before, the CLI repeated the read's private input check to tell the two apart, and errors of the
memory plan (agreed over the ranks) were printed by every rank."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from neuromanifold.singular import distributed as dp
from neuromanifold.singular.family import Gaussian
from neuromanifold.singular.read import read


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _x(n: int = 8) -> torch.Tensor:
    return torch.randn(n, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_agreed_errors_marks_value_and_type_errors_only() -> None:
    for kind in (ValueError, TypeError):
        with pytest.raises(kind, match="boom") as info, dp.agreed_errors():
            raise kind("boom")
        assert dp.is_agreed(info.value)
    with pytest.raises(RuntimeError, match="boom") as info, dp.agreed_errors():
        raise RuntimeError("boom")
    assert not dp.is_agreed(info.value)
    assert not dp.is_agreed(ValueError("unmarked"))


def test_input_and_argument_errors_of_read_are_agreed() -> None:
    x = _x()
    x[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or Inf values \(first in sample 5\)") as info:
        read(_mlp(), x, Gaussian(), progress=False)
    assert dp.is_agreed(info.value)
    with pytest.raises(ValueError, match="max_directions must be") as info:
        read(_mlp(), _x(), Gaussian(), max_directions=-1, progress=False)
    assert dp.is_agreed(info.value)
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module") as info:
        read("not a model", _x(), Gaussian(), progress=False)
    assert dp.is_agreed(info.value)


def test_memory_refusal_is_agreed() -> None:
    """The memory plan is the same on every rank (all-reduced sizes): its refusal is agreed."""
    with pytest.raises(ValueError, match="raise --max-memory") as info:
        read(_mlp(), _x(), Gaussian(), max_memory=1, progress=False)
    assert dp.is_agreed(info.value)


def test_an_error_of_the_forward_pass_on_this_shard_is_not_agreed() -> None:
    """A model that fails on the data is this rank's own error: its shard may differ."""
    x4 = torch.randn(8, 4, dtype=torch.float64)  # the first Linear wants 3 features
    with pytest.raises(ValueError, match="data of shape") as info:
        read(_mlp(), x4, Gaussian(), progress=False)
    assert not dp.is_agreed(info.value)


def test_parameter_and_mode_checks_are_agreed() -> None:
    """Audit s11 #1: a NaN parameter and a module in training mode are the same on every rank;
    they were printed once per rank."""
    from neuromanifold.singular.family import Categorical

    bad = _mlp()
    with torch.no_grad():
        bad[0].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"parameter '0\.weight' holds NaN or Inf") as info:
        read(bad, _x(), Gaussian(), progress=False)
    assert dp.is_agreed(info.value)
    train = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Linear(4, 2)).double().train()
    with pytest.raises(ValueError, match="training mode") as info:
        read(train, _x(), Gaussian(), progress=False)
    assert dp.is_agreed(info.value)
    with pytest.raises(TypeError, match="model output must be a Tensor") as info:
        read(_TupleOut(), _x(), Categorical(), progress=False)
    assert dp.is_agreed(info.value)  # the output's type does not depend on the shard


class _TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2).double()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.fc(x),)


def test_output_shape_checks_are_this_ranks_own() -> None:
    """Audit S12 #1: the output's shape can depend on the shard's size. A model ending in
    ``squeeze()`` gives (N, 2) logits on a shard of N ≥ 2 samples but (2,) on a one-sample
    shard, so only that rank fails: its error must not be marked agreed (printed by rank 0
    only, it vanished when rank 0's shard was the larger one)."""
    from neuromanifold.singular.family import Categorical

    squeeze = nn.Sequential(_mlp(), _Squeeze())
    reading = read(squeeze, _x(4), Categorical(), max_directions=0, progress=False)
    assert reading.meta["n_samples"] == 4  # a shard of several samples reads
    with pytest.raises(ValueError, match=r"returned shape \(2,\) for 1 samples") as info:
        read(squeeze, _x(1), Categorical(), progress=False)
    assert not dp.is_agreed(info.value)
    one = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)).double()  # (N,) output
    with pytest.raises(ValueError, match="Categorical family expects floating logits") as info:
        read(one, _x(), Categorical(), progress=False)
    assert not dp.is_agreed(info.value)


class _Squeeze(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze()
