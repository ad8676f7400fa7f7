"""Named training recipes, cached on disk: ``vit-digits-scratch``, ``vit-digits-finetune``,
``optimizer-sweep``.

Every recipe trains the zoo ViT (:data:`~neuromanifold.zoo.models.ZOO_ARCHITECTURES`) on the
bundled digits and writes one checkpoint per stage (``<stage>.safetensors`` + ``.json`` sidecar)
into the output directory (default: the user cache, ``$XDG_CACHE_HOME/neuromanifold/zoo`` or
``~/.cache/neuromanifold/zoo``). A stage whose checkpoint already exists there with a sidecar whose
``recipe_config`` equals the stage's configuration (architecture, task, optimizer, training
config, seed, library version, and for a stage that starts from another that stage's weights
hash) and whose weights file still has the hash its sidecar records is loaded instead of
retrained: the cache is only ever filled by the recipes themselves.

``seed`` sets the model initialisation and the minibatch order; the train/val split of the digits
is fixed (split seed 0) so validation numbers are comparable across seeds. ``steps`` overrides the
number of steps of every stage.

Recipes (stage names in brackets; :data:`RECIPES` holds the defaults):

* ``vit-digits-scratch`` [``vit-digits-scratch``] — AdamW (lr 1e-2, decoupled weight decay 1.0,
  cosine to 0) for 1200 steps on all ten classes, far past fitting the training set, so weight
  decay drives spare MLP units towards zero. "Compresses" is measured by
  :func:`~neuromanifold.zoo.compression.mlp_usage` and stored in the sidecar metrics: per block the
  number of hidden units whose RMS contribution to the residual is below 1% (and 10%) of the
  largest, and the participation ratio, each at initialisation and after training.
* ``vit-digits-finetune`` [``vit-digits-pretrain``, ``vit-digits-finetune``] — pretrain on digits
  0–4, then fine-tune all weights on digits 5–9 (relabelled 0–4, same head shape) with a 3×
  smaller learning rate, light weight decay and half the steps.
* ``optimizer-sweep`` [``sweep-adamw``, ``sweep-muon``, ``sweep-muon-polar-express``,
  ``sweep-muon-polar-svd``] — the same initialisation and batches under the four optimizers of
  :mod:`neuromanifold.zoo.optim`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch import nn

from neuromanifold.zoo.checkpoint import (
    CheckpointMeta,
    load_checkpoint,
    read_meta,
    save_checkpoint,
    weights_sha256,
)
from neuromanifold.zoo.compression import MLPUsage, mlp_usage
from neuromanifold.zoo.data import digits
from neuromanifold.zoo.models import ViTConfig, ZooConfig, build_model
from neuromanifold.zoo.optim import OPTIMIZER_NAMES, OptimizerConfig
from neuromanifold.zoo.train import TrainConfig, evaluate, train

__all__ = ["RECIPES", "Recipe", "RecipeResult", "Stage", "default_cache_dir", "run_recipe"]


@dataclass(frozen=True)
class Stage:
    """One training run: ``task`` data, ``optimizer``, ``train`` config; ``init_from`` names an
    earlier stage whose weights initialise this one (``None``: fresh seeded init)."""

    name: str
    task: str
    optimizer: OptimizerConfig
    train: TrainConfig
    init_from: str | None = None


@dataclass(frozen=True)
class Recipe:
    """A named sequence of :class:`Stage` runs on one architecture."""

    name: str
    architecture: ZooConfig
    stages: tuple[Stage, ...]
    description: str = ""


@dataclass(frozen=True)
class RecipeResult:
    """Checkpoint paths and sidecar metrics per stage; ``cached`` lists stages loaded from disk."""

    name: str
    checkpoints: dict[str, Path]
    metrics: dict[str, dict[str, Any]]
    cached: tuple[str, ...] = ()
    wall_s: float = 0.0
    stage_wall_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {
            "name": self.name,
            "checkpoints": {k: str(v) for k, v in self.checkpoints.items()},
            "metrics": self.metrics,
            "cached": list(self.cached),
            "wall_s": self.wall_s,
            "stage_wall_s": self.stage_wall_s,
        }


_SCRATCH_TRAIN = TrainConfig(
    steps=1200, schedule="cosine", final_lr_fraction=0.0, warmup_steps=50, eval_every=300
)
_SWEEP_TRAIN = TrainConfig(steps=400, schedule="cosine", warmup_steps=20, eval_every=100)

RECIPES: dict[str, Recipe] = {
    "vit-digits-scratch": Recipe(
        name="vit-digits-scratch",
        architecture=ViTConfig(),
        stages=(
            Stage(
                "vit-digits-scratch",
                "digits",
                OptimizerConfig("adamw", lr=1e-2, weight_decay=1.0),
                _SCRATCH_TRAIN,
            ),
        ),
        description="ViT from scratch on 10-class digits; AdamW lr 1e-2, weight decay 1.0, cosine.",
    ),
    "vit-digits-finetune": Recipe(
        name="vit-digits-finetune",
        architecture=ViTConfig(num_classes=5),
        stages=(
            Stage(
                "vit-digits-pretrain",
                "digits-0to4",
                OptimizerConfig("adamw", lr=3e-3, weight_decay=0.05),
                TrainConfig(steps=400, eval_every=100),
            ),
            Stage(
                "vit-digits-finetune",
                "digits-5to9",
                OptimizerConfig("adamw", lr=1e-3, weight_decay=0.01),
                TrainConfig(steps=200, warmup_steps=10, eval_every=50),
                init_from="vit-digits-pretrain",
            ),
        ),
        description="Pretrain on digits 0-4, fine-tune on digits 5-9 (relabelled 0-4).",
    ),
    "optimizer-sweep": Recipe(
        name="optimizer-sweep",
        architecture=ViTConfig(),
        stages=tuple(
            Stage(f"sweep-{opt}", "digits", OptimizerConfig(opt), _SWEEP_TRAIN)
            for opt in OPTIMIZER_NAMES
        ),
        description="One ViT init trained with AdamW, Muon, Muon+Polar Express, Muon+SVD polar.",
    ),
}
"""The named recipes (module docstring: what each does)."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/neuromanifold/zoo`` (``~/.cache`` when unset), read at call time."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "neuromanifold" / "zoo"


