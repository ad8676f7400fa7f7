"""An ``ln-kernel`` record's ``layers`` are the modules its direction moves (s17 trial AD #6).

The LayerNorm kernel direction ``ΔW̄ = g a*ᵀ`` moves the consumer's weight and bias only; the
LayerNorm it comes from keeps its parameters and is named in ``info["norm"]``. ``layers`` listed
the norm too, so `Reading.by_layer` (and the report's per-layer table and class map) filed a flat
gauge under a module whose parameters it leaves unchanged. Checked on every path that proposes
the kernel: a graph consumer Linear, a packed self-attention, and a head reached through pooling
(the factor test).
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.base import Candidate, DetectionContext
from neuromanifold.singular.detectors.registry import default_registry
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

D = torch.float64


def _modules_moved(u: dict[str, Tensor]) -> set[str]:
    """Modules owning a tensor on which ``u`` is non-zero (``""`` for the root)."""
    return {k.rsplit(".", 1)[0] if "." in k else "" for k, v in u.items() if bool(v.any())}


def _proposals(model: nn.Module, x: Tensor) -> list[Candidate]:
    ctx = DetectionContext.from_model(model, x, Categorical())
    reg = default_registry()
    return [
        c
        for name, mod in ctx.model.named_modules()
        for det in reg.for_module(mod)
        for c in det.propose(name, mod, ctx)
    ]


def _linear_ln_linear() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6), nn.Linear(6, 3)).to(D).eval()
    with torch.no_grad():  # a generic norm (γ ≠ 1, β ≠ 0): the kernel is not the constant vector
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.normal_(0.0, 0.2)
    return model


def _data(*shape: int) -> Tensor:
    torch.manual_seed(1)
    return torch.randn(*shape, dtype=D)


def test_ln_kernel_candidate_lists_the_consumer_it_moves() -> None:
    cands = _proposals(_linear_ln_linear(), _data(40, 5))
    (ln,) = [c for c in cands if c.detector == "ln-kernel"]
    assert ln.layers == ("2",) and ln.info["norm"] == "1" and ln.info["consumer"] == "2"
    assert _modules_moved(ln.u) == {"2"}
    # every detector's layers are exactly the modules its direction moves on this model
    for c in cands:
        assert set(c.layers) == _modules_moved(c.u), (c.detector, c.layers)


def test_ln_kernel_record_is_filed_under_the_consumer_only() -> None:
    reading = read(_linear_ln_linear(), _data(40, 5), Categorical(), progress=False)
    (ln,) = [r for r in reading.directions if r.detector == "ln-kernel"]
    assert ln.klass == "flat_gauge"
    assert (ln.layer, ln.layers, ln.info["norm"]) == ("2", ("2",), "1")
    by_layer = reading.by_layer()
    assert ln in by_layer["2"]
    assert all(r.detector != "ln-kernel" for r in by_layer.get("1", []))


class _LNAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        z = self.norm(x)
        return self.head(self.attn(z, z, z, need_weights=False)[0].mean(dim=1))


class _LNMeanHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.norm(x).mean(dim=1))


@pytest.mark.parametrize(
    ("make", "shape", "consumer", "via"),
    [
        (_LNAttention, (24, 3, 4), "attn", None),  # the packed in_proj
        (_LNMeanHead, (24, 4, 6), "head", "factor-test"),  # LayerNormReachDetector
    ],
)
def test_other_ln_kernel_paths_list_the_consumer_only(make, shape, consumer, via) -> None:
    torch.manual_seed(0)
    model = make().to(D).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.normal_(0.0, 0.2)
    (ln,) = [c for c in _proposals(model, _data(*shape)) if c.detector == "ln-kernel"]
    assert ln.layers == (consumer,) and ln.info["norm"] == "norm"
    assert ln.info.get("via") == via
    assert _modules_moved(ln.u) == {consumer}
