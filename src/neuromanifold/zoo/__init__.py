"""Small real models, embedded data (scikit-learn digits), training with AdamW / Muon /
polar-scaled orthogonalizers, checkpoints and cached recipes.

Data: :func:`digits`, :func:`load_arrays`, :func:`split_arrays`, :class:`DataSplit`.
Models: :class:`ViTConfig`, :class:`MLPConfig`, :class:`CNNConfig`, :func:`build_model`,
:func:`config_from_dict`, :data:`ZOO_ARCHITECTURES`.
Orthogonalizers: :func:`newton_schulz`, :func:`polar_express`, :func:`polar_svd`,
:func:`polar_express_coefficients`.
Optimizers: :class:`OptimizerConfig`, :class:`Muon`, :func:`build_optimizer`,
:func:`split_parameters`.
Training and checkpoints: :class:`TrainConfig`, :func:`train`, :func:`evaluate`,
:func:`save_checkpoint`, :func:`load_checkpoint`, :class:`CheckpointMeta`.
Recipes: :data:`RECIPES`, :func:`run_recipe`; MLP usage: :func:`mlp_usage`.
"""

from neuromanifold.zoo.checkpoint import CheckpointMeta, load_checkpoint, read_meta, save_checkpoint
from neuromanifold.zoo.compression import MLPUsage, mlp_usage
from neuromanifold.zoo.data import DataSplit, digits, load_arrays, split_arrays
from neuromanifold.zoo.models import (
    ZOO_ARCHITECTURES,
    CNNConfig,
    MLPConfig,
    ViTConfig,
    build_model,
    config_from_dict,
)
from neuromanifold.zoo.optim import Muon, OptimizerConfig, build_optimizer, split_parameters
from neuromanifold.zoo.polar import (
    POLAR_EXPRESS_COEFFICIENTS,
    newton_schulz,
    polar_express,
    polar_express_coefficients,
    polar_svd,
)
from neuromanifold.zoo.recipes import RECIPES, RecipeResult, run_recipe
from neuromanifold.zoo.train import TrainConfig, TrainResult, evaluate, train

__all__ = [
    "POLAR_EXPRESS_COEFFICIENTS",
    "RECIPES",
    "ZOO_ARCHITECTURES",
    "CNNConfig",
    "CheckpointMeta",
    "DataSplit",
    "MLPConfig",
    "MLPUsage",
    "Muon",
    "OptimizerConfig",
    "RecipeResult",
    "TrainConfig",
    "TrainResult",
    "ViTConfig",
    "build_model",
    "build_optimizer",
    "config_from_dict",
    "digits",
    "evaluate",
    "load_arrays",
    "load_checkpoint",
    "mlp_usage",
    "newton_schulz",
    "polar_express",
    "polar_express_coefficients",
    "polar_svd",
    "read_meta",
    "run_recipe",
    "save_checkpoint",
    "split_arrays",
    "split_parameters",
    "train",
]
