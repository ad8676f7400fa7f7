"""The :class:`Cell` container and the small helpers every cell constructor shares.

A cell is a constructed network whose answer is known in closed form: a frozen base point θ₀,
a unit direction u (the one a detector would name, built from the known structure), probe
inputs, an output family, and the order k or the class the read must return.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, ParamSpec

import torch
from torch import Tensor, nn

__all__ = [
    "CLASS_CURVED_GAUGE",
    "CLASS_FLAT_GAUGE",
    "CLASS_GENUINE",
    "CLASS_LIVE",
    "EXPECTED_CLASSES",
    "UNIT_NORM_ATOL",
    "Basis",
    "Cell",
]

#: The string values of ``neuromanifold.singular.classify.DirectionClass`` a cell may expect.
CLASS_GENUINE = "genuine_singularity"
CLASS_FLAT_GAUGE = "flat_gauge"
CLASS_CURVED_GAUGE = "curved_gauge"
CLASS_LIVE = "live"
EXPECTED_CLASSES = (CLASS_GENUINE, CLASS_FLAT_GAUGE, CLASS_CURVED_GAUGE, CLASS_LIVE)

#: How far ‖u‖ may be from 1 for a cell's direction and gauge generators.
UNIT_NORM_ATOL = 1e-12

#: How a cell's hidden coordinates are presented: as constructed (``"canonical"``), through a
#: random orthogonal change of basis (``"rotated"``), or through a random permutation
#: (``"permuted"``). Where the change of basis is a symmetry of the model the read must not see it.
Basis = Literal["canonical", "rotated", "permuted"]

Direction = dict[str, Tensor]
P = ParamSpec("P")


@dataclass(frozen=True, eq=False)
class Cell:
    """A constructed network with a known answer for the order read.

    Attributes:
        name: registry name (unique).
        description: the construction and why its answer is what it is.
        model: the ``nn.Module``; its float64 parameters equal ``params``.
        params: base point θ₀, ``dict[str, Tensor]`` keyed like ``model.named_parameters()``.
        direction: the unit probe u (keys ⊆ ``params``; missing keys mean zero), ``‖u‖ = 1``.
        data: float64 probe inputs, shape ``(N, ...)`` with N samples on dimension 0.
        family: the output family (``Gaussian`` or ``Categorical`` from ``singular.family``).
        expected_k: KL order the read must return; ``None`` for gauges.
        expected_class: value of ``DirectionClass`` the read must return.
        gauge_generators: unit tangent vectors of known curved gauge orbits through θ₀.
        snap: whether the read should snap θ₀ onto the locus (remove the component along u).
        reference: the spec section the cell implements.
        components: further named directions (e.g. per-layer joint modes of a chain).
        meta: scalar facts of the construction (depth, offset, …), JSON-serialisable.
    """

    name: str
    description: str
    model: nn.Module
    params: dict[str, Tensor]
    direction: Direction
    data: Tensor
    family: Any
    expected_k: int | None
    expected_class: str
    gauge_generators: tuple[Direction, ...] = ()
    snap: bool = False
    reference: str = ""
    components: Mapping[str, Direction] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.expected_class not in EXPECTED_CLASSES:
            raise ValueError(
                f"expected_class={self.expected_class!r} is not one of {EXPECTED_CLASSES}"
            )
        is_gauge = self.expected_class in (CLASS_FLAT_GAUGE, CLASS_CURVED_GAUGE)
        if is_gauge and self.expected_k is not None:
            raise ValueError(
                f"expected_k={self.expected_k!r} for gauge class {self.expected_class!r}; "
                "expected None (a gauge has no order)"
            )
        if not is_gauge and (not isinstance(self.expected_k, int) or self.expected_k < 1):
            raise ValueError(
                f"expected_k={self.expected_k!r} for class {self.expected_class!r}; "
                "expected an integer >= 1"
            )
        if not isinstance(self.data, Tensor) or self.data.dtype != torch.float64:
            raise TypeError(f"data must be a float64 Tensor, got {_describe(self.data)}")
        for pname, p in self.params.items():
            if p.dtype != torch.float64:
                raise TypeError(f"params[{pname!r}] has dtype {p.dtype}; expected torch.float64")
        _check_direction("direction", self.direction, self.params)
        for i, gen in enumerate(self.gauge_generators):
            _check_direction(f"gauge_generators[{i}]", gen, self.params)
        for cname, comp in self.components.items():
            _check_direction(f"components[{cname!r}]", comp, self.params)

    @property
    def n_params(self) -> int:
        """Number of scalar parameters of the model."""
        return sum(p.numel() for p in self.params.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (no tensors): the cell's identity and its expected answer."""
        return {
            "name": self.name,
            "description": self.description,
            "expected_k": self.expected_k,
            "expected_class": self.expected_class,
            "snap": self.snap,
            "reference": self.reference,
            "n_params": self.n_params,
            "n_samples": int(self.data.shape[0]),
            "n_gauge_generators": len(self.gauge_generators),
            "components": sorted(self.components),
            "meta": dict(self.meta),
        }


