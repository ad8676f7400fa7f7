"""Shallow ReLU networks: invariants, NTK on a dataset, and NTK determinacy on fibers.

Two architectures, both with no biases and ``σ(t) = max(t, 0)`` (derivative ``1[t > 0]``, the
torch convention, also at ``t = 0``):

* :class:`ReluMLP` — ``f(x) = Σ_j a_j σ(⟨w_j, x⟩)``; ``θ = (W, A)`` with ``W ∈ R^{width×d_in}``
  (row j is ``w_j``) and ``A ∈ R^{d_out×width}`` (column j is ``a_j``).
* :class:`ReluCNN` — one ReLU convolution with linear read-out,
  ``f(x) = Σ_{c,p} A[c,p] σ(Σ_i W[c,i] x[p·s + i])`` (valid cross-correlation, stride s);
  ``θ = (W, A)`` with ``W ∈ R^{channels×k}``, ``A ∈ R^{channels×positions}``; scalar output.

Positive homogeneity gives one conserved quantity per neuron / channel under gradient flow:
``‖a_j‖² − ‖w_j‖²`` (read-out minus input weights). The NTK on a dataset ``X`` (N points) is
``K = J Jᵀ`` with ``J = ∂ vec f(X) / ∂θ`` (rows ordered sample-major, then output; columns
``vec W`` then ``vec A``, row-major); it is a sum over samples' outer products, no averaging.

Determinacy (is K a function of the function and the invariants?) depends on what counts as "the
same function"; :func:`relu_fiber` computes both notions:

* ``notion="dataset"`` — same outputs on ``X``, same invariants and the same activation pattern on
  ``X`` (inside one activation region the network is a linear network on the data);
* ``notion="global"`` — same function on all of input space, represented by its values on a rich
  seeded probe set (plus ``X``), and the same invariants.

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 v2 (shallow ReLU outlook);
G. Marcotte, R. Gribonval, G. Peyré, NeurIPS 2023 (conservation laws of ReLU networks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment

from neuromanifold.linear import _lsq
from neuromanifold.linear.fiber_report import (
    FiberReport,
    RouteSummary,
    build_report,
    dedupe_points,
)

#: A fiber point is accepted when ``‖Φ(θ) − Φ(θ0)‖₂ ≤ FIBER_RTOL · max(1, ‖Φ(θ0)‖₂)``.
FIBER_RTOL = 1e-10
#: Singular values below this fraction of the largest count as zero in the fiber dimension.
RANK_RTOL = 1e-9

Notion = Literal["dataset", "global"]


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class ReluMLP:
    """Shallow ReLU MLP ``x ↦ Σ_j a_j σ(⟨w_j, x⟩)``: sizes only (no weights)."""

    d_in: int
    width: int
    d_out: int = 1

    def __post_init__(self) -> None:
        _check_int("d_in", self.d_in, 1)
        _check_int("width", self.width, 1)
        _check_int("d_out", self.d_out, 1)

    @property
    def shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Shapes of ``(W, A)``."""
        return (self.width, self.d_in), (self.d_out, self.width)

    @property
    def n_params(self) -> int:
        """``width · (d_in + d_out)``."""
        return self.width * (self.d_in + self.d_out)

    @property
    def n_units(self) -> int:
        """Number of hidden neurons (= number of invariants)."""
        return self.width

    @property
    def input_dim(self) -> int:
        """Length of one input vector."""
        return self.d_in

    @property
    def output_dim(self) -> int:
        """Length of one output vector."""
        return self.d_out

    def describe(self) -> str:
        """Short human-readable description."""
        return f"ReLU MLP d_in={self.d_in} width={self.width} d_out={self.d_out}"


@dataclass(frozen=True)
class ReluCNN:
    """One ReLU convolution (``channels`` filters, size ``filter_size``) + linear read-out."""

    length: int
    filter_size: int
    stride: int = 1
    channels: int = 1

    def __post_init__(self) -> None:
        _check_int("length", self.length, 1)
        _check_int("filter_size", self.filter_size, 1)
        _check_int("stride", self.stride, 1)
        _check_int("channels", self.channels, 1)
        if self.filter_size > self.length:
            raise ValueError(
                f"filter_size must be <= length, got filter_size={self.filter_size}, "
                f"length={self.length}"
            )

    @property
    def positions(self) -> int:
        """Number of output positions ``⌊(length − k)/s⌋ + 1``."""
        return (self.length - self.filter_size) // self.stride + 1

    @property
    def shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """Shapes of ``(W, A)``."""
        return (self.channels, self.filter_size), (self.channels, self.positions)

    @property
    def n_params(self) -> int:
        """``channels · (filter_size + positions)``."""
        return self.channels * (self.filter_size + self.positions)

    @property
    def n_units(self) -> int:
        """Number of channels (= number of invariants)."""
        return self.channels

    @property
    def input_dim(self) -> int:
        """Length of one input signal."""
        return self.length

    @property
    def output_dim(self) -> int:
        """Scalar output."""
        return 1

    def describe(self) -> str:
        """Short human-readable description."""
        return (
            f"ReLU CNN length={self.length} k={self.filter_size} s={self.stride} "
            f"channels={self.channels}"
        )


