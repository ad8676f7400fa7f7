"""Categorical sequence logits ``(N, T, C)``: one label per position, Fisher summed over positions.

Laws checked: the forward-mode read equals the per-position oracle and the Fisher of the product
distribution enumerated label sequence by label sequence; one position reads exactly like plain
``(N, C)`` logits; a causal toy language model reads end to end with its exact flat gauges.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from neuromanifold import read
from neuromanifold.singular import Categorical, directional_fisher, directional_fisher_reference

RTOL_ORACLE = 1e-10  # forward mode vs per-sample gradients, float64
ATOL_ORACLE = 1e-14
RTOL_SAME = 1e-13  # the same quantity through two layouts (only summation order differs)

D = torch.float64
VOCAB, DIM, T = 6, 4, 3
UNSEEN = 5  # a token id that never occurs in the probe set


class TinyLM(nn.Module):
    """Embedding → causal running mean → tanh(Linear) → Linear head: logits ``(N, T, VOCAB)``."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.emb(x)
        steps = torch.arange(1, x.shape[1] + 1, dtype=e.dtype, device=e.device)
        h = e.cumsum(1) / steps[:, None]  # position t sees tokens 0..t only
        return self.head(torch.tanh(self.mix(h)))


def _setup(n: int = 5, seed: int = 0):
    torch.manual_seed(seed)
    model = TinyLM().to(D)
    params = dict(model.named_parameters())
    x = torch.randint(0, UNSEEN, (n, T))
    g = torch.Generator().manual_seed(seed + 1)
    dirs = [
        {k: torch.randn(v.shape, generator=g, dtype=D) for k, v in params.items()},
        {"mix.weight": torch.randn(DIM, DIM, generator=g, dtype=D)},
    ]
    return model, params, x, dirs


def test_sequence_fisher_matches_per_position_oracle() -> None:
    model, params, x, dirs = _setup()
    got = directional_fisher(model, params, dirs, x, Categorical(), chunk_size=2)
    ref = directional_fisher_reference(model, params, dirs, x, Categorical())
    torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)
    assert bool((got > 0).all())


def test_empirical_sequence_fisher_matches_oracle() -> None:
    model, params, x, dirs = _setup()
    y = torch.randint(0, VOCAB, x.shape, generator=torch.Generator().manual_seed(3))
    got = directional_fisher(model, params, dirs, (x, y), Categorical(), empirical=True)
    ref = directional_fisher_reference(model, params, dirs, (x, y), Categorical(), empirical=True)
    torch.testing.assert_close(got, ref, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


def test_sequence_fisher_is_the_product_distribution_fisher() -> None:
    """Enumerate every label sequence ``y ∈ [C]^T`` with weight ``Π_t p_t(y_t)``: the Fisher of the
    joint likelihood, cross-position terms included, equals the per-position sum the read uses."""
    model, params, x, dirs = _setup(n=2)
    fam = Categorical()
    keys = list(params)
    u = dirs[0]
    with torch.no_grad():
        p = torch.softmax(model(x), dim=-1)
    total = torch.zeros((), dtype=D)
    for i in range(x.shape[0]):
        for seq in itertools.product(range(VOCAB), repeat=T):
            y = torch.tensor([seq])
            weight = torch.prod(p[i, torch.arange(T), y[0]])
            grads = torch.autograd.grad(
                fam.log_likelihood(model(x[i : i + 1]), y).sum(), [params[k] for k in keys]
            )
            score = sum((g * u[k]).sum() for g, k in zip(grads, keys, strict=True))
            total += weight * score**2
    enumerated = total / x.shape[0]
    norm2 = sum((v * v).sum() for v in u.values())  # directional_fisher reads the unit u/‖u‖
    got = directional_fisher(model, params, u, x, fam) * norm2
    torch.testing.assert_close(got, enumerated, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


class LastPosition(nn.Module):
    """The TinyLM's logits at one position, as ``(N, 1, C)`` or ``(N, C)``."""

    def __init__(self, lm: TinyLM, *, keep_axis: bool) -> None:
        super().__init__()
        self.lm, self.keep_axis = lm, keep_axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.lm(x)[:, -1]
        return z.unsqueeze(1) if self.keep_axis else z


def test_one_position_reads_like_plain_logits() -> None:
    model, _, x, dirs = _setup()
    values = []
    for keep_axis in (True, False):
        wrapped = LastPosition(model, keep_axis=keep_axis)
        p = dict(wrapped.named_parameters())
        us = [{f"lm.{k}": v for k, v in d.items()} for d in dirs]
        values.append(directional_fisher(wrapped, p, us, x, Categorical()))
    torch.testing.assert_close(values[0], values[1], rtol=RTOL_SAME, atol=0.0)


def test_read_of_a_causal_lm_finds_its_flat_gauges() -> None:
    """The logit shift of the head and the never-seen token's embedding row are exact flat
    gauges of the next-token likelihood; the read names both and classes them flat."""
    model, _, x, _ = _setup(n=16)
    reading = read(model, x, Categorical(), progress=False)
    by_detector = {d.detector: d for d in reading.directions}
    assert {"ce-shift", "embedding-unseen"} <= set(by_detector)
    for name in ("ce-shift", "embedding-unseen"):
        assert by_detector[name].klass == "flat_gauge", (name, by_detector[name].reason)
    assert reading.not_covered == ()


def test_error_sequence_labels_of_the_wrong_shape() -> None:
    model, params, x, dirs = _setup()
    with pytest.raises(ValueError, match=r"indices of shape \(5, 3\) \(the .*got shape \(5,\)"):
        directional_fisher(
            model,
            params,
            dirs[0],
            (x, torch.zeros(5, dtype=torch.long)),
            Categorical(),
            empirical=True,
        )
    with pytest.raises(ValueError, match=r"got shape \(5, 3\), dtype torch.float64"):
        directional_fisher(
            model, params, dirs[0], (x, torch.zeros(5, 3, dtype=D)), Categorical(), empirical=True
        )


def test_error_logits_without_a_class_axis() -> None:
    one_d = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)).to(D)
    with pytest.raises(ValueError, match=r"expects floating logits .* returned shape \(4,\)"):
        directional_fisher(
            one_d,
            dict(one_d.named_parameters()),
            {"0.bias": torch.ones(1)},
            torch.randn(4, 3, dtype=D),
            Categorical(),
        )


