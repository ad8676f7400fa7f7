"""Global fiber points of a shallow ReLU network in closed form: invariants exchanged between units.

Unit ``j`` of a bias-free shallow ReLU network (an MLP neuron, or a `ReluCNN` channel) has input
weights ``w_j`` and read-out ``a_j`` (a column of an MLP's ``A``, a row of a CNN's), computes
``a_j σ(w_j · x)`` (per position for a channel) and carries the conserved ``δ_j = ‖a_j‖² −
‖w_j‖²``. By positive homogeneity ``a_j σ(w_j · x) = c_j σ(ŵ_j · x)`` with ``ŵ_j = w_j/‖w_j‖``
and ``c_j = ‖w_j‖ a_j``: the function sees each unit only through its kink ``ŵ_j`` and its piece
``c_j``. So for every bijection ``π`` of the units, giving unit ``u`` the kink and piece of unit
``π(u)`` at the scale ``t = ‖w_u‖²`` that keeps ``δ_u``,

    ‖c_π(u)‖²/t − t = δ_u   ⇔   t = (−δ_u + √(δ_u² + 4‖c_π(u)‖²)) / 2,
    w_u = √t · ŵ_π(u),   a_u = c_π(u) / √t,

is a point with the same global function and the same invariant vector (the invariants are
attached to units, so these are not relabellings of θ unless ``δ_u = δ_π(u)``). Where every unit
has ``w_j ≠ 0`` and ``c_j ≠ 0`` (for a channel: every position's read-out ≠ 0), and no two kink
hyperplanes of the network are parallel (`~.relu_global.kink_lines`), these are the whole global
fiber: each hyperplane's piece is fixed by the function, each needs a unit of its own, and the
width leaves one unit per hyperplane; ``m!`` points before duplicates, fewer where invariants
repeat. Elsewhere they are points of the fiber, not necessarily all of it.

The random search of `~.relu_fiber.relu_fiber` misses some of them (s32 trial RELU #1: in 7 of 20
samples of the survey's global MLP row, two of them reading one NTK on a fiber that carries 6 or
2), so it starts from these points as well; the search stays the oracle that each one solves the
fiber equations, and the own-kink check still applies.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from neuromanifold.linear.relu import ReluMLP, ReluNet, validate_relu_params
from neuromanifold.linear.relu_global import _rows, kink_lines

__all__ = ["MAX_EXCHANGES", "exchange_points", "exchanges_are_complete"]

MAX_EXCHANGES = 720
"""Most bijections enumerated (``6!``); wider networks get none, and their count is sampled."""


def _units(net: ReluNet, W: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Input weights (``m × d_w``) and read-outs (``m × d_a``), one row per unit."""
    return W, (A.T if isinstance(net, ReluMLP) else A)


def _scale(delta: float, cc: float) -> float:
    """The positive root ``t`` of ``t² + δ t − cc = 0`` (``cc > 0``), without cancellation."""
    root = math.sqrt(delta * delta + 4.0 * cc)
    return 2.0 * cc / (delta + root) if delta > 0 else (root - delta) / 2.0


def exchanges_are_complete(net: ReluNet, theta: object) -> bool:
    """Whether `exchange_points` is the whole global fiber of ``θ`` (module docstring): every
    unit has ``w_j ≠ 0`` and a read-out the function sees (an MLP neuron's ``a_j ≠ 0``, every
    position's entry of a channel's), no two kink hyperplanes are parallel, and
    ``m! ≤ MAX_EXCHANGES``."""
    W, A = validate_relu_params(net, theta)
    w, a = _units(net, W, A)
    if math.factorial(w.shape[0]) > MAX_EXCHANGES:
        return False
    seen = np.any(a != 0, axis=1) if isinstance(net, ReluMLP) else np.all(a != 0, axis=1)
    if not (np.all(np.any(w != 0, axis=1)) and np.all(seen)):
        return False
    G = _rows(net, W, A)[0]
    return all(len(members) == 1 for members in kink_lines(G))


def exchange_points(net: ReluNet, theta: object) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every ``θ_π`` of the module docstring, identity first (``θ`` itself, rebuilt), in the shapes
    of ``θ``; ``[]`` where some unit has ``w_j = 0`` or ``c_j = 0`` (no kink or no piece to hand
    on) or ``m! > MAX_EXCHANGES``.

    >>> from neuromanifold.linear.relu import relu_forward, relu_invariants
    >>> net = ReluMLP(d_in=2, width=2)
    >>> theta = (np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[3.0, 1.0]]))
    >>> pts = exchange_points(net, theta)
    >>> len(pts)
    2
    >>> x = np.array([[1.0, 2.0], [-1.0, 0.5], [2.0, -3.0]])
    >>> bool(np.allclose(relu_forward(net, pts[1], x), relu_forward(net, theta, x)))
    True
    >>> relu_invariants(net, pts[1]).tolist() == relu_invariants(net, theta).tolist()
    True
    """
    W, A = validate_relu_params(net, theta)
    w, a = _units(net, W, A)
    m = w.shape[0]
    norms = np.linalg.norm(w, axis=1)
    c = norms[:, None] * a
    cc = np.sum(c * c, axis=1)
    if math.factorial(m) > MAX_EXCHANGES or not (np.all(norms > 0) and np.all(cc > 0)):
        return []
    w_hat = w / norms[:, None]
    delta = np.sum(a * a, axis=1) - norms**2
    out = []
    for perm in itertools.permutations(range(m)):
        t = np.array([_scale(float(delta[u]), float(cc[k])) for u, k in enumerate(perm)])
        wn = np.sqrt(t)[:, None] * w_hat[list(perm)]
        an = c[list(perm)] / np.sqrt(t)[:, None]
        out.append((wn, an.T.copy() if isinstance(net, ReluMLP) else an))
    return out
