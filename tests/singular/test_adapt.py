"""Hugging Face ``Conv1D`` (GPT-2) read as the equal ``nn.Linear`` (`singular.adapt`)."""

from __future__ import annotations

import copy
import warnings
from collections import Counter

import pytest
import torch
from torch import nn

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.report import reading_markdown
from neuromanifold.singular.adapt import conv1d_as_linear, is_hf_conv1d
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
    model = TensorOutput(transformers.GPT2ForSequenceClassification(cfg))
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
    assert scale == {(f"{pre}ln_1", f"{pre}attn.c_attn"), (f"{pre}ln_2", f"{pre}mlp.c_fc")}
    assert "4 Hugging Face `Conv1D` modules were read as the equal `nn.Linear`" in (
        reading_markdown(reading)
    )
