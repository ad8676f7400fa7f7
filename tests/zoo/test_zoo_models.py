"""Zoo models: shapes, config round trips, attention arithmetic, validation errors."""

from __future__ import annotations

import math

import pytest
import torch

from neuromanifold.zoo.models import (
    ZOO_ARCHITECTURES,
    CNNConfig,
    MLPConfig,
    ViTConfig,
    build_model,
    config_from_dict,
)

ATOL_F64 = 1e-12
ATOL_CENTRAL_FD = 1e-6  # central difference, step 1e-6, float64 (truncation ≈ 6e4·eps²)


@pytest.mark.parametrize(
    "config", [*ZOO_ARCHITECTURES.values(), ViTConfig(pool="mean", patch_size=4)]
)
def test_forward_shape_and_round_trip(config) -> None:
    model = build_model(config, seed=0)
    out = model(torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(0)))
    assert out.shape == (5, config.num_classes)
    assert config_from_dict(config.to_dict()) == config


def test_seeded_build_is_reproducible_and_leaves_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = build_model(ViTConfig(), seed=7)
    assert torch.equal(torch.random.get_rng_state(), before)
    b = build_model(ViTConfig(), seed=7)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert na == nb and torch.equal(pa, pb)


def test_attention_matches_explicit_per_head_formula() -> None:
    model = build_model(ViTConfig(depth=1, dim=8, heads=2), seed=0).double()
    attn = model.blocks[0].attn
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    heads = []
    for h in range(2):
        sl = slice(4 * h, 4 * h + 4)
        q = x @ attn.q_proj.weight[sl].T + attn.q_proj.bias[sl]
        k = x @ attn.k_proj.weight[sl].T + attn.k_proj.bias[sl]
        v = x @ attn.v_proj.weight[sl].T + attn.v_proj.bias[sl]
        heads.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(4), dim=-1) @ v)
    expected = torch.cat(heads, dim=-1) @ attn.out_proj.weight.T + attn.out_proj.bias
    torch.testing.assert_close(attn(x), expected, atol=ATOL_F64, rtol=0)


def test_qk_rotation_gauge_leaves_function_unchanged() -> None:
    model = build_model(ViTConfig(depth=1, dim=8, heads=2), seed=0).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(4, 1, 8, 8, generator=gen, dtype=torch.float64)
    before = model(x)
    r, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    with torch.no_grad():
        attn = model.blocks[0].attn
        attn.q_proj.weight[:4] = r.T @ attn.q_proj.weight[:4]
        attn.q_proj.bias[:4] = r.T @ attn.q_proj.bias[:4]
        attn.k_proj.weight[:4] = r.T @ attn.k_proj.weight[:4]
        attn.k_proj.bias[:4] = r.T @ attn.k_proj.bias[:4]
    torch.testing.assert_close(model(x), before, atol=ATOL_F64, rtol=0)


def test_torch_func_jvp_runs_in_float64() -> None:
    model = build_model(ViTConfig(depth=1, dim=8, heads=2), seed=0).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    gen = torch.Generator().manual_seed(2)
    tangent = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}
    x = torch.rand(2, 1, 8, 8, generator=gen, dtype=torch.float64)
    f = lambda p: torch.func.functional_call(model, p, (x,))  # noqa: E731
    _, jv = torch.func.jvp(f, (params,), (tangent,))
    eps = 1e-6
    plus = {k: params[k] + eps * tangent[k] for k in params}
    minus = {k: params[k] - eps * tangent[k] for k in params}
    central = (f(plus) - f(minus)) / (2 * eps)  # error O(eps²): measured 3.0e-8 here
    torch.testing.assert_close(jv, central, atol=ATOL_CENTRAL_FD, rtol=0)


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="patch_size=3 must divide image_size=8"):
        ViTConfig(patch_size=3)
    with pytest.raises(ValueError, match="heads=3 must divide dim=32"):
        ViTConfig(heads=3)
    with pytest.raises(ValueError, match="dim must be a positive int, got 0"):
        ViTConfig(dim=0)
    with pytest.raises(ValueError, match="pool must be 'cls' or 'mean'"):
        ViTConfig(pool="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hidden must be a non-empty tuple"):
        MLPConfig(hidden=())
    with pytest.raises(
        ValueError, match=r"channels must be a non-empty tuple of positive ints, got \(\)"
    ):
        CNNConfig(channels=())
    with pytest.raises(ValueError, match="kernel_size must be odd, got 2"):
        CNNConfig(kernel_size=2)
    with pytest.raises(TypeError, match="config data must be a dict, got list"):
        config_from_dict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"config 'kind' must be one of \['cnn', 'mlp', 'vit'\]"):
        config_from_dict({"kind": "resnet"})
    with pytest.raises(ValueError, match=r"unknown fields \['width'\] for ViTConfig"):
        config_from_dict({"kind": "vit", "width": 3})
    with pytest.raises(
        TypeError, match="config must be a ViTConfig, MLPConfig or CNNConfig, got dict"
    ):
        build_model({"kind": "vit"})  # type: ignore[arg-type]
