"""Small zoo models configured by frozen dataclasses: a pre-LN ViT, an MLP and a small CNN.

All models take images ``x`` of shape ``(N, C, H, W)`` and return logits ``(N, num_classes)``.
They are built only from ``nn.Linear``, ``nn.LayerNorm``, ``nn.Conv2d`` and GELU, with explicit
attention arithmetic (no fused kernels), so the detectors of :mod:`neuromanifold.singular` see
every weight matrix and ``torch.func`` transforms (``jvp``, ``vmap``) run through them.

ViT block (pre-LN, residual): ``z ← z + Attn(LN₁(z))``, ``z ← z + W₂ GELU(W₁ LN₂(z) + b₁) + b₂``.
Attention has separate ``q_proj, k_proj, v_proj, out_proj`` ``nn.Linear`` maps and a
``num_heads`` attribute (the common naming, recognised by the attention detector). Head ``h`` owns
output rows ``r_h = h·d_h … (h+1)·d_h`` of q/k/v and attends with ``softmax(q_h k_hᵀ / √d_h)`` over
tokens, so a detector sees each head's QK structure; the rotation gauge
``(W_q[r_h], b_q[r_h], W_k[r_h], b_k[r_h]) ↦ R·(…)``, ``R ∈ O(d_h)``, leaves the function
unchanged.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

__all__ = [
    "CNN",
    "MLP",
    "ZOO_ARCHITECTURES",
    "CNNConfig",
    "MLPConfig",
    "ViT",
    "ViTConfig",
    "ZooConfig",
    "build_model",
    "config_from_dict",
]


@dataclass(frozen=True)
class ViTConfig:
    """A small pre-LN vision transformer.

    Images ``(N, in_channels, image_size, image_size)`` are cut into ``(image_size/patch_size)²``
    non-overlapping patches, each flattened (``in_channels·patch_size²`` values) and embedded by
    one ``nn.Linear`` to ``dim``; a learned class token and learned position embeddings are added.
    ``mlp_ratio·dim`` hidden GELU units per block; ``pool`` reads the class token or the token mean.
    """

    image_size: int = 8
    in_channels: int = 1
    patch_size: int = 2
    dim: int = 32
    depth: int = 2
    heads: int = 4
    mlp_ratio: int = 4
    num_classes: int = 10
    pool: Literal["cls", "mean"] = "cls"
    kind: Literal["vit"] = "vit"

    def __post_init__(self) -> None:
        _positive(self, "image_size", "in_channels", "patch_size", "dim", "depth", "heads")
        _positive(self, "mlp_ratio", "num_classes")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"patch_size={self.patch_size} must divide image_size={self.image_size}"
            )
        if self.dim % self.heads:
            raise ValueError(f"heads={self.heads} must divide dim={self.dim}")
        if self.pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {self.pool!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (round-trips through :func:`config_from_dict`)."""
        return asdict(self)


