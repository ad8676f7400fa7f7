"""A ``ValueError`` or ``TypeError`` the model's own forward raises names the data's shape.

User trial s19 AK #2: flat ``(37, 64)`` digits fed to the zoo ViT, whose patch embedding unpacks
``n, c, h, w = x.shape``, made ``read`` (and the CLI) say only "not enough values to unpack
(expected 4, got 2)", naming neither the data nor its shape.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from typer.testing import CliRunner

from neuromanifold.singular.factor_inputs import forward_checked
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical, Gaussian
from neuromanifold.singular.read import read
from neuromanifold.zoo.models import ViTConfig, build_model

UNPACK = r"not enough values to unpack \(expected 4, got 2\)"


def _vit() -> nn.Module:
    return build_model(ViTConfig(dim=8, depth=1, heads=2), seed=0).double().eval()


def _flat_digits(n: int) -> Tensor:
    return torch.rand(n, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


class _TwoInputs(nn.Module):
    """A forward that needs a second argument: called with the data alone, Python raises
    ``TypeError``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.lin(x) * mask


def test_value_error_of_the_forward_names_the_data_shape_and_keeps_the_cause() -> None:
    x = _flat_digits(6)
    with pytest.raises(ValueError) as info:
        forward_checked(_vit(), x[:4], data_shape=tuple(x.shape))
    msg = str(info.value)
    assert msg.startswith(
        "the model's forward fails on data of shape (6, 64) (it raised ValueError)"
    )
    assert msg.endswith(
        "not enough values to unpack (expected 4, got 2) (the read ran the model on a batch of 4 "
        "of the 6 samples)"
    )
    cause = info.value.__cause__
    assert (
        type(cause) is ValueError
        and str(cause) == "not enough values to unpack (expected 4, got 2)"
    )


def test_type_error_of_the_forward_becomes_a_value_error_naming_the_data_shape() -> None:
    model = _TwoInputs().double().eval()
    with pytest.raises(
        ValueError,
        match=r"^the model's forward fails on data of shape \(5, 3\) \(it raised TypeError\): "
        r".*forward\(\) missing 1 required positional argument: 'mask'",
    ) as info:
        forward_checked(model, torch.zeros(5, 3, dtype=torch.float64))
    assert isinstance(info.value.__cause__, TypeError)


def test_read_of_the_vit_on_flat_data_names_the_data_shape() -> None:
    with pytest.raises(
        ValueError, match=rf"^the model's forward fails on data of shape \(9, 64\).*{UNPACK}$"
    ):
        read(_vit(), _flat_digits(9), Categorical(), progress=False)


def test_factor_pass_names_the_whole_data_shape() -> None:
    """`kfac_factors` runs the data in batches; the message names the caller's (12, 64) data."""
    with pytest.raises(
        ValueError, match=rf"data of shape \(12, 64\) \(it raised ValueError\): {UNPACK}"
    ):
        kfac_factors(_vit(), _flat_digits(12), Categorical(), batch_size=5)


def test_non_finite_activation_error_is_passed_on_unchanged() -> None:
    """The library's own error from the finiteness hooks of the factor pass is not reworded."""
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double().eval()
    x = torch.full((2, 4), float("inf"), dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^activation of module '0' \(Linear\) holds NaN or Inf"):
        kfac_factors(model, x, Gaussian())


def test_cli_error_line_names_the_data_shape(tmp_path: Path, monkeypatch) -> None:
    fake = types.ModuleType("_nm_ak2_models")
    fake.vit = _vit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    data = tmp_path / "x37.pt"
    torch.save(_flat_digits(37), data)
    from neuromanifold.cli import app

    args = ["read", "--model", f"{fake.__name__}:vit", "--data", str(data)]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert (
        "error: the model's forward fails on data of shape (37, 64) (it raised ValueError): "
        in r.output
    )
    assert "not enough values to unpack (expected 4, got 2)" in r.output


class _PatchConvViT(nn.Module):
    """A Hugging Face ViT's start: a Conv2d patch embedding after ``n, c, h, w = x.shape``."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 4, kernel_size=2, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        _, _, h, _ = x.shape
        if h % 2:
            raise ValueError(f"image height {h} is not a multiple of the patch size 2")
        return self.patch(x).flatten(1)


def test_a_convolution_first_model_given_ids_is_told_what_it_takes() -> None:
    """s34 trial REPORT O2: a ViT given token ids said "not enough values to unpack (expected 4,
    got 2)" and never that it takes pixel values. Images of the right rank that fail otherwise
    get no such hint."""
    model = _PatchConvViT().double().eval()
    ids = torch.randint(0, 40, (4, 6))
    with pytest.raises(ValueError) as info:
        forward_checked(model, ids)
    assert (
        "(it raised ValueError; its first layer 'patch' (Conv2d) takes floating images "
        "(N, C, H, W) with C = 3): not enough values to unpack" in str(info.value)
    )
    odd = torch.zeros(2, 3, 5, 4, dtype=torch.float64)
    with pytest.raises(ValueError) as info:
        forward_checked(model, odd)
    assert "(it raised ValueError): image height 5" in str(info.value)
