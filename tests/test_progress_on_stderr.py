"""Progress bars are drawn on stderr: stdout carries only results (JSON, tables, findings).

Rich draws a live bar only on a terminal; ``FORCE_COLOR`` makes the captured streams count as
one, so a bar drawn on stdout would show up there."""

from __future__ import annotations

import pytest

from neuromanifold.demo import DemoConfig, _bar
from neuromanifold.zoo.data import digits
from neuromanifold.zoo.models import ViTConfig, build_model
from neuromanifold.zoo.optim import OptimizerConfig
from neuromanifold.zoo.train import TrainConfig, train


@pytest.fixture(autouse=True)
def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")


def test_training_bar_is_drawn_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    model = build_model(ViTConfig(dim=16, heads=2, depth=1, mlp_ratio=2, patch_size=4), seed=0)
    cfg = TrainConfig(steps=2, batch_size=32, warmup_steps=0, eval_every=1)
    train(model, digits(seed=0), optimizer=OptimizerConfig(), config=cfg, description="tbar")
    out, err = capfd.readouterr()
    assert "tbar" not in out
    assert "tbar" in err


def test_demo_bar_is_drawn_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    made = _bar(DemoConfig(progress=True), total=2)
    assert made is not None
    bar, task = made
    bar.update(task, advance=1, description="demo: dbar")
    bar.refresh()
    bar.stop()
    out, err = capfd.readouterr()
    assert "dbar" not in out
    assert "dbar" in err