def _describe(x: object) -> str:
    if isinstance(x, Tensor):
        return f"Tensor(dtype={x.dtype}, shape={tuple(x.shape)})"
    return type(x).__name__


def _check_direction(label: str, u: Mapping[str, Tensor], params: Mapping[str, Tensor]) -> None:
    if not u:
        raise ValueError(f"{label} is empty; expected at least one parameter name")
    sq = 0.0
    for key, val in u.items():
        if key not in params:
            raise ValueError(
                f"{label} has key {key!r} that is not a parameter; expected one of {sorted(params)}"
            )
        if val.shape != params[key].shape:
            raise ValueError(
                f"{label}[{key!r}] has shape {tuple(val.shape)}; "
                f"expected the parameter's shape {tuple(params[key].shape)}"
            )
        if val.dtype != torch.float64:
            raise TypeError(f"{label}[{key!r}] has dtype {val.dtype}; expected torch.float64")
        sq += float((val * val).sum())
    if not math.isfinite(sq) or abs(math.sqrt(sq) - 1.0) > UNIT_NORM_ATOL:
        raise ValueError(f"{label} has norm {math.sqrt(sq)!r}; expected a unit vector (‖u‖ = 1)")


# --------------------------------------------------------------------------------------------
# Helpers shared by the constructors (private to the cells package).
# --------------------------------------------------------------------------------------------


