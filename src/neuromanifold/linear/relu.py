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
same function"; :func:`neuromanifold.linear.relu_fiber.relu_fiber` computes both notions:

* ``notion="dataset"`` — same outputs on ``X``, same invariants and the same activation pattern on
  ``X`` (inside one activation region the network is a linear network on the data);
* ``notion="global"`` — same function on all of input space, represented by its values on a rich
  seeded probe set (plus ``X``), and the same invariants.

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 v2 (shallow ReLU outlook);
G. Marcotte, R. Gribonval, G. Peyré, NeurIPS 2023 (conservation laws of ReLU networks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuromanifold.linear.architecture import real_array

__all__ = [
    "ReluCNN",
    "ReluMLP",
    "ReluNet",
    "activation_pattern",
    "check_int",
    "preactivations",
    "random_relu_params",
    "relu_forward",
    "relu_invariants",
    "relu_jacobian",
    "relu_ntk",
    "relu_ntk_reference",
    "validate_relu_inputs",
    "validate_relu_params",
]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is an integer ≥ ``minimum``."""
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
        check_int("d_in", self.d_in, 1)
        check_int("width", self.width, 1)
        check_int("d_out", self.d_out, 1)

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
        check_int("length", self.length, 1)
        check_int("filter_size", self.filter_size, 1)
        check_int("stride", self.stride, 1)
        check_int("channels", self.channels, 1)
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


def check_relu_net(net: object) -> None:
    """``TypeError`` unless ``net`` is a `ReluMLP` or `ReluCNN` (an `FC` or `LCN` has its own
    functions; s32 trial RELU #4: they failed on a missing ``shapes`` attribute)."""
    if not isinstance(net, (ReluMLP, ReluCNN)):
        raise TypeError(f"net = {net!r}: expected a ReluMLP or ReluCNN")


def validate_relu_params(net: ReluNet, theta: object) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(W, A)`` as float64 arrays, checking the network, shapes, realness and
    finiteness."""
    check_relu_net(net)
    if not isinstance(theta, (tuple, list)) or len(theta) != 2:
        raise ValueError(f"theta must be a pair (W, A) of arrays, got {type(theta).__name__}")
    out = []
    for name, arr, shape in zip(("W", "A"), theta, net.shapes, strict=True):
        a = real_array(arr, f"theta[{name}]")
        if a.shape != shape:
            raise ValueError(f"theta[{name}] must have shape {shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"theta[{name}] must be finite")
        out.append(a)
    return out[0], out[1]


def validate_relu_inputs(net: ReluNet, X: object) -> np.ndarray:
    """``X`` as a float64 array of shape ``(N, net.input_dim)``, ``N ≥ 1``, real and finite;
    ``ValueError`` otherwise (s32 trial RELU #5: NaN gave a NaN NTK, complex lost its imaginary
    part)."""
    check_relu_net(net)
    X = real_array(X, "X")
    if X.ndim != 2 or X.shape[1] != net.input_dim or X.shape[0] == 0:
        raise ValueError(f"X must have shape (N, {net.input_dim}) with N >= 1, got {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X must be finite (it holds NaN or inf)")
    return X


def _patches(net: ReluCNN, X: np.ndarray) -> np.ndarray:
    idx = np.arange(net.positions)[:, None] * net.stride + np.arange(net.filter_size)[None, :]
    return X[:, idx]  # (N, P, k)


def preactivations(net: ReluNet, theta: object, X: object) -> np.ndarray:
    """Pre-activations: MLP ``(N, width)``; CNN ``(N, channels, positions)``."""
    W, _ = validate_relu_params(net, theta)
    X = validate_relu_inputs(net, X)
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
    X = validate_relu_inputs(net, X)
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
    Xt = torch.as_tensor(validate_relu_inputs(net, X), dtype=torch.float64)

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
