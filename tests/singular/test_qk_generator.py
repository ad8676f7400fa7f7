"""The QK-rotation direction is built from the weights (`attention._weights_generator`):
``S_g = P(M − Mᵀ)/‖·‖₂``, ``M = Σ_h Q̃_h K̃_gᵀ``, so it turns with the head's coordinates
(spec §9.1); a seeded generic element stands in where it vanishes."""

from __future__ import annotations

import torch

from neuromanifold import read
from neuromanifold.singular import Categorical
from neuromanifold.singular.detectors.attention import (
    QKRotation,
    _weights_generator,
    attention_layout,
    qk_basis,
)
from neuromanifold.zoo.models import Attention, ViTConfig, build_model

# S is built by one matrix product and normalised: agreement to float64 rounding (measured
# ≤ 1e-15 on these 4 × 4 heads)
ATOL_GENERATOR = 1e-12


def _attention(seed: int = 0) -> tuple[Attention, dict[str, torch.Tensor], QKRotation]:
    torch.manual_seed(seed)
    attn = Attention(dim=8, heads=2).double()
    params = dict(attn.named_parameters())
    lay = attention_layout(attn)
    assert lay is not None
    return attn, params, QKRotation(lay, "")


def _literal(params: dict[str, torch.Tensor], g: int, d: int) -> torch.Tensor:
    """``Q̃ K̃ᵀ − K̃ Q̃ᵀ`` for head g, the bias as the last column, entry by entry."""
    rows = range(g * d, (g + 1) * d)
    q = [[*params["q_proj.weight"][r].tolist(), float(params["q_proj.bias"][r])] for r in rows]
    k = [[*params["k_proj.weight"][r].tolist(), float(params["k_proj.bias"][r])] for r in rows]
    m = torch.tensor(
        [[sum(a * b for a, b in zip(q[i], k[j], strict=True)) for j in range(d)] for i in range(d)],
        dtype=torch.float64,
    )
    return m - m.T


def test_generator_is_the_normalised_antisymmetric_part_of_q_kt() -> None:
    _, params, orbit = _attention()
    d = orbit.layout.d_head
    for g in range(2):
        s = _weights_generator(orbit, params, g, qk_basis("so(d_head)", d))
        assert s is not None
        lit = _literal(params, g, d)
        assert torch.allclose(s, lit / torch.linalg.matrix_norm(lit, ord=2), atol=ATOL_GENERATOR)


def test_generator_keeps_only_the_basis_entries() -> None:
    _, params, orbit = _attention()
    d = orbit.layout.d_head
    pairs = qk_basis("rope-half", d)  # planes (i, i + d/2)
    s = _weights_generator(orbit, params, 0, pairs)
    assert s is not None
    keep = torch.zeros(d, d, dtype=torch.bool)
    for i, j in pairs:
        keep[i, j] = keep[j, i] = True
    assert bool((s[~keep] == 0).all()) and bool(s[keep].ne(0).all())
    lit = _literal(params, 0, d) * keep
    assert torch.allclose(s, lit / torch.linalg.matrix_norm(lit, ord=2), atol=ATOL_GENERATOR)


def test_generator_turns_with_the_head_coordinates() -> None:
    """``Q̃, K̃ → R Q̃, R K̃`` (R orthogonal, on head 1) gives ``S → R S Rᵀ``: the direction moves
    with the coordinates, for any rotation, not only relabellings."""
    _, params, orbit = _attention()
    d = orbit.layout.d_head
    r, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(3)).double())
    turned = {k: v.detach().clone() for k, v in params.items()}
    rows = slice(d, 2 * d)
    for key in ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias"):
        turned[key][rows] = r @ params[key][rows]
    pairs = qk_basis("so(d_head)", d)
    s, s_turned = (_weights_generator(orbit, p, 1, pairs) for p in (params, turned))
    assert s is not None and s_turned is not None
    assert torch.allclose(s_turned, r @ s @ r.T, atol=ATOL_GENERATOR)


def test_equal_queries_and_keys_fall_back_to_the_seeded_generator() -> None:
    """With ``W_Q = W_K`` and ``b_Q = b_K`` the weight-built element vanishes; the read still
    proposes a QK rotation per head, from the seeded generic ``S``, and says so."""
    model = build_model(ViTConfig(dim=8, heads=2, depth=1, mlp_ratio=2, patch_size=4), seed=0)
    model = model.double().eval()
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.k_proj.weight.copy_(attn.q_proj.weight)
        attn.k_proj.bias.copy_(attn.q_proj.bias)
        orbit = QKRotation(attention_layout(attn), "")
        params = dict(attn.named_parameters())
        assert _weights_generator(orbit, params, 0, qk_basis("so(d_head)", 4)) is None
    x = torch.randn(24, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    qk = [
        d
        for d in read(model, x, Categorical(), progress=False).directions
        if d.detector == "qk-rotation"
    ]
    assert [d.info["generator"] for d in qk] == ["seeded", "seeded"]
