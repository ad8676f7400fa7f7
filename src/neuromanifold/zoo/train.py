"""A seeded, deterministic training loop for zoo models (cross-entropy classification).

Minibatches come from a private ``torch.Generator`` seeded with ``TrainConfig.seed``: each epoch is
a fresh permutation of the training set, cut into batches of ``batch_size`` (the last partial batch
of an epoch is dropped). Zoo models have no dropout, so the loop uses no other randomness and never
touches the global RNG; the same model initialisation, data and config give bit-identical weights.

Learning rate at step ``s`` (0-based) of ``S``: linear warm-up ``base · (s + 1)/warmup`` for
``s < warmup`` (``warmup = warmup_steps``), then either ``constant`` (the base rate) or ``cosine``:
``base · (f + (1 − f)(1 + cos(π·r))/2)`` with ``r = min(1, (s − warmup)/max(1, S − 1 − warmup))``
and ``f = final_lr_fraction`` (when ``S − 1 > warmup`` the last step ``s = S − 1`` runs at
``f · base``). Every parameter group is scaled by the same factor (AdamW's and Muon's base rates
keep their ratio).

Loss: mean cross-entropy over the batch. Evaluation (:func:`evaluate`): mean cross-entropy and
accuracy over the whole validation set, in batches, under ``torch.no_grad``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from neuromanifold.zoo.data import DataSplit
from neuromanifold.zoo.optim import OptimizerConfig, build_optimizer

__all__ = ["TrainConfig", "TrainResult", "evaluate", "lr_factor", "train"]


@dataclass(frozen=True)
class TrainConfig:
    """Steps, batch size, schedule and seed of :func:`train` (module docstring: the schedule)."""

    steps: int = 1000
    batch_size: int = 128
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = 50
    final_lr_fraction: float = 0.1
    eval_every: int = 250
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("steps", "batch_size", "eval_every"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive int, got {value!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule must be 'cosine' or 'constant', got {self.schedule!r}")
        if not 0.0 <= self.final_lr_fraction <= 1.0:
            raise ValueError(
                f"final_lr_fraction must lie in [0, 1], got {self.final_lr_fraction!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (``TrainConfig(**d)`` rebuilds it)."""
        return asdict(self)


@dataclass(frozen=True)
class TrainResult:
    """Outcome of :func:`train`: final metrics, the evaluation history and the wall time.

    ``metrics``: ``train_loss`` (mean over the last ``min(50, steps)`` steps), ``val_loss``,
    ``val_accuracy``; ``history``: one dict per evaluation (``step``, ``lr_factor``, the same
    keys); ``wall_s``: seconds spent in :func:`train`.
    """

    metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return asdict(self)


def lr_factor(step: int, config: TrainConfig) -> float:
    """Multiplier of the base learning rate at 0-based ``step`` (module docstring: formula).

    >>> cfg = TrainConfig(steps=101, warmup_steps=0, final_lr_fraction=0.0)
    >>> lr_factor(0, cfg), lr_factor(100, cfg)
    (1.0, 0.0)
    """
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    span = max(1, config.steps - 1 - config.warmup_steps)
    r = min(1.0, (step - config.warmup_steps) / span)
    f = config.final_lr_fraction
    return f + (1.0 - f) * 0.5 * (1.0 + math.cos(math.pi * r))


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, *, batch_size: int = 512) -> dict[str, float]:
    """Mean cross-entropy ``loss`` and ``accuracy`` of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    total_loss, correct = 0.0, 0
    for i in range(0, x.shape[0], batch_size):
        logits = model(x[i : i + batch_size])
        target = y[i : i + batch_size]
        total_loss += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(-1) == target).sum())
    model.train(was_training)
    n = max(1, x.shape[0])
    return {"loss": total_loss / n, "accuracy": correct / n}


def _batches(n: int, batch_size: int, gen: torch.Generator):
    while True:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - batch_size + 1, batch_size):
            yield perm[i : i + batch_size]


def train(
    model: nn.Module,
    data: DataSplit,
    *,
    optimizer: OptimizerConfig,
    config: TrainConfig,
    progress: bool = True,
    description: str = "train",
    num_threads: int | None = 1,
) -> TrainResult:
    """Train ``model`` in place on ``data`` with ``optimizer`` for ``config.steps`` steps.

    ``num_threads``: torch intra-op threads while training (restored afterwards; ``None`` leaves
    the setting alone). The zoo models' matrices are 32–128 wide, too small for intra-op
    parallelism to pay; on a shared machine extra threads made training several times slower.
    """
    if num_threads is None:
        return _train(model, data, optimizer, config, progress, description)
    if not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        return _train(model, data, optimizer, config, progress, description)
    finally:
        torch.set_num_threads(previous)


def _train(
    model: nn.Module,
    data: DataSplit,
    optimizer: OptimizerConfig,
    config: TrainConfig,
    progress: bool,
    description: str,
) -> TrainResult:
    if not isinstance(data, DataSplit):
        raise TypeError(f"data must be a DataSplit, got {type(data).__name__}")
    n = int(data.x_train.shape[0])
    if n < config.batch_size:
        raise ValueError(f"batch_size={config.batch_size} exceeds the {n} training samples")
    start = time.perf_counter()
    opt = build_optimizer(model, optimizer)
    gen = torch.Generator().manual_seed(config.seed)
    batches = _batches(n, config.batch_size, gen)
    history: list[dict[str, float]] = []
    recent: list[float] = []
    model.train()

    def run(advance) -> None:
        for step in range(config.steps):
            factor = lr_factor(step, config)
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * factor
            idx = next(batches)
            loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            if not torch.isfinite(loss):
                value = float(loss.detach())
                raise FloatingPointError(f"{description}: loss became {value} at step {step}")
            opt.zero_grad()
            loss.backward()
            opt.step()
            recent.append(float(loss.detach()))
            del recent[:-50]
            if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
                ev = evaluate(model, data.x_val, data.y_val)
                history.append(
                    {
                        "step": step + 1,
                        "lr_factor": factor,
                        "train_loss": sum(recent) / len(recent),
                        "val_loss": ev["loss"],
                        "val_accuracy": ev["accuracy"],
                    }
                )
            advance(recent[-1])

    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from neuromanifold._progress import stderr_progress

        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.3f}"),
            TimeElapsedColumn(),
        )
        # progress, not output: drawn on stderr so that stdout carries only the results
        with stderr_progress(*columns) as bar:
            task = bar.add_task(description, total=config.steps, loss=float("nan"))
            run(lambda loss: bar.update(task, advance=1, loss=loss))
    else:
        run(lambda loss: None)
    model.eval()
    last = history[-1]
    metrics = {
        "train_loss": last["train_loss"],
        "val_loss": last["val_loss"],
        "val_accuracy": last["val_accuracy"],
    }
    return TrainResult(metrics=metrics, history=history, wall_s=time.perf_counter() - start)
