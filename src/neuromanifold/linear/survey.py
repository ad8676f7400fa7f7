"""NTK-determinacy survey: the paper's summary table, recomputed by sampling fibers.

For each row (an architecture class and a condition) the survey draws random architectures of
that class and random parameters ``θ``, takes ``v = μ(θ)`` (so ``v`` lies on the neuromanifold)
and the invariants of ``θ``, searches the fiber over them, and counts distinct NTKs. A sample is
*dependent* when the fiber carries more than one NTK (relative entrywise gap above
``NTK_DISTINCT_RTOL``). The row's computed verdict is ``"dependent"`` if any sample is, else
``"independent"``; it is printed next to the paper's claim and, where the two disagree, the
report carries a witness (the sample with the largest NTK spread). The paper's claim is never
used to fill in a verdict.

Rows: the five rows of the paper's table (FC balanced, FC generic Δ, 1-D all strides > 1, 1-D
some stride = 1, D ≥ 2), then the rows the specification adds: D = 2 with two equal filter shapes
and no stride between them, and the shallow ReLU CNN (one filter, stride > 1) and MLP, each under
two notions of fiber — same outputs on a dataset inside one activation region (every unit active
there), and same global function (represented on a seeded probe set and on points on both sides
of each kink, :func:`~neuromanifold.linear.relu_fiber.kink_probes`). Each row states its notion.

Sampling: every sample uses its own generator ``default_rng([seed, row, sample])``, ``row`` being
the row's index in :func:`default_rows` (also for a selection, ``row_indices`` of
:func:`run_survey`, and recorded as ``SurveyRow.row_index``), so the samples are reproducible,
rows are independent, and a selected row reproduces its line of the full survey. D ≥ 2 filters
are integers in ``[−20, 20]`` so that the rational factoring route applies; all other parameters
are standard Gaussian. The verdicts and the rows of finite fibers (the LCN rows) reproduce
exactly; where a fiber is a continuum (the FC rows, the ReLU dataset rows) its points are where
the Levenberg–Marquardt solves stop on it, which last-bit rounding differences (BLAS kernels, memory
alignment) can move, so ``max_spread`` and ``mean_points`` of those rows can differ between runs
and even between two calls in one process (s25 trial LIN #2: FC generic ``max_spread`` 0.961
and 0.980 in two runs).

References: E. M. Achour, K. Kohn, H. Rauhut, arXiv:2507.06367 (summary table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from neuromanifold.linear.architecture import FC, LCN, _is_int
from neuromanifold.linear.fiber import fiber_of_params, lcn_fiber
from neuromanifold.linear.fiber_report import LOWER_BOUND_NOTE, NTK_DISTINCT_RTOL, FiberReport
from neuromanifold.linear.invariants import delta as lcn_delta
from neuromanifold.linear.polynomial import fc_mu, mu
from neuromanifold.linear.relu import (
    ReluCNN,
    ReluMLP,
    random_relu_params,
)
from neuromanifold.linear.relu_fiber import EmptyRegionError, region_dataset, relu_fiber
from neuromanifold.linear.rescale import fc_balanced_params
from neuromanifold.linear.sheets import regrouping_pairs

__all__ = [
    "NOTION_DATASET",
    "NOTION_GLOBAL",
    "NOTION_PARAMS",
    "RowSpec",
    "SurveyResult",
    "SurveyRow",
    "default_rows",
    "run_row",
    "run_survey",
]

Verdict = Literal["independent", "dependent"]

#: Draws of a ReLU row's θ before the row gives up on finding one with an all-active region
#: (each Gaussian draw of the rows' sizes has one with probability at least 3/4).
MAX_REGION_DRAWS = 100


@dataclass(frozen=True)
class RowSpec:
    """One survey row: what is sampled and what the paper says about it."""

    architecture: str
    condition: str
    fiber_notion: str
    paper_claim: Verdict | None
    sample: Callable[[np.random.Generator], FiberReport]


@dataclass(frozen=True)
class SurveyRow:
    """Result of one row (see module docstring for the verdict rule).

    ``row_index`` is the index that seeded the row's samples (its index in :func:`default_rows`
    when the row is one of them).
    """

    architecture: str
    condition: str
    fiber_notion: str
    samples: int
    n_dependent: int
    fraction_dependent: float
    max_spread: float
    verdict: Verdict | None
    paper_claim: Verdict | None
    agrees: bool | None
    routes_agree_fraction: float | None
    n_failed: int
    mean_points: float
    witness: dict[str, Any] | None = None
    row_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (the keys of the survey's ``rows``)."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class SurveyResult:
    """All rows plus the run's settings."""

    rows: tuple[SurveyRow, ...]
    samples: int
    seed: int
    ntk_rtol: float = NTK_DISTINCT_RTOL
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """``{"rows": [...], "samples", "seed", "ntk_rtol", "notes"}``."""
        return {
            "rows": [r.to_dict() for r in self.rows],
            "samples": self.samples,
            "seed": self.seed,
            "ntk_rtol": self.ntk_rtol,
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------- samplers


def _fc_dims(rng: np.random.Generator) -> tuple[int, ...]:
    L = int(rng.integers(2, 4))
    return tuple(int(x) for x in rng.integers(2, 4, size=L + 1))


def _fc_balanced(rng: np.random.Generator) -> FiberReport:
    arch = FC(_fc_dims(rng))
    W = fc_mu(arch, [rng.standard_normal(s) for s in arch.param_shapes])  # a point of M
    theta = fc_balanced_params(arch, W, rng=rng)
    return fiber_of_params(arch, theta, seed=int(rng.integers(2**31)))


def _fc_generic(rng: np.random.Generator) -> FiberReport:
    arch = FC(_fc_dims(rng))
    theta = [rng.standard_normal(s) for s in arch.param_shapes]
    return fiber_of_params(arch, theta, seed=int(rng.integers(2**31)))


def _lcn_1d(rng: np.random.Generator, *, stride_one: bool) -> FiberReport:
    L = int(rng.integers(2, 4))
    ks = tuple(int(k) for k in rng.integers(2, 4, size=L))
    if stride_one:
        ss = [int(s) for s in rng.integers(1, 3, size=L - 1)]
        ss[int(rng.integers(L - 1))] = 1
    else:
        ss = [int(s) for s in rng.integers(2, 4, size=L - 1)]
    arch = LCN(ks, tuple(ss))
    theta = [rng.standard_normal(s) for s in arch.param_shapes]
    return _lcn_from_function(arch, theta, rng)


def _lcn_from_function(
    arch: LCN, theta: list[np.ndarray], rng: np.random.Generator, *, n_starts: int = 40
) -> FiberReport:
    """Fiber over (μ(θ), δ(θ)) searched from (v, δ) alone: θ is not handed to either route."""
    return lcn_fiber(
        arch, mu(arch, theta), lcn_delta(theta), n_starts=n_starts, seed=int(rng.integers(2**31))
    )


_SHAPES_2D = [(2, 2), (2, 3), (3, 2), (3, 3)]


def _int_filters(arch: LCN, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for s in arch.param_shapes:
        w = np.zeros(s)
        while not np.any(w):
            w = rng.integers(-20, 21, size=s).astype(np.float64)
        out.append(w)
    return out


def _lcn_2d(rng: np.random.Generator, *, equal_pair: bool) -> FiberReport:
    """A random D = 2 LCN: with ``equal_pair`` two neighbouring layers of one shape and stride
    ``(1, 1)`` between them (spec §4.4 swap caveat); without, drawn again until no two layers
    can regroup factors (:func:`~neuromanifold.linear.sheets.regrouping_pairs`: the generic
    case, the swap case being the next row)."""
    while True:
        L = int(rng.integers(2, 4))
        shapes = [_SHAPES_2D[int(i)] for i in rng.integers(len(_SHAPES_2D), size=L)]
        strides = [tuple(int(x) for x in rng.integers(1, 3, size=2)) for _ in range(L - 1)]
        if equal_pair:
            i = int(rng.integers(L - 1))
            shapes[i + 1] = shapes[i]
            strides[i] = (1, 1)
        arch = LCN(tuple(shapes), tuple(strides), dim=2)
        if equal_pair or not regrouping_pairs(arch):
            break
    theta = _int_filters(arch, rng)
    return _lcn_from_function(arch, theta, rng, n_starts=30)


def _relu(
    rng: np.random.Generator, *, cnn: bool, notion: Literal["dataset", "global"]
) -> FiberReport:
    if cnn:
        k = int(rng.integers(2, 4))
        s = int(rng.integers(2, 4))
        P = int(rng.integers(2, 4))
        net: ReluMLP | ReluCNN = ReluCNN(length=(P - 1) * s + k, filter_size=k, stride=s)
    else:
        net = ReluMLP(d_in=int(rng.integers(2, 4)), width=int(rng.integers(2, 4)))
    # the row's condition is "all units active on the data": θ is drawn until such inputs exist
    # (a Gaussian ReluMLP(2, 3) has none 1 time in 4; s34 trial RELU D1 crashed 19 of 20 seeds)
    for _ in range(MAX_REGION_DRAWS):
        theta = random_relu_params(net, rng)
        try:
            X = region_dataset(net, theta, 2 * net.input_dim, rng, require_all_active=True)
        except EmptyRegionError:
            continue
        return relu_fiber(net, theta, X, notion=notion, seed=int(rng.integers(2**31)))
    raise EmptyRegionError(
        f"{net.describe()}: no draw of theta in {MAX_REGION_DRAWS} had inputs activating every unit"
    )


#: The fiber notions a row states (its ``fiber_notion``).
NOTION_DATASET = "same outputs on a dataset inside one activation region (all units active there)"
NOTION_GLOBAL = (
    "same global function (values on a seeded Gaussian probe set and on both sides of each kink)"
)
NOTION_PARAMS = "same end-to-end map and invariants"


def default_rows() -> list[RowSpec]:
    """The survey's rows, in table order (paper's rows first)."""
    return [
        RowSpec("fully connected", "balanced (Δ = 0)", NOTION_PARAMS, "independent", _fc_balanced),
        RowSpec("fully connected", "generic Δ ≠ 0", NOTION_PARAMS, "dependent", _fc_generic),
        RowSpec(
            "1-D convolution",
            "all strides > 1",
            NOTION_PARAMS,
            "independent",
            lambda r: _lcn_1d(r, stride_one=False),
        ),
        RowSpec(
            "1-D convolution",
            "some stride = 1",
            NOTION_PARAMS,
            "dependent",
            lambda r: _lcn_1d(r, stride_one=True),
        ),
        RowSpec(
            "D-dim convolution (D = 2)",
            "any strides (shapes in {2,3}², strides in {1,2}², L ∈ {2,3}; no two layers of one "
            "shape and dilation: the next row)",
            NOTION_PARAMS,
            "independent",
            lambda r: _lcn_2d(r, equal_pair=False),
        ),
        RowSpec(
            "D-dim convolution (D = 2)",
            "two equal filter shapes, no stride between them",
            NOTION_PARAMS,
            "independent",
            lambda r: _lcn_2d(r, equal_pair=True),
        ),
        RowSpec(
            "shallow ReLU CNN",
            "one filter, stride > 1",
            NOTION_DATASET,
            "independent",
            lambda r: _relu(r, cnn=True, notion="dataset"),
        ),
        RowSpec(
            "shallow ReLU CNN",
            "one filter, stride > 1",
            NOTION_GLOBAL,
            "independent",
            lambda r: _relu(r, cnn=True, notion="global"),
        ),
        RowSpec(
            "shallow ReLU MLP",
            "generic weights",
            NOTION_DATASET,
            "dependent",
            lambda r: _relu(r, cnn=False, notion="dataset"),
        ),
        RowSpec(
            "shallow ReLU MLP",
            "generic weights",
            NOTION_GLOBAL,
            "dependent",
            lambda r: _relu(r, cnn=False, notion="global"),
        ),
    ]


# ---------------------------------------------------------------- running


def _witness(rep: FiberReport) -> dict[str, Any]:
    ntks = rep.ntk_arrays()
    labels = rep.ntk_labels
    first = {}
    for i, lab in enumerate(labels):
        first.setdefault(lab, i)
    pair = sorted(first.values())[:2]
    fiber = rep.to_dict()
    return {
        "architecture": fiber["architecture"],  # the spec, as in the fiber JSON (s15 audit V #3)
        "architecture_label": fiber["architecture_label"],
        "v": list(rep.v),
        "delta": list(rep.delta),
        "n_points": rep.n_points,
        "n_distinct_ntks": rep.n_distinct_ntks,
        "max_ntk_diff_abs": rep.max_ntk_diff_abs,
        "max_ntk_diff_rel": rep.max_ntk_diff_rel,
        "points": [list(map(_listify, rep.points[i])) for i in pair],
        "ntks": [ntks[i].tolist() for i in pair],
        "residual": rep.residual,
    }


def _listify(x: Any) -> Any:
    return x.tolist() if isinstance(x, np.ndarray) else x


def run_row(
    spec: RowSpec,
    *,
    samples: int,
    seed: int,
    row_index: int,
    progress: Callable[[int], None] | None = None,
) -> SurveyRow:
    """Sample ``samples`` fibers for one row and summarise them (module docstring)."""
    reps: list[FiberReport] = []
    for j in range(samples):
        rng = np.random.default_rng([seed, row_index, j])
        reps.append(spec.sample(rng))
        if progress is not None:
            progress(1)
    found = [r for r in reps if r.on_manifold]
    dep = [r for r in found if r.ntk_dependent]
    spreads = [r.max_ntk_diff_rel for r in found]
    verdict: Verdict | None = None
    if found:
        verdict = "dependent" if dep else "independent"
    agrees = None if (spec.paper_claim is None or verdict is None) else verdict == spec.paper_claim
    witness = None
    if agrees is False:
        if dep:
            witness = _witness(max(dep, key=lambda r: r.max_ntk_diff_rel))
        else:
            best = max(found, key=lambda r: r.n_points)
            sampled = sum(any(n.startswith(LOWER_BOUND_NOTE) for n in r.notes) for r in found)
            witness = {
                "note": "no sample had more than one NTK on its fiber"
                + (
                    f"; {sampled} of {len(found)} counts rest on random starts (lower bounds)"
                    if sampled
                    else ""
                ),
                "largest_fiber_points": best.n_points,
                "largest_spread": max(spreads),
                "lower_bound_samples": sampled,
            }
    two = [r for r in found if r.routes_agree is not None]
    return SurveyRow(
        architecture=spec.architecture,
        condition=spec.condition,
        fiber_notion=spec.fiber_notion,
        samples=samples,
        n_dependent=len(dep),
        fraction_dependent=(len(dep) / len(found)) if found else float("nan"),
        max_spread=max(spreads, default=0.0),
        verdict=verdict,
        paper_claim=spec.paper_claim,
        agrees=agrees,
        routes_agree_fraction=(sum(bool(r.routes_agree) for r in two) / len(two)) if two else None,
        n_failed=samples - len(found),
        mean_points=float(np.mean([r.n_points for r in found])) if found else 0.0,
        witness=witness,
        row_index=row_index,
    )


def _check_rows(rows: Any) -> None:
    """Raise ValueError unless ``rows`` is a list or tuple of :class:`RowSpec`; ints (indices of
    :func:`default_rows`, as ``lcn survey --rows`` takes) are pointed to ``row_indices``."""
    if not isinstance(rows, (list, tuple)):
        items = list(rows) if isinstance(rows, (range, np.ndarray)) else None
        if items and all(_is_int(r) for r in items):
            raise ValueError(
                f"rows = {rows!r}: rows takes RowSpec objects; for indices of default_rows() "
                f"use row_indices={[int(r) for r in items]!r}"
            )
        raise ValueError(f"rows = {rows!r}: expected a list of RowSpec objects")
    if not rows:
        raise ValueError(f"rows = {rows!r}: expected a non-empty list of RowSpec objects")
    bad = [r for r in rows if not isinstance(r, RowSpec)]
    if not bad:
        return
    if all(_is_int(r) for r in rows):
        raise ValueError(
            f"rows = {list(rows)!r}: rows takes RowSpec objects; for indices of default_rows() "
            f"use row_indices={list(rows)!r}"
        )
    raise ValueError(
        f"rows holds {type(bad[0]).__name__} {bad[0]!r}: expected RowSpec objects (indices of "
        "default_rows() go to row_indices)"
    )


def run_survey(
    *,
    samples: int = 20,
    seed: int = 0,
    rows: list[RowSpec] | None = None,
    row_indices: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> SurveyResult:
    """Run the rows; ``progress(1)`` after each sample.

    ``row_indices`` selects rows of :func:`default_rows` by index; each is seeded by that index,
    so it reproduces its line of the full survey (``lcn survey --rows``). ``rows`` runs the given
    specs instead, seeded by their position in the list. Neither: every default row.
    """
    if not (_is_int(samples) and samples >= 1):
        raise ValueError(f"samples must be a positive int, got {samples!r}")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    samples, seed = int(samples), int(seed)
    if rows is not None:
        _check_rows(rows)
    if row_indices is None:
        specs = default_rows() if rows is None else list(rows)
        indices = list(range(len(specs)))
    else:
        if rows is not None:
            raise ValueError("rows and row_indices: give at most one")
        specs = default_rows()
        indices = list(row_indices)
        n = len(specs)
        bad = [i for i in indices if not (_is_int(i) and 0 <= i < n)]
        if bad or not indices:
            raise ValueError(
                f"row_indices = {row_indices!r}: expected a non-empty list of ints in "
                f"0..{len(specs) - 1}"
            )
        indices = [int(i) for i in indices]
        specs = [specs[i] for i in indices]
    out = tuple(
        run_row(s, samples=samples, seed=seed, row_index=i, progress=progress)
        for i, s in zip(indices, specs, strict=True)
    )
    notes = (
        "verdict = 'dependent' iff some sampled fiber carries two NTKs differing by more than "
        f"{NTK_DISTINCT_RTOL:g} relative (entrywise max norm); max_spread is that relative gap",
        "paper_claim is the summary table of arXiv:2507.06367 as recorded in the specification; "
        "it is shown, never used to compute a verdict",
        "shallow ReLU rows: the per-unit invariants are attached to units, so giving one unit's "
        "invariant to another unit's kink (same function, same invariant vector) yields fiber "
        "points that are not relabellings; this is what makes the MLP's global fibers carry "
        "several NTKs (all m! exchanges, each also with its flip sets turned, are searched from, "
        "relu_exchange). It is a discrete "
        "choice: near each point the NTK is a function of (function, invariants), as spec §4.8 "
        "derives, so the global MLP row agrees with the paper's 'dependent' by another mechanism "
        "than the paper's hidden rotations, which only the dataset rows have (there the net is "
        "one linear FC net on the data); single-filter CNNs have one unit, several channels "
        "would exchange the same way",
    )
    return SurveyResult(rows=out, samples=samples, seed=seed, notes=notes)
