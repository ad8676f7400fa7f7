"""Probe data without the sample axis is named as such, not blamed on forward-mode derivatives.

One CHW image (3, 8, 8) given to a model that starts with ``nn.Conv2d(3, ...)`` runs: the conv
takes it as one unbatched sample and the model returns 3 values, one per channel, which look like
one row per sample. The read must raise a ``ValueError`` that names the data's shape and says
that the first axis must be the sample axis (the `read` module's promise for data that does not
fit the model), not a failure of ``torch.func.jvp`` on a 2-sample slice.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold import Gaussian, read
from neuromanifold.singular.factor_inputs import forward_checked
from neuromanifold.singular.passes import check_forward_mode


class _ConvHead(nn.Module):
    """Conv2d(C, 4, 3) → ReLU → spatial mean → Linear(4, 3); ``scale`` multiplies the input first
    (the conv then does not receive the data tensor itself)."""

    def __init__(self, channels: int = 3, scale: float | None = None) -> None:
        super().__init__()
        self.c = nn.Conv2d(channels, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        if self.scale is not None:
            x = x * self.scale
        return self.fc(torch.relu(self.c(x)).mean((-2, -1)))


def _model(**kw: object) -> nn.Module:
    torch.manual_seed(0)
    return _ConvHead(**kw).double().eval()


_NO_SAMPLE_AXIS = r"first axis must\s+be the sample axis"


def test_one_chw_image_names_the_shape_and_the_sample_axis() -> None:
    """The forward succeeds on (3, 8, 8) with an output of 3 rows; the read still refuses it."""
    x = torch.randn(3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with pytest.raises(
        ValueError, match=r"data of shape \(3, 8, 8\).*'c' \(Conv2d.*" + _NO_SAMPLE_AXIS
    ) as info:
        read(_model(), x, Gaussian(1.0), progress=False)
    assert "forward-mode" not in str(info.value)


def test_unbatched_data_whose_forward_fails_names_the_sample_axis() -> None:
    """Conv2d(1, ...) on (1, 6, 6) runs unbatched, then the spatial mean over dims (2, 3) fails:
    the cause named is the missing sample axis, not the channel count (which fits)."""
    model = _model(channels=1)
    x = torch.randn(1, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    model.forward = lambda t: model.fc(torch.relu(model.c(t)).mean((2, 3)))  # type: ignore[method-assign]
    with pytest.raises(ValueError, match=r"data of shape \(1, 6, 6\).*" + _NO_SAMPLE_AXIS):
        forward_checked(model, x)


def test_forward_mode_check_does_not_blame_jvp_for_a_failing_forward() -> None:
    """The conv gets a copy of the data (``x * 1``), so the unbatched input is not recognised as
    the data; the 2-sample slice then fails in a plain forward too, and the error says so."""
    model = _model(scale=1.0)
    x = torch.randn(3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with pytest.raises(
        ValueError, match=r"without derivatives too.*\(2, 8, 8\).*sample axis"
    ) as info:
        check_forward_mode(model, x[:2])
    assert "torch.func.jvp" not in str(info.value)


def test_read_names_the_whole_data_shape_in_that_fallback() -> None:
    """Through `read`, the same fallback names the user's data shape (3, 8, 8), not only the
    2-sample slice it ran (read passes ``data_shape`` to the check)."""
    x = torch.randn(3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match=r"data of shape \(3, 8, 8\) does not fit the model"):
        read(_model(scale=1.0), x, Gaussian(1.0), progress=False)


def test_a_batchnorm_after_the_convolution_does_not_hide_the_cause() -> None:
    """Audit s11 #2: Conv2d → BatchNorm2d, the usual layout; BatchNorm raises a ValueError
    ("expected 4D input") on the unbatched activation, which escaped unchanged."""
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    m = m.double().eval()
    x = torch.randn(3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with pytest.raises(ValueError, match=r"data of shape \(3, 8, 8\).*" + _NO_SAMPLE_AXIS):
        forward_checked(m, x)
    with pytest.raises(ValueError, match=r"data of shape \(3, 8, 8\).*" + _NO_SAMPLE_AXIS):
        read(m, x, Gaussian(1.0), progress=False)


def test_batched_data_still_reads() -> None:
    """The same model on a proper (N, C, H, W) batch reads, and `forward_checked` returns the
    model's own output unchanged."""
    model = _model()
    x = torch.randn(24, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert torch.equal(forward_checked(model, x), model(x))
    check_forward_mode(model, x[:2])
    r = read(model, x, Gaussian(1.0), progress=False)
    assert len(r.directions) > 0
