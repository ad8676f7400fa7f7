"""`attention_layout` recognises the projection names of several model families."""

from __future__ import annotations

import pytest
from torch import Tensor, nn

from neuromanifold.singular.detectors.attention_layout import attention_layout


class _Attn(nn.Module):
    """Separate q/k/v/out Linears under configurable names; ``n_heads`` heads."""

    def __init__(self, names: tuple[str, str, str, str], d: int = 8, n_heads: int = 2) -> None:
        super().__init__()
        self.names = names
        self.n_heads = n_heads
        for n in names:
            setattr(self, n, nn.Linear(d, d))

    def forward(self, x: Tensor) -> Tensor:  # not used by the layout
        return x


@pytest.mark.parametrize(
    "names",
    [
        ("q_proj", "k_proj", "v_proj", "o_proj"),  # Llama
        ("q_lin", "k_lin", "v_lin", "out_lin"),  # DistilBERT
        ("q_proj", "k_proj", "v_proj", "dense"),  # Phi
        ("query", "key", "value", "out_proj"),
    ],
)
def test_separate_projection_names(names: tuple[str, str, str, str]) -> None:
    lay = attention_layout(_Attn(names))
    assert lay is not None and lay.heads == 2 and lay.d_head == 4
    q, k, v, o = names
    assert (lay.q[0], lay.k[0], lay.v[0], lay.o) == (
        f"{q}.weight",
        f"{k}.weight",
        f"{v}.weight",
        f"{o}.weight",
    )


def test_fused_c_attn_and_c_proj() -> None:
    """GPT-2's fused projection (as the read sees it: an nn.Linear with rows [Q; K; V])."""
    m = nn.Module()
    m.num_heads = 2
    m.c_attn = nn.Linear(8, 24)
    m.c_proj = nn.Linear(8, 8)
    lay = attention_layout(m)
    assert lay is not None and (lay.q[2], lay.k[2], lay.v[2]) == (0, 8, 16)
    assert lay.o == "c_proj.weight"


def test_mismatched_output_width_is_not_attention() -> None:
    m = _Attn(("q_proj", "k_proj", "v_proj", "dense"))
    m.dense = nn.Linear(6, 8)  # reads 6 features, the heads give 8
    assert attention_layout(m) is None
    assert attention_layout(nn.Linear(8, 8)) is None