def test_error_labels_outside_the_classes() -> None:
    """Without an ``ignore_index``, −100 or a class id ≥ C is not a label: the fast path and
    the oracle both refuse it (the oracle's own masked label set is internal)."""
    model, params, x, dirs = _setup()
    for bad, shown in ((-100, "-100 to"), (VOCAB, f"to {VOCAB}")):
        y = torch.zeros(x.shape, dtype=torch.long)
        y[1, 2] = bad
        for fn in (directional_fisher, directional_fisher_reference):
            with pytest.raises(ValueError, match=rf"lie in \[0, {VOCAB}\) .*{shown}"):
                fn(model, params, dirs[0], (x, y), Categorical(), empirical=True)


def test_block_fisher_oracle_of_sequence_logits_matches_the_directional_read() -> None:
    """A Linear applied at every position: the exact block Fisher (jacrev, block-diagonal H over
    positions) and the forward-mode read agree along a direction of its [W, b]."""
    from neuromanifold.singular.factors import block_fisher_reference

    torch.manual_seed(0)
    lin = nn.Linear(4, 3).to(D)
    x = torch.randn(2, 5, 4, dtype=D)
    u_w, u_b = torch.randn(3, 4, dtype=D), torch.randn(3, dtype=D)
    fb = block_fisher_reference(lin, x, Categorical(), "")
    vec = torch.cat([u_w, u_b[:, None]], 1).T.reshape(-1)  # column-major vec of [W, b]
    norm2 = float((u_w**2).sum() + (u_b**2).sum())
    got = directional_fisher(
        lin, dict(lin.named_parameters()), {"weight": u_w, "bias": u_b}, x, Categorical()
    )
    torch.testing.assert_close(vec @ fb @ vec / norm2, got, rtol=RTOL_ORACLE, atol=ATOL_ORACLE)


class TiedLM(nn.Module):
    """Embedding → LayerNorm → causal running mean → tanh(Linear) → head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.mix = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = self.norm(self.emb(x))
        steps = torch.arange(1, x.shape[1] + 1, dtype=e.dtype, device=e.device)
        return self.head(torch.tanh(self.mix(e.cumsum(1) / steps[:, None])))


def test_tied_head_logit_shift_is_flat_and_unseen_rows_are_live() -> None:
    """With the head tied to the embedding, ``ΔW = 𝟙𝟙ᵀ`` moves every token embedding by the same
    multiple of 𝟙 (removed by the LayerNorm) and every logit by the same amount: a flat gauge.
    The rows of never-seen tokens are not dead: the head reads them (their logits move)."""
    torch.manual_seed(0)
    model = TiedLM().to(D).eval()
    x = torch.randint(0, UNSEEN, (16, T))
    reading = read(model, x, Categorical(), progress=False)
    by_detector = {d.detector: d for d in reading.directions}
    shift, unseen = by_detector["ce-shift"], by_detector["embedding-unseen"]
    assert shift.klass == "flat_gauge" and shift.info["tied"] == {"head.weight": "emb.weight"}
    assert (unseen.klass, unseen.k) == ("live", 1)
