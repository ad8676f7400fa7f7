"""Training loop: determinism, learning with every optimizer, schedule, errors."""

from __future__ import annotations

import math

import pytest
import torch

from neuromanifold.zoo.data import digits
from neuromanifold.zoo.models import ViTConfig, build_model
from neuromanifold.zoo.optim import OPTIMIZER_NAMES, OptimizerConfig
from neuromanifold.zoo.train import TrainConfig, evaluate, lr_factor, train

SMALL = ViTConfig(dim=16, heads=2, depth=1, mlp_ratio=2, patch_size=4)
FAST = {"lr": 1e-2, "muon_lr": 0.05}  # rates at which this small ViT learns within 50 steps
LOSS_DROP = 0.7  # 50 steps must cut the validation loss to below 70% of its initial value
RTOL_SCHEDULE = 1e-13  # lr_factor vs its closed form, float64 (measured max 6.8e-16)


@pytest.fixture(scope="module")
def data():
    return digits(seed=0)


def _run(data, seed: int, name: str = "adamw", steps: int = 12):
    model = build_model(SMALL, seed=seed)
    cfg = TrainConfig(steps=steps, batch_size=64, warmup_steps=2, eval_every=6, seed=seed)
    result = train(model, data, optimizer=OptimizerConfig(name), config=cfg, progress=False)
    return model, result


def test_same_seed_gives_identical_weights(data) -> None:
    a, ra = _run(data, seed=3, name="muon-polar-express")
    b, rb = _run(data, seed=3, name="muon-polar-express")
    c, _ = _run(data, seed=4, name="muon-polar-express")
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    assert ra.metrics == rb.metrics
    assert any(not torch.equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())


@pytest.mark.parametrize("name", OPTIMIZER_NAMES)
def test_every_optimizer_learns_digits_in_50_steps(data, name) -> None:
    model = build_model(SMALL, seed=0)
    before = evaluate(model, data.x_val, data.y_val)["loss"]
    cfg = TrainConfig(steps=50, batch_size=64, warmup_steps=5, eval_every=50)
    result = train(model, data, optimizer=OptimizerConfig(name, **FAST), config=cfg, progress=False)
    assert result.metrics["val_loss"] < LOSS_DROP * before, (before, result.metrics)
    assert result.history[-1]["step"] == 50


def test_progress_bar_path_runs(data) -> None:
    model = build_model(SMALL, seed=0)
    cfg = TrainConfig(steps=2, batch_size=32, warmup_steps=0, eval_every=1)
    result = train(model, data, optimizer=OptimizerConfig(), config=cfg, progress=True)
    assert [h["step"] for h in result.history] == [1, 2]


def test_thread_setting_is_restored(data) -> None:
    before = torch.get_num_threads()
    model = build_model(SMALL, seed=0)
    cfg = TrainConfig(steps=1, batch_size=32, warmup_steps=0, eval_every=1)
    train(model, data, optimizer=OptimizerConfig(), config=cfg, progress=False, num_threads=1)
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="num_threads must be a positive int or None, got 0"):
        train(model, data, optimizer=OptimizerConfig(), config=cfg, num_threads=0)


def test_lr_schedule_shape() -> None:
    """Warm-up (s + 1)/W for s < W, then f + (1 − f)(1 + cos(π·(s − W)/(S − 1 − W)))/2."""
    cfg = TrainConfig(steps=110, warmup_steps=10, final_lr_fraction=0.1)
    f, w, span = 0.1, 10, 110 - 1 - 10
    assert lr_factor(0, cfg) == pytest.approx(0.1, rel=RTOL_SCHEDULE, abs=0)
    assert lr_factor(9, cfg) == pytest.approx(1.0, rel=RTOL_SCHEDULE, abs=0)
    assert lr_factor(10, cfg) == pytest.approx(1.0, rel=RTOL_SCHEDULE, abs=0)
    assert lr_factor(109, cfg) == pytest.approx(0.1, rel=RTOL_SCHEDULE, abs=0)
    mid = lr_factor(10 + 99 // 2, cfg)  # r = 49/99
    assert mid == pytest.approx(
        f + (1 - f) * (1 + math.cos(math.pi * 49 / 99)) / 2, rel=RTOL_SCHEDULE
    )
    for s in range(110):
        law = (s + 1) / w if s < w else f + (1 - f) * (1 + math.cos(math.pi * (s - w) / span)) / 2
        assert lr_factor(s, cfg) == pytest.approx(law, rel=RTOL_SCHEDULE, abs=0), s
    assert lr_factor(500, cfg) == pytest.approx(f, rel=RTOL_SCHEDULE, abs=0)  # r is capped at 1
    const = TrainConfig(steps=50, warmup_steps=0, schedule="constant")
    assert {lr_factor(s, const) for s in range(50)} == {1.0}


def test_train_errors(data) -> None:
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="schedule must be 'cosine' or 'constant', got 'step'"):
        TrainConfig(schedule="step")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 0, got -1"):
        TrainConfig(warmup_steps=-1)
    with pytest.raises(ValueError, match=r"final_lr_fraction must lie in \[0, 1\], got 1\.5"):
        TrainConfig(final_lr_fraction=1.5)
    with pytest.raises(TypeError, match="data must be a DataSplit, got tuple"):
        train(build_model(SMALL), (1, 2), optimizer=OptimizerConfig(), config=TrainConfig())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size=100000 exceeds the"):
        train(
            build_model(SMALL),
            data,
            optimizer=OptimizerConfig(),
            config=TrainConfig(batch_size=100000),
        )
    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        model = build_model(SMALL)
        with torch.no_grad():
            model.head.bias.fill_(float("nan"))
        train(model, data, optimizer=OptimizerConfig(), config=TrainConfig(steps=2), progress=False)
