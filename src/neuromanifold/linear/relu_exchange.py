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
attached to units, so these are not relabellings of θ unless ``δ_u = δ_π(u)``).

A unit can also face the other way: ``σ(−y) = σ(y) − y``, so turning ``w_j`` into ``−w_j`` changes
``f`` by the linear map ``−a_j w_jᵀ`` (a channel: ``−Σ_p a_{j,p} g_{j,p}ᵀ`` over its positions) and
keeps ``δ_j``. Turning every unit of a set ``S`` keeps ``f`` exactly when ``Σ_{j∈S} a_j w_jᵀ = 0``
(s32 trial NEWCODE #1: with ``A W = 0`` all three units of a width-3 MLP turn together, 12 points,
where the exchanges alone give 6). Such sets are not generic (they need ``m > d_in·d_out`` or a
coincidence); `flip_sets` finds them, and every exchange is also taken with each of them turned.

Where every unit has ``w_j ≠ 0`` and ``c_j ≠ 0`` (for a channel: every position's read-out ≠ 0), and
no two kink hyperplanes of the network are parallel (`~.relu_global.kink_lines`), these are the
whole global fiber: the jump of ``∇f`` across a hyperplane, ``c_j ŵ_jᵀ``, fixes its piece up to the
unit's orientation, each hyperplane needs a unit of its own, the width leaves one unit per
hyperplane, and the linear part of ``f`` fixes which sets may turn; ``m!·(1 + #flip sets)`` points
before duplicates, fewer where invariants repeat. Elsewhere they are points of the fiber, not
necessarily all of it.

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

__all__ = ["FLIP_RTOL", "MAX_EXCHANGES", "exchange_points", "exchanges_are_complete", "flip_sets"]

MAX_EXCHANGES = 720
"""Most points enumerated (``6!`` bijections, fewer where flip sets multiply them); beyond, none,
and the count is sampled."""
FLIP_RTOL = 1e-10
"""A set of units turns when ``‖Σ_{j∈S} a_j w_jᵀ‖ ≤ FLIP_RTOL · Σ_j ‖a_j w_jᵀ‖`` (the fiber search's
own relative tolerance, `~.relu_fiber.FIBER_RTOL`)."""


def _units(net: ReluNet, W: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Input weights (``m × d_w``) and read-outs (``m × d_a``), one row per unit."""
    return W, (A.T if isinstance(net, ReluMLP) else A)


def _scale(delta: float, cc: float) -> float:
    """The positive root ``t`` of ``t² + δ t − cc = 0`` (``cc > 0``), without cancellation."""
    root = math.sqrt(delta * delta + 4.0 * cc)
    return 2.0 * cc / (delta + root) if delta > 0 else (root - delta) / 2.0


def flip_sets(net: ReluNet, theta: object) -> list[tuple[int, ...]]:
    """Non-empty sets ``S`` of units (sorted index tuples) whose linear parts cancel,
    ``‖Σ_{j∈S} L_j‖ ≤ FLIP_RTOL · Σ_j ‖L_j‖`` with ``L_j = Σ_{h∈j} a_h g_hᵀ`` (``d_out × d``, over
    the unit's pre-activation rows: one for a neuron, one per position for a channel): turning
    them all keeps ``f`` (module docstring). All ``2^m − 1`` sets are tried; ValueError for a width
    whose ``m!`` exceeds ``MAX_EXCHANGES`` (7 and more).

    >>> net = ReluMLP(d_in=1, width=2)
    >>> flip_sets(net, (np.array([[1.0], [2.0]]), np.array([[2.0, -1.0]])))
    [(0, 1)]
    """
    W, A = validate_relu_params(net, theta)
    m = W.shape[0]
    if math.factorial(m) > MAX_EXCHANGES:
        raise ValueError(
            f"flip_sets tries all 2^m − 1 sets of units: width {m} is beyond the enumerated ones "
            f"(m! ≤ MAX_EXCHANGES = {MAX_EXCHANGES})"
        )
    G, a = _rows(net, W, A)
    per = G.shape[0] // m  # rows per unit (positions of a channel), unit-major
    lin = np.einsum("ho,hd->hod", a, G).reshape(m, per, -1).sum(axis=1)
    scale = float(np.sum(np.linalg.norm(lin, axis=1)))
    out = []
    for r in range(1, m + 1):
        for S in itertools.combinations(range(m), r):
            if np.linalg.norm(lin[list(S)].sum(axis=0)) <= FLIP_RTOL * scale:
                out.append(S)
    return out


def _n_points(m: int, n_flips: int) -> int:
    return math.factorial(m) * (1 + n_flips)


def exchanges_are_complete(net: ReluNet, theta: object) -> bool:
    """Whether `exchange_points` is the whole global fiber of ``θ`` (module docstring): every
    unit has ``w_j ≠ 0`` and a read-out the function sees (an MLP neuron's ``a_j ≠ 0``, every
    position's entry of a channel's), no two kink hyperplanes are parallel, and
    at most ``MAX_EXCHANGES`` points (``m!`` times one plus the number of `flip_sets`)."""
    W, A = validate_relu_params(net, theta)
    w, a = _units(net, W, A)
    if math.factorial(w.shape[0]) > MAX_EXCHANGES:
        return False
    if _n_points(w.shape[0], len(flip_sets(net, (W, A)))) > MAX_EXCHANGES:
        return False
    seen = np.any(a != 0, axis=1) if isinstance(net, ReluMLP) else np.all(a != 0, axis=1)
    if not (np.all(np.any(w != 0, axis=1)) and np.all(seen)):
        return False
    G = _rows(net, W, A)[0]
    return all(len(members) == 1 for members in kink_lines(G))


def exchange_points(net: ReluNet, theta: object) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every ``θ_π`` of the module docstring, identity first (``θ`` itself, rebuilt), each also with
    the units of every `flip_sets` set turned (``w_u → −w_u`` for the units given a kink of the
    set), in the shapes of ``θ``; ``[]`` where some unit has ``w_j = 0`` or ``c_j = 0`` (no kink or
    no piece to hand on) or the points would exceed ``MAX_EXCHANGES``.

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
    flips = flip_sets(net, (W, A))
    if _n_points(m, len(flips)) > MAX_EXCHANGES:
        return []
    w_hat = w / norms[:, None]
    delta = np.sum(a * a, axis=1) - norms**2
    out = []
    for perm in itertools.permutations(range(m)):
        t = np.array([_scale(float(delta[u]), float(cc[k])) for u, k in enumerate(perm)])
        wn = np.sqrt(t)[:, None] * w_hat[list(perm)]
        an = c[list(perm)] / np.sqrt(t)[:, None]
        an = an.T.copy() if isinstance(net, ReluMLP) else an
        out.append((wn, an))
        for S in flips:  # unit u carries kink perm[u]: it turns with its kink
            sign = np.where(np.isin(perm, S), -1.0, 1.0)[:, None]
            out.append((sign * wn, an))
    return out
