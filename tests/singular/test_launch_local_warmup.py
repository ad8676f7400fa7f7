"""`launch_local`'s untimed warm-up read runs for labelled probe sets too (s21 trial AT,
suggestion 3: it ran only when the data was a tensor, so a labelled read's timing held its
first-call costs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from neuromanifold.singular.distributed import launch_local
from neuromanifold.singular.family import Gaussian


def labelled_wrong_width_net() -> SimpleNamespace:
    """Factory for `launch_local`: a model taking 5 features, 12 labelled probe samples of 4."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(12, 4, dtype=torch.float64)
    return SimpleNamespace(model=model.double(), data=(x, torch.zeros(12, 2)), family=Gaussian())


def test_a_labelled_probe_set_is_warmed_up_before_the_timed_read() -> None:
    """The warm-up's forward error names the warm-up: it ran, on the first 2 labelled samples."""
    with pytest.raises(ValueError) as err:
        launch_local(
            1, "test_launch_local_warmup:labelled_wrong_width_net", read_kwargs={"progress": False}
        )
    message = str(err.value)
    assert message.startswith(
        "the warm-up read on the first 2 of 12 samples (before the timed read) failed: "
    ), message
    assert "data of shape (2, 4) does not fit the model" in message
