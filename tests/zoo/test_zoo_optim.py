"""Muon re-implementation vs torch.optim.Muon; parameter split; optimizer construction."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from neuromanifold.zoo.models import ViTConfig, build_model
from neuromanifold.zoo.optim import Muon, OptimizerConfig, build_optimizer, split_parameters
from neuromanifold.zoo.polar import newton_schulz, polar_svd

ATOL_SVD_STEP = 1e-13  # one float64 Muon step vs its closed form (measured max 4.4e-16)


@pytest.mark.parametrize("shape", [(16, 8), (8, 16)])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_with_bf16_newton_schulz_matches_torch_muon(shape, nesterov) -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(*shape, generator=gen)
    a, b = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    kw = {"lr": 0.02, "weight_decay": 0.1, "momentum": 0.9, "nesterov": nesterov}
    ref = torch.optim.Muon([a], **kw)
    ours = Muon([b], orthogonalizer=partial(newton_schulz, dtype=torch.bfloat16), **kw)
    for _ in range(6):
        g = torch.randn(*shape, generator=gen)
        a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    # identical float32/bf16 operations in the same order: bit-identical parameters (measured
    # on 4 shapes × 4 seeds × both Nesterov settings, 1 and 2 threads)
    assert torch.equal(b.detach(), a.detach())
    assert not torch.equal(a.detach(), w)  # the parameters moved


def test_muon_step_with_svd_is_exact_formula() -> None:
    """One step from zero momentum: W ← W(1 − lr·wd) − lr·√max(1, A/B)·polar(g)."""
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    g = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    Muon([p], lr=0.1, weight_decay=0.5, momentum=0.9, nesterov=True, orthogonalizer="svd").step()
    # m = 0.1 g; Nesterov u = 0.1 g + 0.9·0.1 g = 0.19 g; polar is scale-invariant
    expected = w * (1 - 0.1 * 0.5) - 0.1 * (12 / 4) ** 0.5 * polar_svd(g)
    torch.testing.assert_close(p.detach(), expected, atol=ATOL_SVD_STEP, rtol=0)


def test_split_parameters_on_vit() -> None:
    model = build_model(ViTConfig(depth=1), seed=0)
    matrix, other = split_parameters(model)
    assert sorted(matrix) == sorted(
        f"blocks.0.{m}.weight"
        for m in (
            "attn.q_proj",
            "attn.k_proj",
            "attn.v_proj",
            "attn.out_proj",
            "mlp.fc1",
            "mlp.fc2",
        )
    )
    assert "head.weight" in other and "patch_embed.proj.weight" in other
    assert set(matrix).isdisjoint(other)
    assert len(matrix) + len(other) == len(list(model.parameters()))


@pytest.mark.parametrize("name", ["adamw", "muon", "muon-polar-express", "muon-polar-svd"])
def test_build_optimizer_covers_every_parameter_once(name) -> None:
    model = build_model(ViTConfig(depth=1), seed=0)
    opt = build_optimizer(model, OptimizerConfig(name))
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    assert all("initial_lr" in g for g in opt.param_groups)
    kinds = {type(o).__name__ for o in opt.optimizers}
    expected = {"adamw": {"AdamW"}, "muon": {"AdamW", "Muon"}}.get(name, {"AdamW", "Muon"})
    assert kinds == expected
    if name == "muon":
        assert any(isinstance(o, torch.optim.Muon) for o in opt.optimizers)
    elif name != "adamw":
        assert any(isinstance(o, Muon) for o in opt.optimizers)


def test_no_weight_decay_on_norms_and_biases() -> None:
    model = build_model(ViTConfig(depth=1), seed=0)
    opt = build_optimizer(model, OptimizerConfig("adamw", weight_decay=0.3))
    names = {id(p): n for n, p in model.named_parameters()}
    for g in opt.param_groups:
        for p in g["params"]:
            decays = g["weight_decay"] > 0
            name = names[id(p)]
            assert decays == (name.endswith("weight") and "norm" not in name), name


def test_optimizer_config_errors() -> None:
    with pytest.raises(ValueError, match="optimizer name must be one of"):
        OptimizerConfig("sgd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lr must be a finite number >= 0, got -1"):
        OptimizerConfig(lr=-1)
    with pytest.raises(TypeError, match="config must be an OptimizerConfig, got dict"):
        build_optimizer(build_model(ViTConfig(depth=1)), {"name": "adamw"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="orthogonalizer must be one of"):
        Muon([torch.nn.Parameter(torch.ones(2, 2))], orthogonalizer="qr")
    with pytest.raises(ValueError, match=r"Muon takes 2-D parameters only, got shape \(3,\)"):
        Muon([torch.nn.Parameter(torch.ones(3))])


def test_config_round_trip() -> None:
    cfg = OptimizerConfig("muon-polar-express", lr=1e-3, betas=(0.8, 0.9))
    assert OptimizerConfig(**cfg.to_dict()) == cfg
