"""A genuine record read near, not on, its structure is marked in the tables (s34 trial REPORT D1).

The cell ``y = a·tanh(b x) + c·x`` at ``a = b = 0``, ``c = 1``, read along ``u ∝ (1, 1, ε)``: the
output moves by ``(t²/2 + ε t)·x/‖·‖`` to leading order, so ``F ∝ (t + ε)²`` is flat for
``t ≪ ε`` (θ₀ is regular along u: k = 1 as t → 0) and rises as ``t²`` above (the node death it
sits near: k = 2). The read reports k = 2 and its reason says "near, not on"; the record now
carries ``info["order_below"]`` and the Markdown and CLI tables mark its class with ``‡`` and a
footnote. The exact node death (ε = 0) gets no mark.
"""

from __future__ import annotations

import json
import math

import torch
from torch import nn

from neuromanifold.report.markdown import NEAR_FOOTNOTE, class_cell, class_footnotes
from neuromanifold.singular import Gaussian
from neuromanifold.singular.detectors.base import Candidate
from neuromanifold.singular.read_candidate import ORDER_BELOW_KEY, read_candidate
from neuromanifold.singular.reading import DirectionRecord

D = torch.float64
EPS_LIVE = 1e-3
"""The live share of u: F's plateau ends near t = ε, about 1.2 decades above the grid's start
(1e-4·ρ_W, ρ_W = 1/√3), so at least 6 grid points show it."""


class NearNodeDeath(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(1, 1, bias=False).to(D)
        self.outer = nn.Linear(1, 1, bias=False).to(D)
        self.skip = nn.Linear(1, 1, bias=False).to(D)
        with torch.no_grad():
            self.inner.weight.zero_()
            self.outer.weight.zero_()
            self.skip.weight.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(torch.tanh(self.inner(x))) + self.skip(x)


def _record(eps: float, candidate_kwargs: dict) -> DirectionRecord:
    model = NearNodeDeath().eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    u = {
        "inner.weight": torch.ones(1, 1, dtype=D),
        "outer.weight": torch.ones(1, 1, dtype=D),
        "skip.weight": torch.full((1, 1), eps * math.sqrt(2), dtype=D),
    }
    x = torch.randn(256, 1, generator=torch.Generator().manual_seed(0), dtype=D)
    cand = Candidate(("inner", "outer", "skip"), "duality", u)
    rec, _ = read_candidate(cand, model, params, x, Gaussian(), **candidate_kwargs)
    return rec


def test_a_read_near_a_node_death_is_marked_with_the_order_at_the_point(
    candidate_kwargs: dict,
) -> None:
    rec = _record(EPS_LIVE, candidate_kwargs)
    assert (rec.klass, rec.k) == ("genuine_singularity", 2)
    assert "near, not on" in rec.reason
    below = rec.info[ORDER_BELOW_KEY]
    assert below["k"] == 1 and abs(below["slope"]) < 0.3
    lo, hi = below["t"]
    assert lo < hi
    assert hi < EPS_LIVE < rec.window[1]  # the plateau's points lie below the live share's scale
    assert class_cell(rec) == "genuine_singularity‡"
    assert class_footnotes([rec]) == [NEAR_FOOTNOTE]
    back = DirectionRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back.info[ORDER_BELOW_KEY] == below


def test_the_exact_node_death_is_not_marked(candidate_kwargs: dict) -> None:
    rec = _record(0.0, candidate_kwargs)
    assert (rec.klass, rec.k) == ("genuine_singularity", 2)
    assert ORDER_BELOW_KEY not in rec.info
    assert class_cell(rec) == "genuine_singularity" and class_footnotes([rec]) == []


def test_the_markdown_report_shows_the_mark_and_its_footnote(candidate_kwargs: dict) -> None:
    from neuromanifold.report.markdown import reading_markdown
    from neuromanifold.singular.reading import Reading

    near, exact = _record(EPS_LIVE, candidate_kwargs), _record(0.0, candidate_kwargs)
    md = reading_markdown(Reading(directions=(near,), not_covered=(), meta={"n_samples": 256}))
    assert "genuine_singularity‡" in md and NEAR_FOOTNOTE in md
    md = reading_markdown(Reading(directions=(exact,), not_covered=(), meta={"n_samples": 256}))
    assert "‡" not in md
