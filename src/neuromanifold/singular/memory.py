"""A memory budget for the read: measured per-sample costs and the chunk sizes they allow.

The read's memory is dominated by three phases, run one after the other:

* the **factor pass** (`kfac_factors`): a forward with autograd plus one backward per output
  column, over ``batch_size`` samples per batch, accumulating the factor sums over the batches;
* the **detection**: the factors ``A``, ``G`` of every factored block stay alive, every factor
  is eigendecomposed (`neuromanifold.singular.factor_spectrum.factor_spectrum`) and its
  spectrum is cached, and each eigendecomposition briefly holds a few more ``d × d`` copies
  (the symmetrised factor, the eigenvectors, their canonical form);
* the **JVP pass** (`directional_fisher`, sweeps): one forward-mode JVP over a chunk of
  ``chunk_size`` samples, for ``L`` lanes at once (``L`` = t-values per ``vmap`` group in a sweep,
  or directions per ``vmap``), while the candidate directions found are held.

**Cost model.** `peak_allocated` runs a callable under a ``TorchDispatchMode`` that adds the
bytes of every non-view tensor an operator returns to a running total when it is created and
subtracts them when it is garbage collected; the maximum of that total is the callable's peak.
Measured at 2 and 4 samples (`PROBE_SIZES`) it gives a per-sample cost ``s`` (the slope) and a
fixed cost ``I`` (weight-sized temporaries such as transposed, tangent or gradient weights and the
factor accumulators; the intercept). The factor pass is measured over two batches of 2 and of 4
samples, so that ``I_fac`` includes the accumulation of one batch's sums into the last (a sum,
its increment and the new sum alive at once: ``3 d²`` per factor, where one batch holds one).
The detection's cost ``D`` does not depend on ``N``: with ``F`` the bytes of all factors (the
sizes of the factors of the measured factor pass) and ``E(d)`` the peak of one dense
`factor_spectrum` of a ``d × d`` factor (measured at ``d = SPECTRUM_PROBE_DIM`` and scaled by
``d²``, all its tensors being ``d × d``), ``D = 2F + E(d_max)``: the factors, their cached
spectra, and the eigendecomposition in flight of the largest one. With
``M = BUDGET_FRACTION · max_memory``, ``M_jvp = JVP_FRACTION · max_memory`` and ``H`` the bytes
the read holds (``held``: its float64 copy of the data, and through the sweeps, once the
detection has run, the candidate directions and curved-gauge generators it found,
`MemoryPlan.holding`) the plan assumes

    factor pass: H + I_fac + batch · s_fac         ≤ M
    detection:   H + D                             ≤ M
    JVP pass:    H + L · (I_jvp + chunk · s_jvp)   ≤ M_jvp

(``L ×`` the single-lane cost: under ``vmap`` every lane has its own tangent activations and, for
t-batches, its own primal point). The factor pass's line is only a first guess: at 2 and 4
samples its peak is set by costs that do not grow with the batch, and above them the G rows it
buffers per batch (``batch × classes × d_out``) grow faster than the line's slope (a 16→32→10
Tanh MLP, 10 classes: 1.9 kB per sample measured at 2 and 4, 7 kB at 21 to 148, so that the
planned batch peaked at 1.09 MB under a 1 MB budget). So the plan then measures a factor pass at
the batch the line gives (over two batches, as the probes) and, while its peak with ``H`` and
the parameter copies exceeds ``M``, lowers the batch to where the secant from the largest
smaller measured batch reaches ``M`` and measures again (`FACTOR_CHECK_ROUNDS` passes at most;
the peak, a maximum of costs linear in the batch, is convex, so the secant's batch fits when
the smaller batch does).

The JVP costs are the largest measured along three
pseudo-random directions: one touching every parameter tensor, one on the first and one on the
last weight matrix alone (directions on different parameters run different kernels; before
`neuromanifold.singular.passes.tangent_keys` gave downstream parameters zero tangents, a
direction on the first weight of a GELU MLP cost 1.4× per sample what one on every tensor
costs, and now costs the same). `plan_memory`
keeps ``L`` at the requested ``t_batch`` when all samples then fit one chunk, otherwise lowers
``L`` (fixed costs are per lane, so one lane with a large chunk moves the most samples per byte),
and raises ``ValueError`` naming the budget and the estimated cost when even one sample on one
lane does not fit, or when the detection does not fit.

**What is and is not counted.** ``max_memory`` bounds the memory one read allocates on top of
what its process holds when the read starts. Under ``torch.distributed`` it is a budget per
process (rank): each rank plans for its own shard and the ranks agree on the largest costs
(`plan_memory`). The caller's model and probe data are not counted;
the read's float64 copies of the parameters are (``3 ×`` the float64 parameter bytes are added
to the sweeps' fixed cost: the working copy, the read's parameter dict and the copy each
per-direction call makes; ``2 ×`` to the factor pass's and the detection's), and so is its float64
copy of the data when it makes one (``held``,
counted in every phase). Not foreseen by the plan: the candidate directions the detectors
propose, while the detection runs (their bytes are known only once it has run; then they must
fit beside the detection's estimate in its share, the sweeps are sized to what remains,
`MemoryPlan.holding`, and the read raises ``ValueError`` naming the smallest budget at which
both fit when either does not); the probe-rank pass (`neuromanifold.singular.probe_rank.g_rows`, one
forward and one backward of a random cotangent) is not measured, but runs in chunks of
``factor_batch`` samples, about what one factor batch costs; the plan's own measuring passes
(on 2 and 4 samples, the factor pass on up to 8, then its checks at the chosen factor batch on
up to twice that batch: the first check runs at the line's batch, which may exceed the factor
share by as much as the line underestimates), passes over fixed-size chunks made before the
plan (the graph trace, the precision search and the forward-mode check on a few samples, the
adapters' passes), and the projection of a candidate off the curved-gauge generators sharing its
tensors (`neuromanifold.singular.read_candidate`: those generators as one matrix and its singular
vectors, twice their bytes, beside what is held). The rescale certifications' forwards run in
passes of the factor batch and keep the model's outputs on the probe set only within what the
detection's estimate leaves of its share (`MemoryPlan.detection_room`); before that, on a
one-layer GPT-2 with 128-token sequences under a 60 MB budget, a 31-sample certification pass
and the trace's held activations set the tracked peak at 63.0 MB (35.5 MB after; s28 trial DIST
F3). Not
seen by the tracker: scratch memory that kernels allocate internally (BLAS, LAPACK eigensolver
and convolution workspaces), the allocator's caching and fragmentation, and Python objects:
``BUDGET_FRACTION`` and ``JVP_FRACTION`` leave room for them (their docstrings give the
measured ratios). The tracker itself adds no import: torch (2.13 here) wraps every
``TorchDispatchMode``'s ``__torch_dispatch__`` in a guard whose first call imports
``torch._dynamo`` (with ``torch._inductor``, sympy, …: 65–76 MB resident, kept), which
`_PeakLive` opts out of.
Not counted either, because they are paid once per process, by an unbudgeted read as well, and
do not scale with the budget: the first read's one-time costs (torch's code paged in, kernels
and their caches initialised: a 34 MB peak rise for a 64→32→4 MLP under a 60 MB budget, 118 MB
for a 64→512→512→10 MLP under 90 MB, where the same model read before in the process rises
35–64 MB), and torch's own import of ``torch._dynamo`` when a model's forward-mode pass reaches
one of torch's Python decompositions (e.g. the batched ``q @ kᵀ`` of attention under
``torch.func.jvp``, in the read's forward-mode check). In a fresh process a budget of a few
hundred MB or less can be exceeded by them; a small read earlier in the process pays them first.
``tests/singular/test_memory.py`` checks the bound against the peak resident set size of a fresh
process, which includes all of these, over one sweep and factor pass and over a whole `read`:
Linux's high-water mark ``VmHWM`` is reset to ``VmRSS`` once the model and data are loaded, and
the peak is ``VmHWM`` after it minus ``VmRSS`` before; one of the checks reads with no read
before it in the process (a small MLP), as the command line does.
"""