def cell_constructor(fn: Callable[P, Cell]) -> Callable[P, Cell]:
    """Mark ``fn`` as a cell constructor: it draws only from its own seeded generators.

    Building ``nn.Module`` layers initialises their weights from torch's global generator; the
    wrapper restores the global CPU generator state afterwards, so constructing a cell has no
    effect on the caller's random stream (the values drawn there are overwritten by the cell's
    own parameters anyway).
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Cell:
        with torch.random.fork_rng(devices=[]):
            return fn(*args, **kwargs)

    return wrapper


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (every cell draws from its own).

    Any int: torch takes ``[−2⁶³, 2⁶⁴)``, and a seed outside it is reduced mod 2⁶⁴ (s32 trial
    CELLS #1: cells that draw a second generator from ``seed + 7919`` or ``seed + 104729`` failed
    for seeds near 2⁶⁴ that the others took). Seeds inside the range are passed as they are.

    >>> float(torch.rand(1, generator=generator(2**64 + 5))) == float(
    ...     torch.rand(1, generator=generator(5)))
    True
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**64:
        seed %= 2**64
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, gen: torch.Generator) -> Tensor:
    """Standard normal float64 tensor drawn from ``gen``."""
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def symmetric_normal(n: int, *shape: int, gen: torch.Generator) -> Tensor:
    """``n`` standard-normal samples of ``shape``, closed under x ↦ −x (n must be even).

    The first half is drawn, the second half is its negation, so every odd empirical moment of
    the data vanishes exactly; this removes the O(t) corrections of smooth activations
    (σ(z) = σ'(0) z + σ''(0) z²/2 + …) from node-death reads and realises the spec's
    "ReLU with symmetric x" condition.
    """
    if n < 2 or n % 2:
        raise ValueError(f"n={n!r} samples; expected an even number >= 2")
    half = randn(n // 2, *shape, gen=gen)
    return torch.cat([half, -half], dim=0)


def random_orthogonal(n: int, *, gen: torch.Generator) -> Tensor:
    """A Haar-random n×n orthogonal matrix (QR of a Gaussian matrix with sign fix)."""
    q, r = torch.linalg.qr(randn(n, n, gen=gen))
    return q * torch.sign(torch.diagonal(r)).unsqueeze(0)


def random_permutation(n: int, *, gen: torch.Generator) -> Tensor:
    """A random n×n permutation matrix (float64) that moves at least one index when n ≥ 2."""
    perm = torch.randperm(n, generator=gen)
    if n >= 2 and bool((perm == torch.arange(n)).all()):
        perm = torch.roll(perm, 1)
    return torch.eye(n, dtype=torch.float64)[perm]


def basis_change(n: int, basis: Basis, *, gen: torch.Generator) -> Tensor:
    """The n×n orthogonal matrix that presents hidden coordinates in ``basis``."""
    if basis == "canonical":
        return torch.eye(n, dtype=torch.float64)
    if basis == "rotated":
        return random_orthogonal(n, gen=gen)
    if basis == "permuted":
        return random_permutation(n, gen=gen)
    raise ValueError(f"basis={basis!r}; expected 'canonical', 'rotated' or 'permuted'")


def unit_vector(n: int, *, gen: torch.Generator) -> Tensor:
    """A uniformly random unit vector in R^n (float64)."""
    v = randn(n, gen=gen)
    return v / torch.linalg.vector_norm(v)


def top_eigenvector(moment: Tensor) -> Tensor:
    """Unit eigenvector of the largest eigenvalue of a symmetric matrix, sign-fixed.

    The sign makes the entry of largest magnitude positive, so the result is deterministic.
    """
    _, vecs = torch.linalg.eigh(0.5 * (moment + moment.T))
    v = vecs[:, -1]
    return v * torch.sign(v[v.abs().argmax()])


def second_moment(rows: Tensor) -> Tensor:
    """``(1/M) Σ_m r_m r_mᵀ`` of the rows of a ``(M, d)`` matrix (float64)."""
    return rows.T @ rows / rows.shape[0]


def normalise(u: Mapping[str, Tensor]) -> Direction:
    """``u / ‖u‖`` with the Euclidean norm over all entries of all tensors."""
    norm = math.sqrt(sum(float((v * v).sum()) for v in u.values()))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError(f"cannot normalise a direction of norm {norm!r}")
    return {k: v / norm for k, v in u.items()}


def load(model: nn.Module, params: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Cast ``model`` to float64, copy ``params`` into it and return detached float64 copies.

    Every parameter of the model must be given; the returned dict is what the cell stores.
    """
    model.double()
    named = dict(model.named_parameters())
    missing = sorted(set(named) - set(params))
    extra = sorted(set(params) - set(named))
    if missing or extra:
        raise ValueError(f"params do not match the model: missing {missing}, unknown {extra}")
    out: dict[str, Tensor] = {}
    with torch.no_grad():
        for key, p in named.items():
            val = params[key].to(torch.float64)
            if val.shape != p.shape:
                raise ValueError(
                    f"params[{key!r}] has shape {tuple(val.shape)}; expected {tuple(p.shape)}"
                )
            p.copy_(val)
            p.requires_grad_(False)
            out[key] = val.detach().clone()
    model.eval()
    return out


def zeros_like_params(model: nn.Module) -> dict[str, Tensor]:
    """A float64 zero tensor for every parameter of ``model``."""
    return {k: torch.zeros(p.shape, dtype=torch.float64) for k, p in model.named_parameters()}
