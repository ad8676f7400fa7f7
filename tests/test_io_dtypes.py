"""The loader copies floating checkpoint tensors without rounding and says every dtype difference.

s17 trial AF #2: a float64 checkpoint loaded into a float32 factory was rounded to float32
(errors ~3e-8) with no word, and the read then said "float32 parameters were up-cast".
"""

from __future__ import annotations

import math
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
    with pytest.warns(UserWarning, match=r"checkpoint holds float64 tensors \(lin.weight\) whose "
                      r"values change when cast to _WithComplex's float32 \(the module cannot be "
                      r"converted\): values are rounded to float32$"):  # fmt: skip
        load_state_dict_checked(model, state)
    assert model.phase.dtype == torch.complex64
    assert model.lin.weight.dtype == torch.float32
    assert torch.equal(model.lin.weight, state["lin.weight"].float())


def test_module_that_cannot_be_widened_checks_the_values() -> None:
    """s18 audit AJ #7: float64 ones, exact in float32, were said to be rounded."""
    model = _WithComplex()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["lin.weight"] = torch.ones(2, 2, dtype=torch.float64)
    with pytest.warns(UserWarning) as caught:
        load_state_dict_checked(model, state)
    said = [str(w.message) for w in caught]
    assert said == [
        "checkpoint holds float64 tensors (lin.weight) that are cast to _WithComplex's float32 "
        "with every value kept (the module cannot be converted)"
    ], said
    assert torch.equal(model.lin.weight.double(), state["lin.weight"])


@pytest.mark.parametrize(
    ("value", "dtype", "stored", "effect"),
    [
        # float16's largest is 65504; 70000 overflows to inf
        (torch.tensor([70000, 1]), torch.float16, math.inf, "overflow to inf"),
        # float8_e4m3fn has no inf: torch saturates to its largest, 448
        (torch.tensor([1000, 1]), torch.float8_e4m3fn, 448.0, "overflow to ±448"),
        # 1e300 is beyond float32's largest (about 3.4e38)
        (torch.tensor([1e300, 1.0], dtype=torch.complex128), torch.float32, math.inf,
         "overflow to inf"),
    ],
)  # fmt: skip
def test_an_overflow_is_said_as_an_overflow(
    value: torch.Tensor, dtype: torch.dtype, stored: float, effect: str
) -> None:
    """s18 audit AJ #7: int64 70000 stored as inf in float16 was said to be "rounded"."""
    model = _OneBuffer(dtype)
    name = str(dtype).removeprefix("torch.")
    with pytest.warns(UserWarning) as caught:
        load_state_dict_checked(model, {"b": value})
    (said,) = [str(w.message) for w in caught if "_OneBuffer" in str(w.message)]
    assert said.endswith(f"values beyond {name}'s range {effect}"), said
    assert "rounded" not in said, said
    assert model.b.tolist() == [stored, 1.0]


