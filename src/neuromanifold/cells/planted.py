"""Networks with planted dead structure in random bases: test oracle of the whole-model read.

Every constructor is seeded and returns a `PlantedNet` (model in float64, probe inputs, output
family, the planted order or class, the layers the structure touches). Unlike the per-direction
cells, no direction is supplied: the detectors have to find it.

* `planted_mlp`: ``Linear → act → Linear`` with one dead hidden unit (incoming row, its bias and
  outgoing column exactly zero) at a random position; live weights and the input distribution in
  random bases. Node death order: 2 for ReLU/GELU/tanh, 3 for squared ReLU (spec §8, §9.1).
* `planted_deep_linear`: ``depth`` bias-free square Linear layers carrying a dead path
  ``v_1, …, v_{L−1}`` of random unit vectors (``v_ℓᵀW_ℓ = 0``, ``W_{ℓ+1}v_ℓ = 0``): order L.
* `planted_conv`: the Conv2d node death (a dead channel between two convolutions) and
  `planted_conv_chain`, a bias-free linear Conv2d chain with a dead channel path in random channel
  bases (order = depth).
* `planted_transformer`: a pre-norm transformer block (LayerNorm or RMSNorm, multi-head attention
  with separate q/k/v/out projections, GELU MLP) for the LayerNorm-kernel and QK-rotation gauges.
* `planted_embedding`: an embedding bag with rows never used by the probe set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from neuromanifold.cells.dense import SquaredReLU
from neuromanifold.singular.family import Categorical, Gaussian

__all__ = [
    "PlantedNet",
    "PlantedSelfAttention",
    "planted_conv",
    "planted_conv_chain",
    "planted_deep_linear",
    "planted_embedding",
    "planted_mlp",
    "planted_transformer",
]

Activation = Literal["relu", "gelu", "tanh", "relu2"]
NODE_DEATH_ORDER = {"relu": 2, "gelu": 2, "tanh": 2, "relu2": 3}


def _act(name: str) -> nn.Module:
    table = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "relu2": SquaredReLU}
    if name not in table:
        raise ValueError(f"activation must be one of {sorted(table)}; got {name!r}")
    return table[name]()


@dataclass(frozen=True)
class PlantedNet:
    """A planted-structure network: ``model`` (float64), ``data`` (probe inputs), ``family``.

    ``expected_k`` is the planted order (``None`` for gauge-only nets), ``layers`` the module names
    the planted structure touches, ``dead`` the planted hidden unit/channel index per layer.
    """

    name: str
    model: nn.Module
    data: Tensor
    family: object
    expected_k: int | None
    layers: tuple[str, ...]
    dead: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _orth(n: int, gen: torch.Generator) -> Tensor:
    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


def _inputs(n: int, d: int, gen: torch.Generator) -> Tensor:
    """Anisotropic Gaussian inputs in a random basis (scales 0.5…1.5)."""
    scales = torch.linspace(0.5, 1.5, d, dtype=torch.float64)
    return (torch.randn(n, d, generator=gen, dtype=torch.float64) * scales) @ _orth(d, gen).T


def planted_mlp(
    *,
    activation: Activation = "gelu",
    d_in: int = 5,
    hidden: int = 6,
    d_out: int = 4,
    n: int = 256,
    seed: int = 0,
    categorical: bool = False,
) -> PlantedNet:
    """``Linear(d_in, hidden) → act → Linear(hidden, d_out)`` with one dead hidden unit.

    The live incoming rows are ``Q_h M Q_in`` mixes (random orthogonal ``Q``s, Gaussian ``M``
    scaled by ``1/√fan_in``), so neither the live units nor the input axes are aligned with the
    dead unit's coordinates. The dead unit ``j`` (random) has ``W1[j] = 0``, ``b1[j] = 0``,
    ``W2[:, j] = 0``; the planted order is 2 (ReLU/GELU/tanh) or 3 (squared ReLU).
    """
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(d_in, hidden), _act(activation), nn.Linear(hidden, d_out))
    model = model.double()
    j = int(torch.randint(hidden, (1,), generator=gen))
    w1 = _orth(hidden, gen) @ torch.randn(hidden, d_in, generator=gen, dtype=torch.float64)
    w1 = w1 @ _orth(d_in, gen) / d_in**0.5
    w2 = torch.randn(d_out, hidden, generator=gen, dtype=torch.float64) @ _orth(hidden, gen)
    w2 = w2 / hidden**0.5
    b1 = 0.3 * torch.randn(hidden, generator=gen, dtype=torch.float64)
    w1[j] = 0.0
    b1[j] = 0.0
    w2[:, j] = 0.0
    with torch.no_grad():
        model[0].weight.copy_(w1)
        model[0].bias.copy_(b1)
        model[2].weight.copy_(w2)
        model[2].bias.copy_(0.1 * torch.randn(d_out, generator=gen, dtype=torch.float64))
    fam = Categorical() if categorical else Gaussian(sigma=1.0)
    return PlantedNet(
        name=f"planted-mlp-{activation}",
        model=model,
        data=_inputs(n, d_in, gen),
        family=fam,
        expected_k=NODE_DEATH_ORDER[activation],
        layers=("0", "2"),
        dead={"0": j, "2": j},
        note="node death, live units in random bases",
    )


def planted_deep_linear(
    *, depth: int = 3, width: int = 4, n: int = 256, seed: int = 0
) -> PlantedNet:
    """A bias-free ``depth``-layer linear chain of width ``width`` with a dead path of order L.

    Random unit vectors ``v_ℓ`` (ℓ = 1…L−1) in each hidden layer; ``W_ℓ ← P_ℓ W_ℓ P_{ℓ−1}`` with
    ``P_ℓ = I − v_ℓv_ℓᵀ`` (``P_0 = P_L = I``), so ``K ∝ t^{2L}`` along the joined direction and no
    weight entry is zero (the hidden bases are random).
    """
    if depth < 2:
        raise ValueError(f"depth must be at least 2; got {depth}")
    gen = torch.Generator().manual_seed(seed)
    layers = [nn.Linear(width, width, bias=False) for _ in range(depth)]
    model = nn.Sequential(*layers).double()
    eye = torch.eye(width, dtype=torch.float64)
    vs: list[Tensor | None] = [None] + [
        torch.nn.functional.normalize(torch.randn(width, generator=gen, dtype=torch.float64), dim=0)
        for _ in range(depth - 1)
    ]
    vs.append(None)
    proj = [eye if v is None else eye - torch.outer(v, v) for v in vs]
    with torch.no_grad():
        for ell, layer in enumerate(layers, start=1):
            w = torch.randn(width, width, generator=gen, dtype=torch.float64) / width**0.5
            layer.weight.copy_(proj[ell] @ (w + eye) @ proj[ell - 1])
    return PlantedNet(
        name=f"planted-deep-linear-L{depth}",
        model=model,
        data=_inputs(n, width, gen),
        family=Gaussian(sigma=1.0),
        expected_k=depth,
        layers=tuple(str(i) for i in range(depth)),
        note="dead path through every layer, random hidden bases",
    )


def planted_conv(
    *,
    activation: Activation = "relu",
    c_in: int = 2,
    hidden: int = 4,
    c_out: int = 2,
    size: int = 5,
    n: int = 64,
    seed: int = 0,
) -> PlantedNet:
    """``Conv2d(c_in, hidden, 3, pad 1) → act → Conv2d(hidden, c_out, 3, pad 1) → Flatten``.

    Channel ``j`` is dead: its filter and bias are zero and every weight reading it in the second
    convolution is zero. Gaussian output over all ``c_out·size²`` coordinates. Planted order as for
    the dense node death.
    """
    gen = torch.Generator().manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(c_in, hidden, 3, padding=1),
        _act(activation),
        nn.Conv2d(hidden, c_out, 3, padding=1),
        nn.Flatten(),
    ).double()
    j = int(torch.randint(hidden, (1,), generator=gen))
    with torch.no_grad():
        w1 = torch.randn(model[0].weight.shape, generator=gen, dtype=torch.float64) / 3.0
        w2 = torch.randn(model[2].weight.shape, generator=gen, dtype=torch.float64) / 4.0
        b1 = 0.3 * torch.randn(hidden, generator=gen, dtype=torch.float64)
        w1[j] = 0.0
        b1[j] = 0.0
        w2[:, j] = 0.0
        model[0].weight.copy_(w1)
        model[0].bias.copy_(b1)
        model[2].weight.copy_(w2)
        model[2].bias.copy_(0.1 * torch.randn(c_out, generator=gen, dtype=torch.float64))
    x = torch.randn(n, c_in, size, size, generator=gen, dtype=torch.float64)
    return PlantedNet(
        name=f"planted-conv-{activation}",
        model=model,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=NODE_DEATH_ORDER[activation],
        layers=("0", "2"),
        dead={"0": j, "2": j},
        note="dead channel between two convolutions",
    )


def planted_conv_chain(
    *, depth: int = 3, channels: int = 3, size: int = 4, n: int = 32, seed: int = 0
) -> PlantedNet:
    """A bias-free linear chain of ``depth`` 3×3 Conv2d layers with a dead channel path.

    Random channel unit vectors ``v_ℓ``; every spatial tap ``W_ℓ[:, :, a, b]`` is projected to
    ``P_ℓ W P_{ℓ−1}``, so the channel ``v_ℓ`` is never written by layer ℓ nor read by layer ℓ+1.
    Planted order: ``depth``.
    """
    gen = torch.Generator().manual_seed(seed)
    convs = [nn.Conv2d(channels, channels, 3, padding=1, bias=False) for _ in range(depth)]
    model = nn.Sequential(*convs, nn.Flatten()).double()
    eye = torch.eye(channels, dtype=torch.float64)
    vs: list[Tensor | None] = [None]
    for _ in range(depth - 1):
        v = torch.randn(channels, generator=gen, dtype=torch.float64)
        vs.append(v / v.norm())
    vs.append(None)
    proj = [eye if v is None else eye - torch.outer(v, v) for v in vs]
    with torch.no_grad():
        for ell, conv in enumerate(convs, start=1):
            w = torch.randn(conv.weight.shape, generator=gen, dtype=torch.float64) / 3.0
            w = torch.einsum("oa,aikl,ib->obkl", proj[ell], w, proj[ell - 1])
            conv.weight.copy_(w)
    x = torch.randn(n, channels, size, size, generator=gen, dtype=torch.float64)
    return PlantedNet(
        name=f"planted-conv-chain-L{depth}",
        model=model,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=depth,
        layers=tuple(str(i) for i in range(depth)),
        note="dead channel path, random channel bases",
    )


class PlantedSelfAttention(nn.Module):
    """Multi-head self-attention with separate ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``.

    ``softmax(Q_h K_hᵀ/√d_head) V_h`` per head ``h`` (rows ``h·d_head … (h+1)·d_head`` of the
    projections), heads concatenated and mixed by ``out_proj``. Input ``(N, T, d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h, dh = self.n_heads, d // self.n_heads

        def split(z: Tensor) -> Tensor:
            return z.reshape(b, t, h, dh).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / dh**0.5, dim=-1)
        return self.out_proj((att @ v).transpose(1, 2).reshape(b, t, d))