def _stage_config(
    recipe: Recipe, stage: Stage, seed: int, parent_sha256: str | None = None
) -> dict[str, Any]:
    """What a stage's cached checkpoint must have been trained with; a stage that starts from
    another holds that stage's weights hash (``init_sha256``), so it is retrained when its parent
    was (s32 trial TRAIN #1: a fine-tune was taken from the cache after its pretrain stage had
    been retrained with other steps)."""
    from neuromanifold import __version__

    return {
        "init_sha256": parent_sha256,
        "recipe": recipe.name,
        "stage": stage.name,
        "architecture": recipe.architecture.to_dict(),
        "task": stage.task,
        "optimizer": stage.optimizer.to_dict(),
        "train": stage.train.to_dict(),
        "init_from": stage.init_from,
        "seed": seed,
        "library_version": __version__,
    }


def _count_below(usage: list[MLPUsage], threshold: float) -> dict[str, int]:
    return {u.layer: sum(c < threshold for c in u.relative_contribution) for u in usage}


def _cached(path: Path, config: dict[str, Any]) -> tuple[nn.Module, CheckpointMeta] | None:
    """The checkpoint at ``path`` when its sidecar's ``recipe_config`` is ``config`` and the weights
    file still has the SHA-256 the sidecar was written with (s32 trial TRAIN #2: other weights
    under a matching sidecar were taken, with the sidecar's metrics); else None."""
    if not path.is_file():
        return None
    try:
        meta = read_meta(path)
        if meta.recipe_config != config:
            return None
        if not meta.weights_sha256 or meta.weights_sha256 != weights_sha256(path):
            return None
        return load_checkpoint(path)
    except (OSError, ValueError):
        return None  # unreadable or stale cache entries are retrained and overwritten