class _Buffers(nn.Module):
    """An int64 index buffer and a bool mask beside a float32 layer (s17 audit AH #4)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("idx", torch.arange(5))
        self.register_buffer("mask", torch.ones(5, dtype=torch.bool))


def test_float_checkpoint_into_integer_and_bool_buffers_says_the_changed_values() -> None:
    """s17 audit AH #4: float64 values were truncated into the int64 buffer (0.7 -> 0) and made
    True in the bool one (0.3, 2 -> True) without a word, though every dtype difference is said."""
    model = _Buffers()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["idx"] = torch.tensor([0.7, 1.7, 2.7, 3.7, 4.7], dtype=torch.float64)
    state["mask"] = torch.tensor([0.3, 1.0, 0.0, 2.0, 1.0], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_state_dict_checked(model, state, source="buf.pt")
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any(
        "buf.pt holds float64 tensors (idx) whose values change when cast to _Buffers's int64: "
        "fractions are truncated toward zero" in m
        for m in said
    ), said
    assert any(
        "buf.pt holds float64 tensors (mask) whose values change when cast to _Buffers's bool: "
        "values other than 0 and 1 become True" in m
        for m in said
    ), said
    # the copies are the casts the warnings describe: truncation toward zero, nonzero -> True
    assert torch.equal(model.idx, state["idx"].trunc().to(torch.int64))
    assert torch.equal(model.mask, state["mask"] != 0)


def test_float_checkpoint_with_integer_values_into_integer_buffers_says_they_are_kept() -> None:
    model = _Buffers()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["idx"] = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0], dtype=torch.float64)
    state["mask"] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    with pytest.warns(UserWarning) as caught:
        load_state_dict_checked(model, state)
    said = [str(w.message) for w in caught]
    for name, dtype in (("idx", "int64"), ("mask", "bool")):
        assert (
            f"checkpoint holds float64 tensors ({name}) that are cast to _Buffers's {dtype} with "
            "every value kept" in said
        ), said
        assert torch.equal(model.get_buffer(name).double(), state[name]), name


class _OneBuffer(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize(
    ("value", "dtype", "effect"),
    [
        # 2**24 + 1 is the least positive integer float32 (24-bit significand) cannot hold
        (torch.tensor([1, 2**24 + 1]), torch.float32, "values are rounded to float32"),
        # int8 -1 into uint8 is 255: same width, so a cast there and back alone would not see it
        (torch.tensor([1, -1], dtype=torch.int8), torch.uint8, "outside uint8's range"),
        (torch.tensor([1.0, 1e10], dtype=torch.float64), torch.int32, "outside int32's range"),
    ],
)
def test_other_non_floating_casts_say_how_values_change(
    value: torch.Tensor, dtype: torch.dtype, effect: str
) -> None:
    model = _OneBuffer(dtype)
    with pytest.warns(
        UserWarning, match=rf"whose values change when cast to _OneBuffer's .*{effect}"
    ):
        load_state_dict_checked(model, {"b": value})
    assert model.b.dtype == dtype
    assert not torch.equal(model.b.double(), value.double())  # the change the warning says


def test_dtype_warnings_point_at_the_caller(factories) -> None:
    """s17 audit AH #6: the warnings pointed at a line inside io.py (``load_model``'s call of
    ``load_state_dict_checked``); they name the caller's file, from either entry point."""
    path = factories / "planted_f64.pt"
    torch.save(planted_mlp().model.state_dict(), path)  # float64 into a float32 factory
    buffers = _Buffers()
    state = {k: v.clone() for k, v in buffers.state_dict().items()}
    state["idx"] = torch.tensor([0.7, 1.7, 2.7, 3.7, 4.7], dtype=torch.float64)
    state["lin.weight"] = state["lin.weight"].to(torch.bfloat16)  # narrower: copied exactly
    rounded = {k: v.clone() for k, v in _WithComplex().state_dict().items()}
    rounded["lin.weight"] = torch.full((2, 2), 1 / 3, dtype=torch.float64)  # not a float32
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(path, architecture=f"{FACTORY}:planted_arch")
        load_state_dict_checked(buffers, state)
        load_state_dict_checked(_WithComplex(), rounded)  # cannot be widened: rounded
    said = [w for w in caught if issubclass(w.category, UserWarning)]
    messages = " ".join(str(w.message) for w in said)
    for what in ("converted to float64", "copied exactly into", "fractions are truncated",
                 "values are rounded to float32"):  # fmt: skip
        assert what in messages, messages
    assert {w.filename for w in said} == {__file__}, [(w.filename, w.lineno) for w in said]


@pytest.mark.parametrize(
    ("stored", "module", "loaded"),
    [(torch.float8_e4m3fn, torch.float32, torch.float32),  # float32 holds it: copied exactly
     (torch.float32, torch.float8_e4m3fn, torch.float32),  # wider: the module is converted
     # neither float8 holds the other (e5m2: range 57344, 2 fraction bits; e4m3fn: 448, 3);
     # float16 (65504, 10 fraction bits) is the narrowest standard dtype that holds both
     (torch.float8_e5m2, torch.float8_e4m3fn, torch.float16)],
)  # fmt: skip
def test_float8_checkpoints_load_exactly(
    stored: torch.dtype, module: torch.dtype, loaded: torch.dtype
) -> None:
    """s18 audit AJ #2: ``torch.promote_types`` refuses float8, so a float8 checkpoint tensor
    for a float32 parameter (and float32 for float8) raised instead of loading."""
    model = nn.Linear(2, 2).to(module)
    # 1.5 and -0.25 are values of every float8 dtype (3 significand bits; e5m2 has 2: 1.5 = 1.1b)
    state = {k: torch.full_like(v, 1.5, dtype=stored) for k, v in model.state_dict().items()}
    state["weight"][0, 0] = -0.25
    with pytest.warns(UserWarning, match=f"holds {str(stored)[6:]} tensors"):
        load_state_dict_checked(model, state)
    for k, v in state.items():
        assert torch.equal(model.state_dict()[k].double(), v.double()), k  # every value kept
    assert model.weight.dtype == loaded


class _RefusesLoading(nn.Module):
    """A module whose own ``_load_from_state_dict`` raises (s18 audit AJ #2's ``amods:bad``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        raise RuntimeError("custom load failure")


def test_load_model_names_the_checkpoint_when_the_module_cannot_take_it(
    factories, monkeypatch
) -> None:
    """The error is the checkpoint's (CheckpointLoadError naming it), not the architecture's."""
    from neuromanifold.io import CheckpointLoadError

    (factories / "nm_refuses.py").write_text(
        f"from {__name__} import _RefusesLoading\ndef refuses():\n    return _RefusesLoading()\n"
    )
    monkeypatch.delitem(sys.modules, "nm_refuses", raising=False)
    path = factories / "refuses.pt"
    torch.save(_RefusesLoading().state_dict(), path)
    with pytest.raises(CheckpointLoadError, match=rf"loading {path} into _RefusesLoading failed: "
                       r"RuntimeError: custom load failure") as caught:  # fmt: skip
        load_model(path, architecture="nm_refuses:refuses")
    assert isinstance(caught.value.__cause__, RuntimeError)