@dataclass(frozen=True)
class MLPConfig:
    """A GELU multilayer perceptron on flattened images (``in_features = C·H·W``)."""

    in_features: int = 64
    hidden: tuple[int, ...] = (128, 64)
    num_classes: int = 10
    kind: Literal["mlp"] = "mlp"

    def __post_init__(self) -> None:
        _positive(self, "in_features", "num_classes")
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if not self.hidden or any(h < 1 for h in self.hidden):
            raise ValueError(
                f"hidden must be a non-empty tuple of positive ints, got {self.hidden}"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (round-trips through :func:`config_from_dict`)."""
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d


@dataclass(frozen=True)
class CNNConfig:
    """A small CNN: ``Conv3×3 → GELU`` per entry of ``channels`` (stride 1, padding 1), global
    average pooling, then ``nn.Linear`` to ``num_classes``."""

    in_channels: int = 1
    channels: tuple[int, ...] = (16, 32)
    kernel_size: int = 3
    num_classes: int = 10
    kind: Literal["cnn"] = "cnn"

    def __post_init__(self) -> None:
        _positive(self, "in_channels", "kernel_size", "num_classes")
        object.__setattr__(self, "channels", tuple(int(c) for c in self.channels))
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError(
                f"channels must be a non-empty tuple of positive ints, got {self.channels}"
            )
        if self.kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd, got {self.kernel_size}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (round-trips through :func:`config_from_dict`)."""
        d = asdict(self)
        d["channels"] = list(self.channels)
        return d


ZooConfig = ViTConfig | MLPConfig | CNNConfig

_KINDS: dict[str, type] = {"vit": ViTConfig, "mlp": MLPConfig, "cnn": CNNConfig}


def _positive(cfg: object, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


ZOO_ARCHITECTURES: dict[str, ZooConfig] = {
    "vit-digits": ViTConfig(),
    "vit-digits-5way": ViTConfig(num_classes=5),
    "mlp-digits": MLPConfig(),
    "cnn-digits": CNNConfig(),
}
"""Named zoo architectures for 8×8 single-channel digits (10 classes, or 5 for the split tasks)."""


def config_from_dict(data: dict[str, Any]) -> ZooConfig:
    """Rebuild a zoo config from :meth:`to_dict` output; ``data['kind']`` picks the class.

    >>> cfg = ViTConfig(dim=16, heads=2)
    >>> config_from_dict(cfg.to_dict()) == cfg
    True
    """
    if not isinstance(data, dict):
        raise TypeError(f"config data must be a dict, got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"config 'kind' must be one of {sorted(_KINDS)}, got {kind!r}")
    cls = _KINDS[kind]
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"unknown fields {unknown} for {cls.__name__}; expected a subset of {sorted(known)}"
        )
    kwargs = dict(data)
    for key in ("hidden", "channels"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    return cls(**kwargs)


class Attention(nn.Module):
    """Multi-head self-attention with separate ``q_proj, k_proj, v_proj, out_proj`` linear maps.

    ``x (N, T, D) → out(concat_h softmax(q_h k_hᵀ/√d_h) v_h)``, ``d_h = D / heads``.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the token axis of ``x`` ``(N, T, D)``."""
        n, t, d = x.shape
        h = self.num_heads

        def split(z: Tensor) -> Tensor:
            return z.reshape(n, t, h, d // h).transpose(1, 2)  # (N, H, T, d_h)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        mixed = torch.softmax(scores, dim=-1) @ v  # (N, H, T, d_h)
        return self.out_proj(mixed.transpose(1, 2).reshape(n, t, d))


class FeedForward(nn.Module):
    """``fc2(GELU(fc1(x)))`` with ``hidden`` units."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the two-layer GELU map token-wise."""
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, hidden)

    def forward(self, x: Tensor) -> Tensor:
        """One residual block on ``(N, T, D)``."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    """Cut ``(N, C, H, W)`` into ``p×p`` patches, flatten each (C, p, p), embed with ``proj``."""

    def __init__(self, in_channels: int, patch_size: int, dim: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(in_channels * patch_size * patch_size, dim)

    def forward(self, x: Tensor) -> Tensor:
        """Return patch embeddings ``(N, (H/p)(W/p), dim)`` in row-major patch order."""
        n, c, hgt, wid = x.shape
        p = self.patch_size
        patches = x.reshape(n, c, hgt // p, p, wid // p, p).permute(0, 2, 4, 1, 3, 5)
        return self.proj(patches.reshape(n, (hgt // p) * (wid // p), c * p * p))


class ViT(nn.Module):
    """Pre-LN vision transformer from :class:`ViTConfig`; ``(N, C, H, W) → (N, num_classes)``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        tokens = (config.image_size // config.patch_size) ** 2
        self.patch_embed = PatchEmbed(config.in_channels, config.patch_size, config.dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, tokens + 1, config.dim))
        hidden = config.mlp_ratio * config.dim
        self.blocks = nn.ModuleList(
            Block(config.dim, config.heads, hidden) for _ in range(config.depth)
        )
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, num_classes)`` for images ``(N, C, H, W)``."""
        z = self.patch_embed(x)
        cls = self.cls_token.expand(z.shape[0], -1, -1)
        z = torch.cat([cls, z], dim=1) + self.pos_embed
        for block in self.blocks:
            z = block(z)
        z = self.norm(z)
        pooled = z[:, 0] if self.config.pool == "cls" else z[:, 1:].mean(dim=1)
        return self.head(pooled)


class MLP(nn.Module):
    """GELU MLP from :class:`MLPConfig`; flattens ``(N, ...)`` to ``(N, in_features)``."""

    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        self.config = config
        widths = [config.in_features, *config.hidden]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.act = nn.GELU()
        self.head = nn.Linear(widths[-1], config.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, num_classes)``."""
        z = x.reshape(x.shape[0], -1)
        for layer in self.layers:
            z = self.act(layer(z))
        return self.head(z)


class CNN(nn.Module):
    """Small CNN from :class:`CNNConfig`; ``(N, C, H, W) → (N, num_classes)``."""

    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        self.config = config
        widths = [config.in_channels, *config.channels]
        pad = config.kernel_size // 2
        self.convs = nn.ModuleList(
            nn.Conv2d(a, b, config.kernel_size, padding=pad) for a, b in itertools.pairwise(widths)
        )
        self.act = nn.GELU()
        self.head = nn.Linear(widths[-1], config.num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(N, num_classes)``."""
        z = x
        for conv in self.convs:
            z = self.act(conv(z))
        return self.head(z.mean(dim=(-2, -1)))


def build_model(config: ZooConfig, *, seed: int | None = None) -> nn.Module:
    """Instantiate the model a zoo config describes (float32; seeded init when ``seed`` is given).

    >>> m = build_model(ViTConfig(dim=16, heads=2, depth=1), seed=0)
    >>> tuple(m(torch.zeros(3, 1, 8, 8)).shape)
    (3, 10)
    """
    builders: dict[type, type[nn.Module]] = {ViTConfig: ViT, MLPConfig: MLP, CNNConfig: CNN}
    if type(config) not in builders:
        raise TypeError(
            f"config must be a ViTConfig, MLPConfig or CNNConfig, got {type(config).__name__}"
        )
    if seed is None:
        return builders[type(config)](config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builders[type(config)](config)