from __future__ import annotations

import math
import numbers
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from neuromanifold.singular.distributed import all_reduce_max

__all__ = [
    "MemoryPlan",
    "format_bytes",
    "parse_memory",
    "peak_allocated",
    "plan_memory",
    "spectrum_peak",
]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
BUDGET_FRACTION = 0.35
"""Share of ``max_memory`` the factor pass and the detection may fill; the rest is headroom for
what the tracker does not see (kernel and eigensolver workspaces, allocator fragmentation).
Measured: the process's peak RSS rise over the factor pass was 1.5× its tracked peak (16→512→4
GELU MLP, N = 8192; a 2-layer ViT, dim 32, N = 2048), over the detection 0.9–1.35× its estimate
(``D``; single factors of side 1024 and 1536)."""
JVP_FRACTION = 0.2
"""Share of ``max_memory`` the JVP passes (sweeps) and what is held through them may fill. Lower
than `BUDGET_FRACTION`: over a budgeted read's sweeps, which repeat passes of the same sizes,
glibc's heap kept up to 3.4× the tracked bytes resident (16→512→4 GELU MLP, N = 8192: RSS rise
67 MB for a 21 MB plan; a 2-layer ViT: 2.3×); with ``JVP_FRACTION`` it stays below the budget.
A lower share only makes the chunks smaller (more passes), it refuses no read. Tensors held
through the sweeps (the candidates and curved-gauge generators, a data copy) are not churned:
they count at their own size, and the passes get this share of what they leave
(`MemoryPlan.pass_room`; charged inside the share, 95 MB of a ViT's generators refused a budget
of twice the read's peak, s21 trial AT #2). The candidates and generators are made by the
detection, so beside its estimate they must also fit in `BUDGET_FRACTION` of the budget
(`MemoryPlan.holding`)."""
PROBE_SIZES = (2, 4)
"""Sample counts at which `plan_memory` measures the per-sample costs."""
FACTOR_CHECK_ROUNDS = 4
"""Most factor passes `plan_memory` measures at its chosen factor batch (and lower ones) to check
that the pass's tracked peak fits: the linear model from `PROBE_SIZES` underestimates the
per-sample cost where fixed costs set the small batches' peaks."""
SPECTRUM_PROBE_DIM = 64
"""Side of the factor whose dense `factor_spectrum` `plan_memory` measures; its peak, scaled by
``(d_max / SPECTRUM_PROBE_DIM)²``, estimates the eigendecomposition of the largest factor."""
_MEMORY_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_memory(value: int | float | str) -> int:
    """Bytes from an int, a float holding a whole number (``1.5e9``) or a string such as
    ``"2GB"``, ``"512MiB"``, ``"1.5e9"`` or ``"800M"``.

    Decimal units ``k/kB, M/MB, G/GB, T/TB`` are powers of 1000, binary units ``KiB, MiB, GiB,
    TiB`` powers of 1024 (case-insensitive); a bare number is bytes. The result must be ≥ 1.

    >>> parse_memory("2GB"), parse_memory("1.5 MiB"), parse_memory(4096), parse_memory(1.5e9)
    (2000000000, 1572864, 4096, 1500000000)
    """
    whole = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if isinstance(value, bool) or not (isinstance(value, int | str) or whole):
        what = f"float {value!r}, not a whole number of bytes" if isinstance(value, float) else ""
        raise TypeError(
            f"max_memory must be an int (bytes) or a string like '2GB' or '512MiB'; "
            f"got {what or type(value).__name__}"
        )
    if isinstance(value, float):
        n = int(value)
    elif isinstance(value, int):
        n = value
    else:
        negative = _MEMORY_RE.match(value.strip()[1:]) if value.strip().startswith("-") else None
        if negative and negative.group(2).lower() in _UNITS:  # a size, below zero
            raise ValueError(f"max_memory must be at least 1 byte; got {value!r}")
        m = _MEMORY_RE.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(
                f"max_memory {value!r} is not a memory size; expected a number with an optional "
                f"unit B, kB, MB, GB, TB, KiB, MiB, GiB or TiB, e.g. '2GB'"
            )
        size = float(m.group(1)) * _UNITS[unit]
        if not math.isfinite(size):  # e.g. "1e400", or 400 digits: beyond a float
            raise ValueError(
                f"max_memory {value!r} is too large to be a memory size (it overflows a float)"
            )
        n = int(size)
    if n < 1:
        raise ValueError(f"max_memory must be at least 1 byte; got {value!r}")
    return n