ReluNet = ReluMLP | ReluCNN


def validate_relu_params(net: ReluNet, theta: object) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(W, A)`` as float64 arrays, checking shapes and finiteness."""
    if not isinstance(theta, (tuple, list)) or len(theta) != 2:
        raise ValueError(f"theta must be a pair (W, A) of arrays, got {type(theta).__name__}")
    out = []
    for name, arr, shape in zip(("W", "A"), theta, net.shapes, strict=True):
        a = np.asarray(arr, dtype=np.float64)
        if a.shape != shape:
            raise ValueError(f"theta[{name}] must have shape {shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"theta[{name}] must be finite")
        out.append(a)
    return out[0], out[1]


def _check_X(net: ReluNet, X: object) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != net.input_dim:
        raise ValueError(f"X must have shape (N, {net.input_dim}), got {X.shape}")
    return X


def _patches(net: ReluCNN, X: np.ndarray) -> np.ndarray:
    idx = np.arange(net.positions)[:, None] * net.stride + np.arange(net.filter_size)[None, :]
    return X[:, idx]  # (N, P, k)


def preactivations(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Pre-activations: MLP ``(N, width)``; CNN ``(N, channels, positions)``."""
    W, _ = validate_relu_params(net, theta)
    X = _check_X(net, X)
    if isinstance(net, ReluMLP):
        return X @ W.T
    return np.einsum("npk,ck->ncp", _patches(net, X), W)


