"""The loader copies floating checkpoint tensors without rounding and says every dtype difference.

s17 trial AF #2: a float64 checkpoint loaded into a float32 factory was rounded to float32
(errors ~3e-8) with no word, and the read then said "float32 parameters were up-cast".
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from neuromanifold import read
from neuromanifold.cells import planted_mlp
from neuromanifold.io import load_model, load_state_dict_checked

FACTORY = "nm_dtype_factories"


@pytest.fixture
def factories(tmp_path):
    """A module of plain float32 factories (``nn.Linear``'s default dtype), importable."""
    (tmp_path / f"{FACTORY}.py").write_text(
        "from torch import nn\n"
        "def planted_arch():\n"
        "    return nn.Sequential(nn.Linear(5, 6), nn.GELU(), nn.Linear(6, 4))\n"
        "def bn_arch():\n"
        "    return nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 4))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(FACTORY, None)


def test_float64_checkpoint_into_float32_factory_is_bit_exact(factories) -> None:
    planted = planted_mlp()  # a float64 model
    path = factories / "planted_f64.pt"
    torch.save(planted.model.state_dict(), path)
    saved = torch.load(path, weights_only=True)
    assert all(v.dtype == torch.float64 for v in saved.values())
    with pytest.warns(UserWarning, match=r"float64 tensors wider than Sequential's float32 .*"
                      r"converted to float64 so that they are copied exactly"):  # fmt: skip
        model = load_model(path, architecture=f"{FACTORY}:planted_arch")
    got = model.state_dict()
    for k, v in saved.items():
        assert got[k].dtype == torch.float64, k
        assert torch.equal(got[k], v), k  # every bit of the checkpoint, not a float32 rounding
    reading = read(model, planted.data, planted.family)
    assert "float32" not in reading.meta["upcast_note"]  # nothing was up-cast: it is float64
    # the loaded model is the saved one: its read equals the read of the original
    assert (
        reading.to_dict()["directions"]
        == read(planted.model, planted.data, planted.family).to_dict()["directions"]
    )


def test_float64_checkpoint_converts_buffers_and_keeps_integer_ones(factories) -> None:
    source = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 4)).double()
    with torch.no_grad():
        source[1].running_mean.copy_(torch.linspace(-1, 1, 6, dtype=torch.float64) / 3)
        source[1].running_var.copy_(torch.linspace(1, 2, 6, dtype=torch.float64) / 3)
    source[1].num_batches_tracked.fill_(7)
    path = factories / "bn_f64.safetensors"
    save_file(source.state_dict(), str(path))
    with pytest.warns(UserWarning, match="converted to float64"):
        model = load_model(path, architecture=f"{FACTORY}:bn_arch")
    for k, v in source.state_dict().items():
        assert model.state_dict()[k].dtype == v.dtype, k  # num_batches_tracked stays int64
        assert torch.equal(model.state_dict()[k], v), k


def test_narrower_checkpoint_is_copied_exactly_and_said(factories) -> None:
    planted = planted_mlp()
    state = {k: v.to(torch.bfloat16) for k, v in planted.model.state_dict().items()}
    path = factories / "planted_bf16.safetensors"
    save_file(state, str(path))
    with pytest.warns(UserWarning, match=r"bfloat16 tensors .* copied exactly into Sequential's "
                      r"float32 .* the model is float32, the checkpoint bfloat16"):  # fmt: skip
        model = load_model(path, architecture=f"{FACTORY}:planted_arch")
    for k, v in state.items():
        assert model.state_dict()[k].dtype == torch.float32  # the module is not narrowed
        assert torch.equal(model.state_dict()[k], v.float()), k  # every bfloat16 is a float32


def test_same_dtype_loads_without_a_warning(factories) -> None:
    model = nn.Sequential(nn.Linear(5, 6), nn.GELU(), nn.Linear(6, 4))
    state = {k: v + 1 for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_state_dict_checked(model, state)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


class _WithComplex(nn.Module):
    """A float32 layer beside a complex buffer: ``Module.to(float64)`` would drop its imaginary
    part, so the loader does not convert such a module."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("phase", torch.ones(2, dtype=torch.complex64))


def test_module_that_cannot_be_widened_says_the_rounding() -> None:
    model = _WithComplex()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lin.weight"] = torch.full((2, 2), 1 / 3, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"checkpoint holds float64 tensors \(lin.weight\) that are"
                      r" rounded to _WithComplex's float32"):  # fmt: skip
        load_state_dict_checked(model, state)
    assert model.phase.dtype == torch.complex64
    assert model.lin.weight.dtype == torch.float32
