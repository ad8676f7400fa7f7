"""The data-flow graph through row selections: indexing and reshapes that keep the feature axis.

Hugging Face's ``*ForCausalLM`` heads compute ``lm_head(hidden_states[:, slice_indices, :])``
(``slice(0, None)`` by default), and GPT-2 views ``ln_f``'s output to its own shape first. Each
row of the head's input is then a row of the final norm's output with every feature in place, so
the gauges that act on the features (norm scale, LayerNorm kernel) hold across the step and the
graph must keep the edge ``norm → head``; indexing that touches the feature axis must not.

The sliced models are compared with unsliced ones that compute the same function: ``head(norm(
fc(x))[:, s])`` equals ``head(norm(fc(x[:, s])))`` because ``fc`` and ``norm`` act on each position
alone, so both reads must give the same records.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.io import TensorOutput, import_transformers
from neuromanifold.singular.detectors import (
    DetectionContext,
    LayerNormDetector,
    NormScaleDetector,
    graph_steps,
    trace_graph,
)
from neuromanifold.singular.detectors.graph import graph_passes_through
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

N, T, D_IN, D, C = 24, 4, 3, 5, 4
SYMMETRY_ATOL = 1e-12  # an exact gauge moves float64 logits of size O(1) by roundoff only
STEP = 0.5  # size of the parameter step along a flat-gauge direction (any size is exact)

FULL = (slice(None), slice(0, None), slice(None))  # HF's default ``logits_to_keep = 0``
# index → the positions of x that the unsliced twin reads (the same function)
ROW_SELECTIONS: dict[str, tuple[object, object]] = {
    "full slice [:, 0:, :]": (FULL, slice(None)),
    "last position [:, -1:, :]": ((slice(None), slice(-1, None), slice(None)), slice(-1, None)),
    "int index [:, -1]": ((slice(None), -1), -1),
    "ellipsis [..., 1:, :]": ((Ellipsis, slice(1, None), slice(None)), slice(1, None)),
}
# indices that touch the feature axis, and the head width they leave
FEATURE_INDICES: dict[str, tuple[object, int]] = {
    "first features [..., :3]": ((Ellipsis, slice(None, 3)), 3),
    "every other feature [..., ::2]": ((Ellipsis, slice(None, None, 2)), (D + 1) // 2),
}


class _Head(nn.Module):
    """``head(norm(fc(x))[index])`` (``index`` None: no indexing), with ``view`` a shape
    ``head(norm(fc(x)).view(view)[index])`` (``()``: the tensor's own shape)."""

    def __init__(self, index: object = None, width: int = D, view: tuple | None = None) -> None:
        super().__init__()
        self.fc = nn.Linear(D_IN, D)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(width, C)
        self.index, self.view = index, view
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():  # γ, β off their initial (1, 0), as after training
            self.norm.weight.copy_(0.5 + torch.rand(D, generator=gen))
            self.norm.bias.copy_(0.2 * torch.randn(D, generator=gen))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(self.fc(x))
        if self.view is not None:
            h = h.view(self.view or h.shape)
        return self.head(h if self.index is None else h[self.index])


def _model(index: object = None, width: int = D, view: tuple | None = None) -> nn.Module:
    torch.manual_seed(0)  # every model here has the same fc, norm and head parameters
    return _Head(index, width, view).double().eval()


def _x() -> Tensor:
    return torch.randn(N, T, D_IN, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def _candidates(model: nn.Module, x: Tensor) -> list:
    """The norm-scale and LayerNorm-kernel candidates proposed for ``model.norm``."""
    ctx = DetectionContext.from_model(model, x, Categorical())
    found = []
    for det in (NormScaleDetector(), LayerNormDetector()):
        found.extend(det.propose("norm", ctx.model.norm, ctx))
    return found


def _records(model: nn.Module, x: Tensor) -> list[tuple]:
    reading = read(model, x, Categorical(), progress=False)
    return sorted((d.layers, d.detector, d.klass, d.k) for d in reading.directions)


@pytest.mark.parametrize("case", sorted(ROW_SELECTIONS))
def test_a_row_selection_keeps_the_norm_to_head_edge(case: str) -> None:
    index, _ = ROW_SELECTIONS[case]
    graph = trace_graph(_model(index), _x()[:8])
    assert graph.consumers["norm"] == ("head",)
    assert graph.via[("norm", "head")] == ("SelectRows",)
    assert graph_passes_through(graph, "norm", "head")


@pytest.mark.parametrize("case", sorted(ROW_SELECTIONS))
def test_a_row_selection_gets_the_unsliced_gauges(case: str) -> None:
    index, _ = ROW_SELECTIONS[case]
    x = _x()
    plain = _candidates(_model(), x)
    sliced = _candidates(_model(index), x)
    assert sorted((c.detector, c.layers, c.gauge) for c in sliced) == sorted(
        (c.detector, c.layers, c.gauge) for c in plain
    )
    assert {c.detector for c in sliced} == {"norm-scale", "ln-kernel"}
    # the LayerNorm kernel proposed across the selection is an exact symmetry of the sliced model
    (kernel,) = [c for c in sliced if c.detector == "ln-kernel"]
    moved = _model(index)
    with torch.no_grad():
        before = moved(x)
        for name, p in moved.named_parameters():
            if name in kernel.u:
                p.add_(STEP * kernel.u[name])
        after = moved(x)
    assert torch.allclose(after, before, atol=SYMMETRY_ATOL, rtol=0.0)


@pytest.mark.parametrize("case", sorted(ROW_SELECTIONS))
def test_a_row_selection_reads_as_the_unsliced_twin(case: str) -> None:
    index, positions = ROW_SELECTIONS[case]
    x = _x()
    sliced = _records(_model(index), x)
    twin = _records(_model(), x[:, positions])  # the same function, without indexing
    assert sliced == twin
    assert any(r[1] == "norm-scale" and r[0][0] == "norm" for r in sliced)


@pytest.mark.parametrize("case", sorted(FEATURE_INDICES))
def test_indexing_the_feature_axis_stops_the_chain(case: str) -> None:
    index, width = FEATURE_INDICES[case]
    model = _model(index, width)
    x = _x()
    assert "norm" not in trace_graph(model, x[:8]).consumers
    assert _candidates(model, x) == []


@pytest.mark.parametrize(
    ("index", "channels_first"),
    [
        ((Ellipsis, 0), False),  # an int on the feature axis drops it
        ((Ellipsis, None), False),  # a new axis after the features
        ((Ellipsis, slice(1, None)), False),  # all features but the first
        ((torch.tensor([0, 1]),), False),  # advanced indexing
        (([0, 1],), False),
        ((slice(None), True), False),  # a bool index adds an axis like None, but is advanced
        ((slice(None), -1), True),  # channels-first source: the units are dimension 1
    ],
)
def test_row_selection_label_refuses(index: tuple, channels_first: bool) -> None:
    h = torch.zeros(2, 3, D, dtype=torch.float64)
    assert graph_steps.row_selection_label((h, index), h[index], channels_first) is None


# view → (via labels of norm → head, whether the edge is kept)
VIEWS: dict[str, tuple[tuple, tuple[str, ...]]] = {
    "own shape": ((), ("Identity", "SelectRows")),  # GPT-2's ln_f(h).view(output_shape)
    "rows regrouped (-1, D)": ((-1, D), ("SelectRows", "SelectRows")),
}


@pytest.mark.parametrize("case", sorted(VIEWS))
def test_a_view_that_keeps_the_features_keeps_the_edge_and_its_gauges(case: str) -> None:
    shape, via = VIEWS[case]
    x = _x()
    index = (slice(None),) * (len(shape) or 3)
    assert trace_graph(_model(index, view=shape), x[:8]).via[("norm", "head")] == via
    viewed = _candidates(_model(index, view=shape), x)
    plain = _candidates(_model(), x)
    assert sorted((c.detector, c.layers) for c in viewed) == sorted(
        (c.detector, c.layers) for c in plain
    )


def test_a_view_that_splits_the_features_stops_the_chain() -> None:
    model = _model(width=T * D, view=(N, T * D))  # each row holds T positions' features
    assert "norm" not in trace_graph(model, _x()).consumers


class _LastLogits(nn.Module):
    """``head(norm(fc(x)))[:, -1]``: the last position's logits as the model output."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _model()

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x)[:, -1]


def test_the_output_layer_is_found_through_a_row_selection() -> None:
    assert trace_graph(_LastLogits(), _x()[:8]).output == "inner.head"


def _transformers():
    """``transformers`` through `import_transformers` (which hides a torchvision that cannot be
    imported); the test is skipped where it is not installed."""
    try:
        return import_transformers()
    except ImportError:
        pytest.skip("transformers is not installed")


def test_llama_causal_lm_gets_the_final_norm_scale() -> None:
    tf = _transformers()
    cfg = tf.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=16,
        pad_token_id=0,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = TensorOutput(tf.LlamaForCausalLM(cfg)).double().eval()
    ids = torch.randint(1, 32, (16, 5), generator=torch.Generator().manual_seed(0))
    ctx = DetectionContext.from_model(model, ids, Categorical())
    norm = "model.model.norm"
    assert ctx.graph.consumers[norm] == ("model.lm_head",)
    (cand,) = NormScaleDetector().propose(norm, ctx.model.get_submodule(norm), ctx)
    assert cand.layers == (norm, "model.lm_head") and cand.gauge == "curved"


def test_gpt2_lm_gets_the_final_layernorm_kernel() -> None:
    tf = _transformers()
    cfg = tf.GPT2Config(
        vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0
    )
    cfg.eos_token_id = 0
    torch.manual_seed(0)
    model = TensorOutput(tf.GPT2LMHeadModel(cfg)).double().eval()
    ids = torch.randint(1, 32, (16, 5), generator=torch.Generator().manual_seed(0))
    ctx = DetectionContext.from_model(model, ids, Categorical())
    norm = "model.transformer.ln_f"
    assert ctx.graph.via[(norm, "model.lm_head")] == ("Identity", "SelectRows")
    found = LayerNormDetector().propose(norm, ctx.model.get_submodule(norm), ctx)
    # the head alone moves; the norm is named in info (s17 trial AD #6)
    assert [(c.layers, c.info["norm"]) for c in found] == [(("model.lm_head",), norm)]
