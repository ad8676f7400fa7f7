"""Two clauses of `Reading.note`: normalisation channels with scale and shift both 0 (s34 trial
CONV D2), and detector caps that left found directions unread (CONV O5)."""

from __future__ import annotations

import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular import Gaussian


def _bn_model(zero_channel: bool) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 3),
        nn.Flatten(), nn.Linear(2 * 4 * 4, 2),
    ).double()  # fmt: skip
    model.eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.1, 0.1)
        model[1].running_var.uniform_(0.5, 2.0)
        if zero_channel:
            model[1].weight[2] = 0.0
            model[1].bias[2] = 0.0
            model[3].weight[:, 2] = 0.0
    return model


def test_a_batchnorm_channel_with_zero_scale_and_shift_is_named() -> None:
    x = torch.randn(32, 1, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    note = read(_bn_model(True), x, Gaussian(), progress=False, max_directions=4).note
    assert "normalisation channels with scale 0 and shift 0 or none ('1' channel(s) 2)" in note
    assert "is an order-2 node death that this read does not propose" in note
    plain = read(_bn_model(False), x, Gaussian(), progress=False, max_directions=4).note
    assert "normalisation channels with scale 0" not in plain


def test_a_bias_free_norm_channel_with_zero_scale_is_named() -> None:
    """An RMSNorm has no shift: a zero scale alone kills its channel (s34 review #6)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.RMSNorm(4), nn.Linear(4, 2)).double().eval()
    with torch.no_grad():
        model[1].weight[1] = 0.0
    x = torch.randn(16, 3, dtype=torch.float64)
    note = read(model, x, Gaussian(), progress=False, max_directions=0).note
    assert "normalisation channels with scale 0 and shift 0 or none ('1' channel(s) 1)" in note


def test_directions_cut_by_caps_are_counted_in_the_note() -> None:
    """Eleven never-excited inputs of one Linear: kfac-A finds 11 input-kernel directions and
    its cap keeps 2."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 3)).double().eval()
    x = torch.randn(64, 16, dtype=torch.float64)
    x[:, 5:] = 0.0  # 11 input coordinates never excited
    reading = read(model, x, Gaussian(), progress=False)
    assert [(c["detector"], c["found"], c["kept"]) for c in reading.meta["truncated"]] == [
        ("kfac-A", 11, 2)
    ]
    assert (
        "detector caps left 9 found direction(s) unread (kfac-A 9) on 1 (detector, layer) pair(s)"
        in reading.note
    )


def test_a_zero_initialised_head_is_named_in_the_note() -> None:
    """s34 trial CONV O4: with the head's weights all 0 every record read flat and nothing said
    why. A head with one non-zero weight is not named."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double().eval()
    with torch.no_grad():
        model[2].weight.zero_()
    x = torch.randn(16, 3, dtype=torch.float64)
    note = read(model, x, Gaussian(), progress=False, max_directions=0).note
    assert "layers with every weight 0 ('2') pass nothing on at θ0" in note
    with torch.no_grad():
        model[2].weight[0, 0] = 1e-3
    note = read(model, x, Gaussian(), progress=False, max_directions=0).note
    assert "layers with every weight 0" not in note


def test_a_wrapped_model_is_named_by_the_class_it_wraps() -> None:
    """s34 trial REPORT D2: every Hugging Face report named its model `TensorOutput`, the
    wrapper, not the class built."""
    from neuromanifold.io import TensorOutput

    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(3, 2)).double().eval()
    x = torch.randn(8, 3, dtype=torch.float64)
    reading = read(TensorOutput(inner), x, Gaussian(), progress=False, max_directions=0)
    assert reading.meta["model"] == "Sequential (in TensorOutput)"
    assert read(inner, x, Gaussian(), progress=False, max_directions=0).meta["model"] == (
        "Sequential"
    )