def format_bytes(n: float, *, up: bool = False) -> str:
    """``n`` bytes as a short decimal string (``"1.50 MB"``); with ``up``, rounded up to the
    last digit shown, so that a budget read off the string is never below ``n`` (a least budget
    of 2 643 500 B named "2.64 MB" was refused again at 2.64 MB; s22 trial LM #1).

    >>> format_bytes(2_643_500), format_bytes(2_643_500, up=True), format_bytes(2_640_000, up=True)
    ('2.64 MB', '2.65 MB', '2.64 MB')
    """
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= size:
            # in whole bytes and hundredths of the unit: exact, no float rounding on the way
            shown = -(-math.ceil(n) * 100 // size) / 100 if up else n / size
            return f"{shown:.2f} {unit}"
    return f"{math.ceil(n) if up else int(n)} B"


class _PeakLive(TorchDispatchMode):
    """Tracks the bytes of live non-view tensors returned by operators, and their peak.

    Opts out of torch's ``torch._disable_dynamo`` wrapping of ``__torch_dispatch__``
    (`_should_skip_dynamo`): that wrapper imports ``torch._dynamo`` on the mode's first operator,
    and with it ``torch._inductor``, sympy and mpmath (about 800 modules, 65–76 MB resident, kept
    for the life of the process; torch 2.13, CPU), which the read's own passes never import. The
    mode is never compiled, so the wrapping has nothing to disable here.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """``False``: keep ``__torch_dispatch__`` unwrapped, so it never imports ``torch._dynamo``
        (torch versions without the wrapping never call this)."""
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {_storage(t) for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, Tensor) and not t._is_view():
                key = _storage(t)
                if key is not None and key in inputs:
                    continue  # a view or an in-place result: no new memory
                nbytes = t.numel() * t.element_size()
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, nbytes)
        return out


def _storage(t: Tensor) -> int | None:
    """Data pointer of ``t``'s storage (``None`` for tensors without an accessible one)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None


def peak_allocated(fn: Callable[[], Any]) -> int:
    """Peak bytes of the tensors that operators create while ``fn()`` runs and that are alive.

    Every tensor an operator returns on new storage (views and in-place results are skipped) is
    counted from its creation until it is garbage collected;
    the maximum of that running sum is returned. Tensors that existed before the call are not
    counted; memory that kernels allocate internally (workspaces) is not seen.

    >>> import torch
    >>> peak_allocated(lambda: torch.ones(1000, dtype=torch.float64).sum())  # 8000 + 8 bytes
    8008
    """
    with _PeakLive() as tracker:
        fn()
    return tracker.peak


@dataclass(frozen=True)
class MemoryPlan:
    """Chunk sizes that keep the read under ``max_memory`` bytes (see the module docstring).

    Attributes:
        max_memory: the bytes the factor batches are sized to and the detection must fit in
            (``BUDGET_FRACTION`` of the budget).
        jvp_memory: ``JVP_FRACTION`` of the budget: the bytes the JVP chunks and lanes are
            sized to when nothing is held; beside held tensors, `pass_room`.
        budget: the budget itself (bytes).
        jvp_per_sample, jvp_fixed: ``s_jvp`` and ``I_jvp`` (bytes per sample per lane, per lane).
        factor_per_sample, factor_fixed: ``s_fac`` and ``I_fac`` (bytes).
        detection: ``D``, the detection's estimated peak (bytes).
        held: ``H``, bytes the read holds through its sweeps besides the JVP pass.
        chunk_size: samples per JVP pass (sweeps).
        t_batch: t-values per ``vmap`` group (lanes of a sweep).
        factor_batch: samples per factor pass.
        n_samples: N the plan was made for (under a process group: the largest shard's).
    """

    max_memory: int
    jvp_memory: int
    budget: int
    jvp_per_sample: int
    jvp_fixed: int
    factor_per_sample: int
    factor_fixed: int
    detection: int
    held: int
    chunk_size: int
    t_batch: int
    factor_batch: int
    n_samples: int

    def jvp_cost(self, chunk: int, lanes: int = 1) -> int:
        """Estimated peak bytes of a JVP pass: ``lanes · (I_jvp + chunk · s_jvp)``."""
        return lanes * (self.jvp_fixed + chunk * self.jvp_per_sample)

    def chunk_for(self, lanes: int) -> int:
        """Largest sample chunk (≤ N) for ``lanes`` JVP lanes within the budget (≥ 1)."""
        room = self.pass_room() // max(lanes, 1) - self.jvp_fixed
        return max(1, min(self.n_samples, room // max(self.jvp_per_sample, 1)))

    def lanes_for(self, chunk: int) -> int:
        """Largest number of lanes (directions per ``vmap``) for a chunk of ``chunk`` (≥ 1)."""
        return max(1, self.pass_room() // max(self.jvp_cost(chunk), 1))

    def pass_room(self, held: int | None = None) -> int:
        """Bytes the JVP passes may fill beside ``held`` (default: the plan's): `JVP_FRACTION`
        of what the held tensors leave of the budget. Held tensors stay put through the
        sweeps, so they count at their own size; the share covers the heap churn of the passes
        (`JVP_FRACTION`'s docstring), which repeat."""
        return int(JVP_FRACTION * (self.budget - (self.held if held is None else held)))

    def detection_room(self) -> int:
        """Bytes the detection's estimate and what is held leave of its share:
        ``max(0, M − H − D)``. The detectors' certification passes may keep the model's outputs
        on the probe set between them within it (`DetectionContext.cache_bytes`)."""
        return max(0, self.max_memory - self.held - self.detection)

    def holding(self, nbytes: int, what: str = "the read's candidate directions") -> MemoryPlan:
        """This plan with ``nbytes`` more held through the sweeps, its chunk and t-batch resized.

        Raises:
            ValueError: one sample on one lane no longer fits beside what is held, or what is
                held no longer fits beside the detection's estimate in its share; the message
                names the smallest budget at which both fit.
        """
        held = self.held + int(nbytes)
        chunk, lanes = _sweep_sizes(
            self.pass_room(held),
            self.jvp_fixed,
            self.jvp_per_sample,
            self.n_samples,
            self.t_batch,
        )
        # the candidates and generators are made by the detection, beside its factors: they
        # count in its share too (s21 audit AU #1: counted beside the sweeps only, a ViT's
        # 95 MB of generators let 130 MB pass, and the read rose by 218 MB)
        beside_detection = self.detection + held > self.max_memory
        if chunk == 0 or beside_detection:
            need = max(
                held + self.jvp_cost(1) / JVP_FRACTION, (self.detection + held) / BUDGET_FRACTION
            )
            raise ValueError(
                f"max_memory={self.budget} bytes ({format_bytes(self.budget)}) "
                f"is too small: {what} hold {format_bytes(nbytes)} ({format_bytes(held)} held "
                f"in all); beside them the detection ({format_bytes(self.detection)}) must fit "
                f"in {BUDGET_FRACTION:.0%} of the budget and one sample of the JVP pass "
                f"({format_bytes(self.jvp_cost(1))}) in {JVP_FRACTION:.0%} of what they leave "
                f"of it, and {'the first' if beside_detection else 'the second'} no longer "
                f"fits; raise --max-memory {_at_least(need)}"
            )
        return replace(self, held=held, chunk_size=chunk, t_batch=lanes)

    def require_lanes(self, lanes: int, what: str) -> None:
        """Refuse the budget when one sample on ``lanes`` JVP lanes does not fit `pass_room`
        (`chunk_for` would size such passes at one sample and still exceed it).

        The labelled-loss checks run ``LOSS_CHECK_LANES`` lanes (a JVP of a JVP) in chunks of
        `chunk_for`; without this check a budget that fits the sweeps but not those lanes made
        `chunk_for` fall back to one sample per pass (s33 trial DIST D2: 4756 forward passes and
        91 s where 214 passes took 4.8 s at twice the budget), over the budget all the same.

        Raises:
            ValueError: naming ``what`` and the least budget at which it fits.
        """
        if self.pass_room() >= lanes * self.jvp_cost(1):
            return
        need = self.held + lanes * self.jvp_cost(1) / JVP_FRACTION
        raise ValueError(
            f"max_memory={self.budget} bytes ({format_bytes(self.budget)}) is too small: "
            f"{what} run {lanes} JVP lanes, and one sample on them "
            f"({format_bytes(lanes * self.jvp_cost(1))}) must fit in {JVP_FRACTION:.0%} of what "
            f"the held tensors ({format_bytes(self.held)}) leave of the budget; raise "
            f"--max-memory {_at_least(need)}"
        )

    def to_dict(self) -> dict[str, int]:
        """JSON-safe dict."""
        return asdict(self)


def _sweep_sizes(room: int, i_jvp: int, s_jvp: int, n: int, t_batch: int) -> tuple[int, int]:
    """``(chunk, lanes)`` of the JVP pass within ``room`` bytes: ``t_batch`` lanes when all ``n``
    samples then fit one chunk, else fewer (down to one lane with the largest chunk ≤ n);
    ``(0, 0)`` when one sample on one lane does not fit."""
    if i_jvp + s_jvp > room:
        return 0, 0
    for lanes in range(max(t_batch, 1), 0, -1):
        if (room // lanes - i_jvp) // s_jvp >= n:
            return n, lanes
    return max(1, min(n, (room - i_jvp) // s_jvp)), 1


def _probe(x: Tensor, n: int) -> Tensor:
    return x[: min(n, x.shape[0])]


def _linear_cost(peak: Callable[[int], int], n: int) -> tuple[int, int]:
    """``(per-sample, fixed)`` from peaks at ``PROBE_SIZES`` samples (1 and N when N < 4).

    Sizes 2 and 4 rather than 1 and 2: some kernels take a different path for a batch of one.
    """
    lo, hi = PROBE_SIZES if n >= PROBE_SIZES[1] else (1, n)
    p_lo, p_hi = peak(lo), peak(hi)  # always two passes: under a process group they are collective
    if hi == lo:
        return max(p_lo, 1), 0
    per = max(_ceil_div(p_hi - p_lo, hi - lo), 1)
    return per, max(p_lo - lo * per, 0)


def _checked_factor_batch(
    batch: int,
    room: int,
    points: dict[int, int],
    peak: Callable[[int], int],
    device: torch.device,
    budget_total: int,
) -> int:
    """The factor batch, lowered until a factor pass at that batch measures within ``room`` bytes.

    ``batch``: the linear model's batch; ``points``: the peaks already measured (batch → bytes,
    agreed over the ranks), to which every check is added; ``peak(k)``: the tracked peak of a
    factor pass in batches of ``k``. At most `FACTOR_CHECK_ROUNDS` passes are measured. After a
    pass over ``room`` the next batch is where the secant from the largest smaller measured batch
    to this one reaches ``room`` (for a peak convex in the batch, a max of linear costs, the
    secant lies above it in between, so that batch fits), at least one less than this one. Each
    peak is all-reduced with ``MAX`` (`all_reduce_max`), so every rank measures the same batches
    and returns the same one.

    Raises:
        ValueError: a factor pass over one sample per batch measures over ``room``.
    """
    for _ in range(FACTOR_CHECK_ROUNDS):
        if batch not in points:
            points[batch] = all_reduce_max([peak(batch)], device=device)[0]
        measured = points[batch]
        if measured <= room:
            return batch
        if batch == 1:
            over = measured - room
            raise ValueError(
                f"max_memory={budget_total} bytes ({format_bytes(budget_total)}) is too small: "
                f"the factor pass with one sample per batch measures {format_bytes(measured)}, "
                f"more than the {format_bytes(room)} left of {BUDGET_FRACTION:.0%} of the "
                f"budget; raise --max-memory {_at_least(budget_total + over / BUDGET_FRACTION)}"
            )
        below = [k for k in points if k < batch]
        anchor = max(below, default=0)
        if below and measured > points[anchor]:
            slope = (measured - points[anchor]) / (batch - anchor)
            nxt = anchor + math.floor((room - points[anchor]) / slope)
        else:  # nothing measured below, or no growth: shrink in proportion to the peak
            nxt = batch * room // measured
        batch = max(1, min(batch - 1, nxt))
    return batch


def _at_least(total: float) -> str:
    """``"to at least 3.21 MB (this part alone)"``: the budget below which the refused part
    cannot fit; a larger one may still be refused by another part of the plan."""
    return f"to at least {format_bytes(total, up=True)} (this part alone)"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def spectrum_peak(d: int) -> int:
    """Estimated peak bytes of one dense `factor_spectrum` of a ``d × d`` float64 factor.

    Measured (`peak_allocated`) on a full-rank ``SPECTRUM_PROBE_DIM``-sided PSD matrix (the dense
    path: no rank bound) and scaled by ``(d / SPECTRUM_PROBE_DIM)²``, rounded up: the
    eigendecomposition's tensors are ``d × d`` (the symmetrised factor, the eigenvectors and their
    canonical copies) or smaller. Not counted: the eigensolver's internal workspace.
    """
    from neuromanifold.singular.factor_spectrum import factor_spectrum

    if d < 1:
        return 0
    p = min(d, SPECTRUM_PROBE_DIM)
    gen = torch.Generator().manual_seed(0)
    b = torch.randn(p, p, dtype=torch.float64, generator=gen)
    m = b @ b.T + torch.eye(p, dtype=torch.float64)
    peak = peak_allocated(lambda: factor_spectrum(m))
    return _ceil_div(peak * d * d, p * p)


def plan_memory(
    model: nn.Module,
    data: Tensor | tuple[Tensor, Tensor],
    family: Any,
    *,
    max_memory: int | str,
    t_batch: int = 8,
    factor_batch: int = 256,
    params: Mapping[str, Tensor] | None = None,
    max_factor_dim: int | None = None,
    held: int = 0,
) -> MemoryPlan:
    """Measure the per-sample costs of ``model`` on ``data`` and size the chunks to ``max_memory``.

    Measures, under `peak_allocated`, a JVP pass on 2 and on 4 samples for each of up to three
    probe directions (one on every floating tensor, one on the first and one on the last matrix
    parameter; the plan takes the costliest), a factor pass over two batches of 2 and of 4
    samples (over the first 1 and N samples in one batch when N < 4), and the detection's
    estimate ``D`` from the sizes of that pass's factors (module docstring); then it checks the
    factor batch the linear model allows by measuring factor passes at it, lowering it until the
    measured peak fits (`FACTOR_CHECK_ROUNDS`). Under a process
    group these passes are collective: call on every rank. The budget is then per process: each
    rank measures on its own shard, the costs, ``held`` and ``N`` are all-reduced with ``MAX``
    (`neuromanifold.singular.distributed.all_reduce_max`), and every rank returns the same plan
    (``n_samples``: the largest shard) or raises the same error.
    ``max_factor_dim``: the factor pass's size cap, as the read will run it (``None``: the
    default of `kfac_factors`). ``held``: bytes the caller holds for the read through its sweeps
    (e.g. its float64 copy of the data), counted against the JVP pass.

    Raises:
        ValueError: one sample on one lane, or the detection, does not fit (the message names
            the budget and the estimated costs), the factor pass at one sample per batch
            measures over the factor share, or ``data`` has no sample.
    """
    from neuromanifold.singular._validate import prepare
    from neuromanifold.singular.factors import check_positive_int, kfac_factors
    from neuromanifold.singular.family import check_family
    from neuromanifold.singular.fisher import fisher_prepared
    from neuromanifold.singular.sweep import _random_direction

    t_batch = check_positive_int("t_batch", t_batch)
    factor_batch = check_positive_int("factor_batch", factor_batch)
    if isinstance(held, bool) or not isinstance(held, numbers.Integral) or held < 0:
        raise ValueError(f"held must be a non-negative int (bytes); got {held!r}")
    budget_total = parse_memory(max_memory)
    budget = int(BUDGET_FRACTION * budget_total)
    jvp_budget = int(JVP_FRACTION * budget_total)
    family = check_family(family)
    x = data[0] if isinstance(data, tuple | list) else data
    if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[0] == 0:
        raise ValueError("data must hold at least one sample (N, ...) to plan memory")
    n = int(x.shape[0])
    prep1 = prepare(model, dict(params or {}), _probe(x, 1))
    floating = sorted(k for k, v in prep1.params.items() if v.is_floating_point())
    param_bytes = 8 * sum(v.numel() for v in prep1.params.values())
    # directions on every tensor and on single tensors run different kernels; the plan uses
    # the costliest of these probe directions
    matrices = [k for k in floating if prep1.params[k].ndim >= 2]
    probes = [floating] + [[k] for k in dict.fromkeys(matrices[:1] + matrices[-1:])]
    directions = [_random_direction(prep1.params, keys) for keys in probes if keys]
    factor_sides: list[int] = []

    def jvp_peak(k: int, u: dict) -> int:
        prep = prepare(model, dict(params or {}), _probe(x, k))
        return peak_allocated(lambda: fisher_prepared(model, prep, prep.params, [u], family))

    def factor_peak(k: int) -> int:
        # two batches of k (when N allows): the second adds its sums to the first's
        xk = _probe(x, 2 * k if n >= 2 * PROBE_SIZES[1] else k)
        cap = {} if max_factor_dim is None else {"max_factor_dim": max_factor_dim}

        def run() -> None:
            f = kfac_factors(model, xk, family, batch_size=k, **cap)
            factor_sides[:] = [s for b in f.blocks.values() for s in (b.A.shape[0], b.G.shape[0])]

        return peak_allocated(run)

    costs = [_linear_cost(lambda k, u=u: jvp_peak(k, u), n) for u in directions]
    s_jvp, i_jvp = max(c[0] for c in costs), max(c[1] for c in costs)
    s_fac, i_fac = _linear_cost(factor_peak, n)
    # held beside every sweep pass: the float64 working copy, the read's parameter dict and the
    # copy each per-direction call makes of it (`_validate.prepare_params` never hands the
    # caller's storage to the model); beside the factor pass: the working copy, one spare
    i_jvp += 3 * param_bytes
    i_fac += 2 * param_bytes
    factor_bytes = 8 * sum(d * d for d in factor_sides)
    d_max = max(factor_sides, default=0)
    detection = 2 * factor_bytes + spectrum_peak(d_max) + 2 * param_bytes
    # under a process group each rank measured its own shard: every rank takes the largest
    # costs (and N), so all reach the same decision and the same plan
    agreed = all_reduce_max(
        [s_jvp, i_jvp, s_fac, i_fac, factor_bytes, d_max, detection, held, n], device=x.device
    )
    s_jvp, i_jvp, s_fac, i_fac, factor_bytes, d_max, detection, held, n = agreed
    # the check's first anchor: the agreed line at the larger probe (ranks with N < 4 probed
    # other sizes, so their measured peaks are not reduced side by side)
    hi = PROBE_SIZES[1]
    factor_points = {hi: i_fac - 2 * param_bytes + hi * s_fac}
    for what, fixed, per, share in (
        ("JVP", i_jvp + held, s_jvp, JVP_FRACTION),
        ("factor", i_fac + held, s_fac, BUDGET_FRACTION),
    ):
        if fixed + per > int(share * budget_total):
            raise ValueError(
                f"max_memory={budget_total} bytes ({format_bytes(budget_total)}) is too small: "
                f"one sample of the {what} pass is estimated at {format_bytes(fixed + per)} "
                f"(per-sample cost {format_bytes(per)} plus fixed cost {format_bytes(fixed)}), "
                f"more than {share:.0%} of the budget; raise --max-memory "
                f"{_at_least((fixed + per) / share)}"
            )
    if detection + held > budget:
        raise ValueError(
            f"max_memory={budget_total} bytes ({format_bytes(budget_total)}) is too small: "
            f"the detection is estimated at {format_bytes(detection)}: the K-FAC factors, "
            f"{format_bytes(factor_bytes)}; their cached spectra, {format_bytes(factor_bytes)}; "
            f"{format_bytes(spectrum_peak(d_max))} for the eigendecomposition of the largest "
            f"factor, d = {d_max}; and {format_bytes(2 * param_bytes)} for two float64 copies "
            f"of the parameters{f'; together with {format_bytes(held)} held' if held else ''}, "
            f"more than {BUDGET_FRACTION:.0%} of the budget; raise --max-memory "
            f"{_at_least((detection + held) / BUDGET_FRACTION)}"
        )
    factor = max(1, min(factor_batch, n, (budget - held - i_fac) // s_fac))
    factor = _checked_factor_batch(
        factor, budget - held - 2 * param_bytes, factor_points, factor_peak, x.device, budget_total
    )
    chunk, lanes = _sweep_sizes(int(JVP_FRACTION * (budget_total - held)), i_jvp, s_jvp, n, t_batch)
    return MemoryPlan(
        max_memory=budget,
        jvp_memory=jvp_budget,
        budget=budget_total,
        jvp_per_sample=int(s_jvp),
        jvp_fixed=int(i_jvp),
        factor_per_sample=int(s_fac),
        factor_fixed=int(i_fac),
        detection=int(detection),
        held=int(held),
        chunk_size=int(chunk),
        t_batch=int(lanes),
        factor_batch=int(factor),
        n_samples=n,
    )