def activation_pattern(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Boolean activation pattern ``pre-activation > 0`` (shape as :func:`preactivations`)."""
    return preactivations(net, theta, X) > 0


def relu_forward(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Network outputs on ``X``, shape ``(N, output_dim)``.

    >>> net = ReluMLP(d_in=2, width=2)
    >>> theta = (np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([[2.0, 3.0]]))
    >>> relu_forward(net, theta, np.array([[1.0, -1.0]])).tolist()
    [[5.0]]
    """
    _, A = validate_relu_params(net, theta)
    Z = preactivations(net, theta, X)
    H = np.maximum(Z, 0.0)
    if isinstance(net, ReluMLP):
        return H @ A.T
    return np.einsum("ncp,cp->n", H, A)[:, None]


def relu_invariants(net: ReluNet, theta: object) -> np.ndarray:
    """Per-neuron (MLP) / per-channel (CNN) conserved quantities ``‖a_j‖² − ‖w_j‖²``.

    >>> net = ReluMLP(d_in=2, width=1)
    >>> relu_invariants(net, (np.array([[3.0, 4.0]]), np.array([[1.0]]))).tolist()
    [-24.0]
    """
    W, A = validate_relu_params(net, theta)
    if isinstance(net, ReluMLP):
        return np.sum(A**2, axis=0) - np.sum(W**2, axis=1)
    return np.sum(A**2, axis=1) - np.sum(W**2, axis=1)


def relu_jacobian(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Closed-form Jacobian ``∂ vec f(X) / ∂(vec W, vec A)``, shape ``(N·output_dim, n_params)``."""
    W, A = validate_relu_params(net, theta)
    X = _check_X(net, X)
    N = X.shape[0]
    if isinstance(net, ReluMLP):
        Z = X @ W.T  # (N, m)
        H, D = np.maximum(Z, 0.0), (Z > 0).astype(np.float64)
        # d f[n,o] / d W[j,i] = A[o,j] D[n,j] X[n,i]
        dW = np.einsum("oj,nj,ni->noji", A, D, X).reshape(N * net.d_out, -1)
        # d f[n,o] / d A[q,j] = [o = q] H[n,j]
        dA = np.einsum("oq,nj->noqj", np.eye(net.d_out), H).reshape(N * net.d_out, -1)
        return np.concatenate([dW, dA], axis=1)
    P = _patches(net, X)  # (N, P, k)
    Z = np.einsum("npk,ck->ncp", P, W)
    H, D = np.maximum(Z, 0.0), (Z > 0).astype(np.float64)
    dW = np.einsum("cp,ncp,npk->nck", A, D, P).reshape(N, -1)
    dA = H.reshape(N, -1)
    return np.concatenate([dW, dA], axis=1)


def relu_ntk(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """NTK ``K = J Jᵀ`` on ``X`` (sum over parameters, no averaging), shape ``(N·d_out,)*2``."""
    J = relu_jacobian(net, theta, X)
    return J @ J.T


def relu_ntk_reference(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Brute-force NTK via ``torch.func.jacrev`` of a literal torch forward (float64 oracle)."""
    import torch

    W, A = validate_relu_params(net, theta)
    Xt = torch.as_tensor(_check_X(net, X), dtype=torch.float64)

    def forward(Wt: torch.Tensor, At: torch.Tensor) -> torch.Tensor:
        if isinstance(net, ReluMLP):
            return (torch.relu(Xt @ Wt.T) @ At.T).reshape(-1)
        z = torch.nn.functional.conv1d(Xt[:, None, :], Wt[:, None, :], stride=net.stride)
        return torch.einsum("ncp,cp->n", torch.relu(z), At)

    Wt = torch.as_tensor(W, dtype=torch.float64)
    At = torch.as_tensor(A, dtype=torch.float64)
    jW, jA = torch.func.jacrev(forward, argnums=(0, 1))(Wt, At)
    J = torch.cat([jW.reshape(jW.shape[0], -1), jA.reshape(jA.shape[0], -1)], dim=1)
    return (J @ J.T).numpy()


def random_relu_params(net: ReluNet, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Standard Gaussian ``(W, A)``."""
    return rng.standard_normal(net.shapes[0]), rng.standard_normal(net.shapes[1])


def region_dataset(
    net: ReluNet,
    theta: object,
    n: int,
    rng: np.random.Generator,
    *,
    spread: float = 0.1,
    require_all_active: bool = False,
    max_tries: int = 2000,
) -> np.ndarray:
    """``n`` points ``x0 + spread·‖x0‖·ξ`` sharing the activation pattern of a random centre ``x0``.

    With ``require_all_active`` the centre is redrawn until every neuron / position is active.
    Raises RuntimeError when no such dataset is found within ``max_tries`` draws.
    """
    _check_int("n", n, 1)
    d = net.input_dim
    for _ in range(max_tries):
        x0 = rng.standard_normal((1, d))
        pat0 = activation_pattern(net, theta, x0)
        if require_all_active and not pat0.all():
            continue
        pts = [x0[0]]
        for _ in range(50 * n):
            if len(pts) == n:
                break
            x = x0 + spread * np.linalg.norm(x0) * rng.standard_normal((1, d))
            if np.array_equal(activation_pattern(net, theta, x), pat0):
                pts.append(x[0])
        if len(pts) == n:
            return np.array(pts)
    raise RuntimeError(f"no dataset within one activation region found in {max_tries} tries")


def _unit_blocks(net: ReluNet, flat: np.ndarray) -> np.ndarray:
    """Rows = units (neurons/channels), each row all the parameters of that unit."""
    W, A = _unflatten(net, flat)
    if isinstance(net, ReluMLP):
        return np.concatenate([W, A.T], axis=1)
    return np.concatenate([W, A], axis=1)


def _flatten(theta: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(theta[0]), np.ravel(theta[1])])


def _unflatten(net: ReluNet, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    (a, b), (c, d) = net.shapes
    return x[: a * b].reshape(a, b), x[a * b :].reshape(c, d)


def permutation_distance(net: ReluNet, x: np.ndarray, y: np.ndarray) -> float:
    """Distance between flat parameter vectors modulo permutations of the hidden units."""
    U, V = _unit_blocks(net, x), _unit_blocks(net, y)
    cost = np.sum((U[:, None, :] - V[None, :, :]) ** 2, axis=2)
    r, c = linear_sum_assignment(cost)
    return float(np.sqrt(cost[r, c].sum()))


def probe_set(net: ReluNet, n: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian probe inputs standing in for "all of input space" (``n × input_dim``)."""
    return rng.standard_normal((n, net.input_dim))


def relu_fiber(
    net: ReluNet,
    theta0: object,
    X: object,
    *,
    notion: Notion = "dataset",
    n_random: int = 12,
    n_perturb: int = 12,
    probe_size: int | None = None,
    seed: int = 0,
) -> FiberReport:
    """Search the fiber of ``θ0`` (same function in the given ``notion``, same invariants).

    Fiber equations ``Φ(θ) = (vec f_θ(Z), invariants(θ)) = Φ(θ0)`` with ``Z = X`` (dataset
    notion; points must also keep θ0's activation pattern on ``X``) or ``Z = X ∪ probe`` with a
    seeded Gaussian probe set of ``probe_size`` points (global notion; default
    ``max(60, 10·n_params)``). Levenberg–Marquardt from ``n_random`` Gaussian starts and
    ``n_perturb`` perturbations of θ0 (relative sizes 0.05–1; these sample a continuous fiber
    around θ0). Converged points are de-duplicated modulo unit permutations; the NTK of each
    on ``X`` (:func:`relu_ntk`) is reported. ``fiber_dimension = n_params − rank dΦ(θ0)``.
    """
    if notion not in ("dataset", "global"):
        raise ValueError(f"notion must be 'dataset' or 'global', got {notion!r}")
    W0, A0 = validate_relu_params(net, theta0)
    X = _check_X(net, X)
    rng = np.random.default_rng(seed)
    if notion == "global":
        size = probe_size if probe_size is not None else max(60, 10 * net.n_params)
        Z = np.concatenate([X, probe_set(net, size, rng)], axis=0)
    else:
        Z = X
    x0 = _flatten((W0, A0))
    target = np.concatenate(
        [relu_forward(net, (W0, A0), Z).ravel(), relu_invariants(net, (W0, A0))]
    )
    pattern0 = activation_pattern(net, (W0, A0), X)

    def fun(x: np.ndarray) -> np.ndarray:
        th = _unflatten(net, x)
        return np.concatenate([relu_forward(net, th, Z).ravel(), relu_invariants(net, th)]) - target

    def jac(x: np.ndarray) -> np.ndarray:
        th = _unflatten(net, x)
        W, A = th
        if isinstance(net, ReluMLP):
            dinv = np.concatenate(
                [-2 * _block_rows(W, axis_rows=True), 2 * _block_rows(A, axis_rows=False)], axis=1
            )
        else:
            dinv = np.concatenate(
                [-2 * _block_rows(W, axis_rows=True), 2 * _block_rows(A, axis_rows=True)], axis=1
            )
        return np.concatenate([relu_jacobian(net, th, Z), dinv], axis=0)

    scale = np.linalg.norm(x0) / np.sqrt(x0.size)
    starts = [scale * rng.standard_normal(x0.size) for _ in range(n_random)]
    rel = np.geomspace(0.05, 1.0, max(n_perturb, 1))
    starts += [x0 + r * scale * rng.standard_normal(x0.size) for r in rel[:n_perturb]]
    tol = FIBER_RTOL * max(1.0, float(np.linalg.norm(target)))
    good, best, n_starts = _lsq.multistart(fun, jac, [x0, *starts], tol=tol)
    if notion == "dataset":
        good = [
            g
            for g in good
            if np.array_equal(activation_pattern(net, _unflatten(net, g.x), X), pattern0)
        ]
    pts = [g.x for g in good]
    keep = dedupe_points(pts, lambda a, b: permutation_distance(net, a, b))
    points = [_unflatten(net, pts[i]) for i in keep]
    ntks = [relu_ntk(net, p, X) for p in points]
    fiber_dim = _lsq.null_dimension(jac(x0), rtol=RANK_RTOL)
    route = RouteSummary(
        name=f"numeric-{notion}",
        applicable=True,
        n_points=len(points),
        n_distinct_ntks=0,
        residual=max((good[i].residual for i in keep), default=best),
        n_starts=n_starts,
        n_converged=len(good),
        note="same activation pattern on X required"
        if notion == "dataset"
        else f"global function represented on {Z.shape[0]} probe points",
    )
    report = build_report(
        architecture=net.describe(),
        v=relu_forward(net, (W0, A0), X),
        delta=relu_invariants(net, (W0, A0)),
        points=points,
        ntks=ntks,
        residuals=[good[i].residual for i in keep],
        best_residual=best,
        tolerance=tol,
        routes=[route],
        routes_agree=None,
        fiber_dimension=fiber_dim,
        notes=(f"fiber notion: {notion}",),
    )
    return _with_route_count(report)


def _with_route_count(report: FiberReport) -> FiberReport:
    from dataclasses import replace

    routes = tuple(replace(r, n_distinct_ntks=report.n_distinct_ntks) for r in report.routes)
    return replace(report, routes=routes)


def _block_rows(M: np.ndarray, *, axis_rows: bool) -> np.ndarray:
    """``∂(Σ_u M[u,·]² or Σ_u M[·,u]²)/∂ vec M`` halved: one row per unit, entries of M."""
    if axis_rows:  # unit u owns row u of M
        n_units, n_cols = M.shape
        out = np.zeros((n_units, M.size))
        for u in range(n_units):
            out[u, u * n_cols : (u + 1) * n_cols] = M[u]
        return out
    _n_rows, n_units = M.shape  # unit u owns column u of M
    out = np.zeros((n_units, M.size))
    for u in range(n_units):
        out[u, u::n_units] = M[:, u]
    return out
