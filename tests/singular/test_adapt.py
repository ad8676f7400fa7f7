"""Equal rewrites of the working copy (`singular.adapt`): Hugging Face ``Conv1D`` (GPT-2) and
``nn.Linear`` subclasses read as the equal ``nn.Linear``."""

from __future__ import annotations

import copy
import warnings
from collections import Counter

import pytest
import torch
from torch import nn

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.report import reading_markdown
from neuromanifold.singular.adapt import (
    ADAPT_CHUNK,
    conv1d_as_linear,
    is_hf_conv1d,
    linear_subclasses_as_linear,
)
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

# x W + b against x (Wᵀ)ᵀ + b through two BLAS calls: rounding of O(1) sums only (measured 0
# over 10 seeds with unit-normal weights)
RTOL_SAME_MAP = 1e-13


def _transformers():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")


def _conv1d(nf: int, nx: int) -> nn.Module:
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    return Conv1D(nf, nx).double()


def test_rewrite_keeps_the_function_names_and_count() -> None:
    _transformers()
    model = nn.Sequential(_conv1d(5, 3), nn.GELU(), _conv1d(2, 5))
    ref = copy.deepcopy(model)
    x = torch.randn(7, 4, 3, dtype=torch.float64)
    names = conv1d_as_linear(model)
    assert names == ["0", "2"]
    assert all(type(model[i]) is nn.Linear for i in (0, 2))
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for i in (0, 2):
        torch.testing.assert_close(model[i].weight, ref[i].weight.T, rtol=0, atol=0)
    y, y_ref = model(x), ref(x)
    torch.testing.assert_close(y, y_ref, rtol=RTOL_SAME_MAP, atol=0)


def test_tied_conv1d_is_left_alone() -> None:
    _transformers()
    a, b = _conv1d(3, 3), _conv1d(3, 3)
    b.weight = a.weight  # one parameter, two modules
    model = nn.Sequential(a, b)
    assert conv1d_as_linear(model) == []
    assert is_hf_conv1d(model[0]) and is_hf_conv1d(model[1])


def test_lookalikes_are_not_rewritten() -> None:
    class Conv1D(nn.Module):  # the name, but not the weight layout
        def __init__(self) -> None:
            super().__init__()
            self.nf, self.nx = 3, 2
            self.weight = nn.Parameter(torch.zeros(3, 2))
            self.bias = nn.Parameter(torch.zeros(3))

    assert not is_hf_conv1d(Conv1D())
    assert not is_hf_conv1d(nn.Conv1d(2, 3, 1))
    assert conv1d_as_linear(nn.Sequential(Conv1D())) == []


def test_tiny_gpt2_is_covered_and_the_callers_model_untouched() -> None:
    transformers = _transformers()
    cfg = transformers.GPT2Config(
        vocab_size=64,
        n_embd=8,
        n_layer=1,
        n_head=2,
        n_positions=16,
        num_labels=3,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = TensorOutput(transformers.GPT2ForSequenceClassification(cfg)).eval()
    x = torch.randint(1, 64, (12, 4), generator=torch.Generator().manual_seed(0))
    reading = read(model, x, Categorical(), progress=False)
    assert reading.not_covered == ()
    pre = "model.transformer.h.0."
    assert reading.meta["conv1d_as_linear"] == [
        f"{pre}attn.c_attn",
        f"{pre}attn.c_proj",
        f"{pre}mlp.c_fc",
        f"{pre}mlp.c_proj",
    ]
    assert type(model.model.transformer.h[0].attn.c_attn).__name__ == "Conv1D"
    kinds = Counter((r.detector, r.klass, r.k) for r in reading.directions)
    assert kinds[("qk-rotation", "curved_gauge", 2)] == 2  # fused c_attn, one per head
    assert kinds[("vo-rescale", "curved_gauge", 2)] == 2
    scale = {r.layers for r in reading.directions if r.detector == "norm-scale"}
    # the final ln_f reaches the score head through GPT-2's same-shape view (a graph edge)
    assert scale == {
        (f"{pre}ln_1", f"{pre}attn.c_attn"),
        (f"{pre}ln_2", f"{pre}mlp.c_fc"),
        ("model.transformer.ln_f", "model.score"),
    }
    assert "4 Hugging Face `Conv1D` modules were read as the equal `nn.Linear`" in (
        reading_markdown(reading)
    )


class _PlainLinear(nn.Linear):
    """``x Wᵀ + b`` through another ``forward`` (as Falcon's ``FalconLinear``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight.T
        return out if self.bias is None else out + self.bias


class _ScaledLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().forward(x)


class _GatedLinear(nn.Linear):
    """An extra parameter: not a plain linear map, whatever its output."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.gate = nn.Parameter(torch.ones(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.gate


def _subclass_mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        _PlainLinear(3, 5), nn.ReLU(), _PlainLinear(5, 4, bias=False), nn.Tanh(), nn.Linear(4, 2)
    ).double()
    return model, torch.randn(24, 3, dtype=torch.float64)