def run_recipe(
    name: str,
    *,
    out: str | Path | None = None,
    steps: int | None = None,
    seed: int = 0,
    progress: bool = True,
    use_cache: bool = True,
) -> RecipeResult:
    """Run recipe ``name`` (or load its stages from ``out``'s cache); see the module docstring."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; expected one of {sorted(RECIPES)}")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    recipe = RECIPES[name]
    directory = Path(out) if out is not None else default_cache_dir()
    start = time.perf_counter()
    models: dict[str, nn.Module] = {}
    checkpoints: dict[str, Path] = {}
    metrics: dict[str, dict[str, Any]] = {}
    stage_wall: dict[str, float] = {}
    cached: list[str] = []
    metas: dict[str, CheckpointMeta] = {}
    for stage in recipe.stages:
        t0 = time.perf_counter()
        if steps is not None:
            tc = stage.train
            stage = replace(
                stage,
                train=replace(
                    tc,
                    steps=steps,
                    eval_every=min(tc.eval_every, steps),
                    warmup_steps=min(tc.warmup_steps, steps // 10),
                ),
            )
        stage = replace(stage, train=replace(stage.train, seed=seed))
        parent = metas[stage.init_from].weights_sha256 if stage.init_from else None
        config = _stage_config(recipe, stage, seed, parent)
        path = directory / f"{stage.name}.safetensors"
        hit = _cached(path, config) if use_cache else None
        if hit is not None:
            models[stage.name], meta = hit
            cached.append(stage.name)
        else:
            data = digits(stage.task, seed=0)  # type: ignore[arg-type]
            if stage.init_from is None:
                model = build_model(recipe.architecture, seed=seed)
            else:
                model = build_model(recipe.architecture)
                model.load_state_dict(models[stage.init_from].state_dict())
            usage_init = mlp_usage(model, data.x_train)
            result = train(
                model,
                data,
                optimizer=stage.optimizer,
                config=stage.train,
                progress=progress,
                description=stage.name,
            )
            usage = mlp_usage(model, data.x_train)
            train_eval = evaluate(model, data.x_train, data.y_train)
            stage_metrics: dict[str, Any] = {
                **result.metrics,
                "train_accuracy": train_eval["accuracy"],
                "train_loss_full": train_eval["loss"],
                "wall_s": result.wall_s,
                "mlp_compressed_units_init": {u.layer: u.compressed for u in usage_init},
                "mlp_compressed_units": {u.layer: u.compressed for u in usage},
                "mlp_compressed_units_0.1_init": _count_below(usage_init, 0.1),
                "mlp_compressed_units_0.1": _count_below(usage, 0.1),
                "mlp_participation_ratio_init": {
                    u.layer: u.participation_ratio for u in usage_init
                },
                "mlp_participation_ratio": {u.layer: u.participation_ratio for u in usage},
                "history": result.history,
            }
            meta = CheckpointMeta(
                architecture=recipe.architecture.to_dict(),
                optimizer=stage.optimizer.to_dict(),
                train=stage.train.to_dict(),
                seed=seed,
                steps=stage.train.steps,
                metrics=stage_metrics,
                task=stage.task,
                recipe=recipe.name,
                recipe_config=config,
            )
            save_checkpoint(path, model, meta)
            meta = read_meta(path)  # with the weights hash save_checkpoint added
            models[stage.name] = model
        checkpoints[stage.name] = path
        metas[stage.name] = meta
        metrics[stage.name] = meta.metrics
        stage_wall[stage.name] = time.perf_counter() - t0
    return RecipeResult(
        name=name,
        checkpoints=checkpoints,
        metrics=metrics,
        cached=tuple(cached),
        wall_s=time.perf_counter() - start,
        stage_wall_s=stage_wall,
    )
