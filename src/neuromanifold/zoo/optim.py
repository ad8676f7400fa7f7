"""Optimizers for the zoo: AdamW, Muon (torch's), and Muon with a chosen orthogonalizer.

Parameter split (:func:`split_parameters`):

* **matrix** parameters — the 2-D ``weight`` of every ``nn.Linear`` except the first and the last
  one registered in the model (for zoo models: the patch/input embedding and the classifier head).
  In a ViT these are the attention ``q_proj, k_proj, v_proj, out_proj`` and MLP ``fc1, fc2``
  weights.
* **other** parameters — everything else: embeddings, head, biases, LayerNorm affine parameters,
  class token and position embeddings, convolution kernels.

Weight decay (decoupled, ``θ ← θ(1 − lr·wd)``) applies to the weights of ``nn.Linear`` and
``nn.Conv2d`` modules only, never to biases, LayerNorm parameters or token/position embeddings.

Optimizers (:class:`OptimizerConfig` ``name``):

* ``"adamw"`` — ``torch.optim.AdamW`` on all parameters (``lr``).
* ``"muon"`` — ``torch.optim.Muon`` (5-step Newton–Schulz in bfloat16) on matrix parameters
  (``muon_lr``), AdamW on the rest (``lr``).
* ``"muon-polar-express"`` — :class:`Muon` with :func:`~neuromanifold.zoo.polar.polar_express`
  (float32) on matrix parameters, AdamW on the rest.
* ``"muon-polar-svd"`` — :class:`Muon` with the exact polar factor
  :func:`~neuromanifold.zoo.polar.polar_svd`, AdamW on the rest.

``torch.optim.Muon`` takes only Newton–Schulz coefficients, not an arbitrary orthogonalizer, so
:class:`Muon` re-implements its update rule with the orthogonalizer as a parameter; with the
bfloat16 Newton–Schulz it reproduces ``torch.optim.Muon`` (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from neuromanifold.zoo.polar import ORTHOGONALIZERS

__all__ = [
    "OPTIMIZER_NAMES",
    "MultiOptimizer",
    "Muon",
    "OptimizerConfig",
    "OptimizerName",
    "build_optimizer",
    "split_parameters",
]

OptimizerName = Literal["adamw", "muon", "muon-polar-express", "muon-polar-svd"]
OPTIMIZER_NAMES: tuple[str, ...] = ("adamw", "muon", "muon-polar-express", "muon-polar-svd")
"""The optimizer names :func:`build_optimizer` accepts."""


@dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer choice and hyperparameters (see the module docstring for the split).

    ``lr`` is AdamW's learning rate (all parameters for ``"adamw"``, the non-matrix ones
    otherwise); ``muon_lr`` is Muon's base rate, scaled per matrix ``(A, B)`` by
    ``√max(1, A/B)``; ``weight_decay`` is shared (decoupled) by both. ``eps`` is AdamW's
    denominator constant: gradients much smaller than it get SGD-like (unnormalised) steps.
    """

    name: OptimizerName = "adamw"
    lr: float = 3e-3
    muon_lr: float = 0.02
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.99)
    eps: float = 1e-8
    momentum: float = 0.95
    nesterov: bool = True

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer name must be one of {OPTIMIZER_NAMES}, got {self.name!r}")
        for key in ("lr", "muon_lr", "weight_decay", "momentum", "eps"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
                raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (``OptimizerConfig(**d)`` rebuilds it)."""
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


def split_parameters(model: nn.Module) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    """``(matrix, other)`` name → parameter dicts (module docstring: the rule), in model order."""
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    hidden = {f"{n}.weight" if n else "weight" for n, _ in linears[1:-1]}
    matrix: dict[str, nn.Parameter] = {}
    other: dict[str, nn.Parameter] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (matrix if name in hidden and p.ndim == 2 else other)[name] = p
    return matrix, other


def _decayed_names(model: nn.Module) -> set[str]:
    out = set()
    for n, m in model.named_modules():
        if isinstance(m, nn.Linear | nn.Conv2d):
            out.add(f"{n}.weight" if n else "weight")
    return out


class Muon(torch.optim.Optimizer):
    """Muon on 2-D parameters with a pluggable orthogonalizer.

    Per parameter ``W`` (shape ``(A, B)``) with gradient ``g`` and buffer ``m`` (zero-initialised):
    ``m ← μ m + (1 − μ) g``; ``u = (1 − μ) g + μ m`` (Nesterov) or ``u = m``;
    ``O = orthogonalize(u)``; ``W ← W (1 − lr·wd) − lr·√max(1, A/B)·O``. This is the update of
    ``torch.optim.Muon`` with ``adjust_lr_fn="original"``.

    References: K. Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024).
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        *,
        lr: float = 0.02,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        nesterov: bool = True,
        orthogonalizer: str | Callable[[Tensor], Tensor] = "polar-express",
    ) -> None:
        if isinstance(orthogonalizer, str):
            if orthogonalizer not in ORTHOGONALIZERS:
                raise ValueError(
                    f"orthogonalizer must be one of {sorted(ORTHOGONALIZERS)} or a callable, "
                    f"got {orthogonalizer!r}"
                )
            orthogonalizer = ORTHOGONALIZERS[orthogonalizer]
        self.orthogonalizer = orthogonalizer
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "nesterov": nesterov,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon takes 2-D parameters only, got shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        """One Muon step on every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                ortho = self.orthogonalizer(update).to(p.dtype)
                scale = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
                p.mul_(1 - lr * wd)
                p.add_(ortho, alpha=-lr * scale)
        return loss


class MultiOptimizer:
    """Several optimizers stepped together (Muon for matrices + AdamW for the rest)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer], *, name: str) -> None:
        self.optimizers = optimizers
        self.name = name

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """All parameter groups of all members (each carries ``initial_lr``)."""
        return [g for opt in self.optimizers for g in opt.param_groups]

    def zero_grad(self) -> None:
        """Clear gradients of every member."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def step(self) -> None:
        """Step every member."""
        for opt in self.optimizers:
            opt.step()


def build_optimizer(model: nn.Module, config: OptimizerConfig) -> MultiOptimizer:
    """Build the optimizer ``config`` names for ``model`` (every group records ``initial_lr``)."""
    if not isinstance(config, OptimizerConfig):
        raise TypeError(f"config must be an OptimizerConfig, got {type(config).__name__}")
    decayed = _decayed_names(model)
    matrix, other = split_parameters(model)
    if config.name == "adamw":
        other = {**matrix, **other}
        matrix = {}

    def adamw_groups(params: dict[str, nn.Parameter]) -> list[dict[str, Any]]:
        dec = [p for n, p in params.items() if n in decayed]
        nodec = [p for n, p in params.items() if n not in decayed]
        return [
            g
            for g in (
                {"params": dec, "weight_decay": config.weight_decay},
                {"params": nodec, "weight_decay": 0.0},
            )
            if g["params"]
        ]

    opts: list[torch.optim.Optimizer] = []
    if other:
        opts.append(
            torch.optim.AdamW(adamw_groups(other), lr=config.lr, betas=config.betas, eps=config.eps)
        )
    if matrix:
        kw = {
            "lr": config.muon_lr,
            "weight_decay": config.weight_decay,
            "momentum": config.momentum,
            "nesterov": config.nesterov,
        }
        params = list(matrix.values())
        if config.name == "muon":
            opts.append(torch.optim.Muon(params, **kw))
        elif config.name == "muon-polar-express":
            opts.append(Muon(params, orthogonalizer="polar-express", **kw))
        else:
            opts.append(Muon(params, orthogonalizer="svd", **kw))
    for opt in opts:
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
    return MultiOptimizer(opts, name=config.name)
