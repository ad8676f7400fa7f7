"""`embedding_rows_seen`: the rows each embedding's weight is looked up at on the probe set.

The rows come from the ``F.embedding`` calls into the weight, not from the module's first input:
a subclass that computes its own positions (OPT's learned positional embedding takes the
attention mask and adds an offset) must report the positions it looks up, and a whole read of
such a model must class the untouched rows as a flat gauge.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from neuromanifold.singular.detectors.embedding import embedding_rows_seen
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.read import read

VOCAB, POSITIONS, OFFSET, SEQ, N = 12, 10, 2, 4, 16


class _OffsetPositions(nn.Embedding):
    """Positions ``cumsum(mask) − 1 + OFFSET`` computed from a float mask, then looked up."""

    def forward(self, mask: Tensor) -> Tensor:  # type: ignore[override]
        positions = (torch.cumsum(mask, dim=1) - 1).long() + OFFSET
        return super().forward(positions)


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, 6)
        self.pos = _OffsetPositions(POSITIONS, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: Tensor) -> Tensor:
        mask = torch.ones(x.shape, dtype=torch.float64)
        return self.head((self.tok(x) + self.pos(mask)).mean(1))


def _data() -> Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCAB - 3, (N, SEQ), generator=gen)  # the last 3 tokens never occur


def test_rows_are_the_looked_up_indices() -> None:
    torch.manual_seed(0)
    x = _data()
    seen, passes = embedding_rows_seen(_Model().double(), x, batch=5)
    assert passes == 4  # ⌈16 / 5⌉
    assert seen["tok"].tolist() == torch.unique(x).tolist()
    assert seen["pos"].tolist() == list(range(OFFSET, OFFSET + SEQ))


def test_model_without_embeddings_records_nothing() -> None:
    assert embedding_rows_seen(nn.Linear(3, 2), torch.randn(4, 3), batch=2) == ({}, 0)


def test_whole_read_classes_the_unseen_positions_flat() -> None:
    torch.manual_seed(0)
    x = _data()
    reading = read(_Model(), x, Categorical(), progress=False)
    emb = {r.layers[0]: r for r in reading.directions if r.detector == "embedding-unseen"}
    assert emb["pos"].klass == "flat_gauge" and emb["tok"].klass == "flat_gauge"
    assert emb["pos"].info["unseen_rows"] == POSITIONS - SEQ
    assert emb["tok"].info["unseen_rows"] == VOCAB - torch.unique(x).numel()
    assert reading.not_covered == ()


def test_tied_embeddings_report_the_union_under_the_first_name() -> None:
    """Two modules sharing one weight: every lookup into it counts for that tensor."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Embedding(VOCAB, 3)
            self.b = nn.Embedding(VOCAB, 3)
            self.b.weight = self.a.weight

        def forward(self, x: Tensor) -> Tensor:
            return self.a(x[:, 0]) + self.b(x[:, 1])

    x = torch.tensor([[0, 5], [2, 5], [0, 7]])
    seen, _ = embedding_rows_seen(Tied(), x, batch=2)
    assert list(seen) == ["a"] and seen["a"].tolist() == [0, 2, 5, 7]