class _PreNormBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_out: int, norm: str) -> None:
        super().__init__()
        make = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}[norm]
        self.ln1 = make(d_model)
        self.attn = PlantedSelfAttention(d_model, n_heads)
        self.ln2 = make(d_model)
        self.fc1 = nn.Linear(d_model, 2 * d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * d_model, d_model)
        self.head = nn.Linear(d_model, d_out)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(self.act(self.fc1(self.ln2(x))))
        return self.head(x).mean(dim=1)


def planted_transformer(
    *,
    norm: Literal["layernorm", "rmsnorm"] = "layernorm",
    d_model: int = 8,
    n_heads: int = 2,
    seq: int = 4,
    d_out: int = 3,
    n: int = 64,
    seed: int = 0,
) -> PlantedNet:
    """A pre-norm transformer block (no dead units): gauges only.

    ``x + attn(norm1(x))``, then ``+ fc2(GELU(fc1(norm2(x))))``, a per-token Linear head averaged
    over positions, Gaussian output ``(N, d_out)``. Norm scales/shifts are drawn at random (so
    ``γ⁻¹`` is not parallel to ``𝟙``). Expected: an LN-kernel flat gauge on every LN → Linear pair
    (ln1 → q/k/v, ln2 → fc1), none with RMSNorm, a curved QK-rotation gauge per head.
    """
    if norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"norm must be 'layernorm' or 'rmsnorm'; got {norm!r}")
    gen = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = _PreNormBlock(d_model, n_heads, d_out, norm).double()
    torch.random.set_rng_state(torch_state)
    with torch.no_grad():
        for ln in (model.ln1, model.ln2):
            ln.weight.copy_(1.0 + 0.5 * torch.rand(d_model, generator=gen, dtype=torch.float64))
            if getattr(ln, "bias", None) is not None:
                ln.bias.copy_(0.2 * torch.randn(d_model, generator=gen, dtype=torch.float64))
    x = torch.randn(n, seq, d_model, generator=gen, dtype=torch.float64)
    return PlantedNet(
        name=f"planted-transformer-{norm}",
        model=model,
        data=x,
        family=Gaussian(sigma=1.0),
        expected_k=None,
        layers=("ln1", "ln2", "attn"),
        note="gauges only: LN kernel (LayerNorm) and QK rotations",
    )


class _EmbeddingBag(nn.Module):
    def __init__(self, vocab: int, dim: int, d_out: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, d_out)

    def forward(self, idx: Tensor) -> Tensor:
        return self.head(self.emb(idx).mean(dim=1))


def planted_embedding(
    *, vocab: int = 10, used: int = 6, dim: int = 4, seq: int = 3, n: int = 32, seed: int = 0
) -> PlantedNet:
    """``Embedding(vocab, dim)`` averaged over positions, then a Linear head (Categorical output).

    The probe indices use only tokens ``0 … used−1``: rows ``used … vocab−1`` are never seen, so
    any change to them is an exactly flat direction.
    """
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = _EmbeddingBag(vocab, dim, 3).double()
    torch.random.set_rng_state(torch_state)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(used, (n, seq), generator=gen)
    return PlantedNet(
        name="planted-embedding",
        model=model,
        data=idx,
        family=Categorical(),
        expected_k=None,
        layers=("emb",),
        note=f"rows {used}..{vocab - 1} unused",
    )