def test_linear_subclass_keeps_the_function_and_the_parameter_objects() -> None:
    model, x = _subclass_mlp()
    before = model(x)
    params = dict(model.named_parameters())
    assert linear_subclasses_as_linear(model, x) == (["0", "2"], 1)  # 24 samples: one pass
    assert type(model[0]) is nn.Linear and type(model[2]) is nn.Linear
    assert model[2].bias is None
    after = dict(model.named_parameters())
    assert after.keys() == params.keys() and all(after[k] is params[k] for k in params)
    torch.testing.assert_close(model(x), before, rtol=RTOL_SAME_MAP, atol=0)


def test_linear_subclass_that_computes_something_else_is_left_alone() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(_ScaledLinear(3, 4), _GatedLinear(4, 2), _PlainLinear(2, 2))
            self.unused = _PlainLinear(3, 3)  # never called: nothing to compare

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    torch.manual_seed(0)
    model = Model().double()
    done, _ = linear_subclasses_as_linear(model, torch.randn(6, 3, dtype=torch.float64))
    assert done == ["body.2"]
    kinds = [type(m).__name__ for m in (*model.body, model.unused)]
    assert kinds == ["_ScaledLinear", "_GatedLinear", "Linear", "_PlainLinear"]


def test_tied_linear_subclasses_stay_tied() -> None:
    torch.manual_seed(0)
    a, b = _PlainLinear(3, 3), _PlainLinear(3, 3)
    b.weight = a.weight
    model = nn.Sequential(a, nn.Tanh(), b).double()
    done, _ = linear_subclasses_as_linear(model, torch.randn(4, 3, dtype=torch.float64))
    assert done == ["0", "2"]
    assert model[0].weight is model[2].weight


def test_every_probe_sample_decides() -> None:
    """A subclass that computes x Wᵀ + b except on one late sample is left alone; the check runs
    over all samples in passes of `ADAPT_CHUNK`."""

    class LateDifference(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = super().forward(x)
            return y + (x[:, :1] > 50.0).double()  # only the planted last sample differs

    torch.manual_seed(0)
    model = nn.Sequential(LateDifference(3, 2)).double()
    x = torch.randn(2 * ADAPT_CHUNK + 1, 3, dtype=torch.float64)
    x[-1, 0] = 100.0
    assert linear_subclasses_as_linear(model, x) == ([], 3)
    assert linear_subclasses_as_linear(model, x[:-1]) == (["0"], 2)


def test_read_covers_linear_subclasses_and_says_so() -> None:
    model, x = _subclass_mlp()
    reading = read(model, x, Categorical(), progress=False)
    assert reading.not_covered == ()
    assert reading.meta["linear_subclass_as_linear"] == ["0", "2"]
    assert type(model[0]) is _PlainLinear  # the caller's model is untouched
    assert "2 subclasses of `nn.Linear` were read as `nn.Linear`" in reading_markdown(reading)
