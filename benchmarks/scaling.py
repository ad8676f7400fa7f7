"""Scaling of the read: cost against parameter count and probe-set size, data parallelism, batching.

Printed in one run (all times in seconds, float64, CPU, ``--threads`` intra-op threads, default 1;
each cost of sections 1 and 2 is the best of up to ``COST_REPEATS`` calls, repeated while they
took under ``COST_BUDGET_S`` seconds in all, so the small models are not read off one call that
the machine's load disturbed):

1. **Parameters.** Zoo MLPs (``64 → w → w → 10``, w = 64 … 3072, up to 1.0·10⁷ parameters)
   and zoo ViTs (8×8 images, patch 2, depth 2, 4 heads, ``dim`` 16 to 640: 7.1·10³ to 9.9·10⁶
   parameters) up to ``--max-params``, on
   ``--n`` probe samples (default 64). Three costs per model: ``sweep`` = one `read_direction`
   along a pseudo-random unit direction touching every parameter (32 grid points + the floor
   pass: the per-direction cost of the read), ``factor`` = the K-FAC/KFC factor pass
   (`kfac_factors`, one backward per class), and ``read`` = the whole-model `read` with
   ``max_directions=2``, ``snap=False`` (factor pass, detection with its eigendecompositions,
   two sweeps; only up to ``--read-max-params``, default 1.1·10⁷, i.e. every size); ``detect`` =
   the same read with ``max_directions=0`` (factor pass and detection, no sweep) and ``#cand``
   the number of candidates the detectors propose. When a layer
   is wider than the probe set (N·positions rank-one terms, times the classes for ``G``) its
   factors are rank-deficient; detection then works from their range (`factor_spectrum`: a
   range finder and a canonical null basis, ``O(d²N)`` instead of the ``O(d³)`` of a dense
   ``eigh``), matches the G-kernel lifts in one batch against the smaller of kernel and
   complement, and builds the one-sided A modes from the complement, so no step of the read is
   cubic in the layer width at a fixed probe set. With N < width most of each factor is null
   space; a G-kernel lift links to its consumer only when its energy outside the consumer's
   A-kernel is far below what a random vector shows (`link_energy_max`), so units the probe set
   barely excites do not become duality chains, and the candidates and the two directions read
   are of the same kind at every width (11 candidates from w = 1024 on, kfac-A and kfac-G of
   the first layer; before that rule, spurious chains grew the count to 15 at w ≥ 2048). The
   log–log slope of cost against parameter count is fitted by least squares over all sizes and
   over the upper half (the asymptotic regime; small models are dominated by per-call overhead,
   which flattens the slope).
2. **Probe-set size.** The MLP with ``w = 256`` (about 10⁵ parameters), N from 64 to 1024; same
   costs and fits (the whole read up to ``--read-max-n``, default 1024: on 2026-11-30 the whole
   read took 0.21 s at N = 512 and 0.47 s at N = 1024, one thread). The read's workload changes
   with N: below the width the factors have null spaces and two kfac-A directions are read
   (7 candidates at N = 64, 4 at N = 256); from N = 512 on they have full rank and only the
   CE-shift gauge is proposed, so the read's slope in N mixes cost and workload.
3. **Peak memory.** The process's resident-set high-water mark (``ru_maxrss``) after each model,
   which is monotone: with sizes increasing it is the peak of the largest model so far.
4. **Data parallel.** The whole read of the ``w = 256`` MLP on 256 samples in ``--worlds``
   spawned gloo processes (default 1, 2 and 4; `launch_local`, one thread each, contiguous
   shards), against the same read in this process. The time is the slowest rank's read after a
   barrier (process start-up excluded). On a machine with fewer cores than processes the ranks
   share cores: such a row measures oversubscription, not scaling (the core count is printed;
   ``--worlds 1 2`` on a 2-core machine).
5. **Batching.** 16 directions on a small ViT (dim 32, depth 2, about 2.7·10⁴ parameters,
   N = 16, 64, 256): one ``vmap``-batched `directional_fisher` call against 16 calls of one
   direction, timed in ``BATCHING_ROUNDS`` interleaved rounds (the ratio of the best times and
   the median and range of the per-round ratios: this machine's load changes by tens of percent
   within a minute); and a 32-point sweep asking for 8 t-values per ``vmap`` group against one
   t at a time (on CPU the groups are capped by `neuromanifold.singular.passes.SWEEP_LANE_BYTES` per
   thread, so from N ≈ 64 on the ViT runs one t per pass and the ratio is ≈ 1).
   Batching removes per-call overhead and shares the primal pass; the tangent work (about two
   thirds of a JVP) is not shared, so the ratio falls as N grows. The ``floor`` line measures
   why: the primal pass P, one single-direction call J and the line ``B_L ≈ c + L·m`` fitted
   to batched calls of 2 … 16 directions (``J/m`` is the limit of the gain for many
   directions). Passes with many lanes are split by the library's lane policy
   (`neuromanifold.singular.passes.LANE_BYTES`). ``--threads 2`` on a 2-core machine lets the
   lanes' large elementwise kernels use both cores while per-call overhead stays serial, which
   raises the gain at small N. ``J`` and the loop are timed separately, so on a busy machine the
   measured ratio can exceed the printed limit ``J/m``. ``benchmarks/batching_routes.py`` times
   two reverse-mode routes to the same 16 numbers against the lanes.

``--quick`` shrinks every section (`sections`): widths up to 512, ViT dims up to 64, N up to 512,
the data-parallel read on 128 samples in 1 and 2 processes, batching at N = 16 and 64.

Run:  python benchmarks/scaling.py                       (≈ 16 minutes on a busy 2-core machine)
      python benchmarks/scaling.py --only samples parallel batching
      python benchmarks/scaling.py --quick               (smaller sizes, 1 and 2 processes)
      python benchmarks/scaling.py --only parallel --worlds 1 2
      python benchmarks/scaling.py --only params samples --plot scaling.png   (log–log figure)
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch

from neuromanifold.singular.direction import read_direction
from neuromanifold.singular.distributed import launch_local, read_sharded
from neuromanifold.singular.factors import kfac_factors
from neuromanifold.singular.family import Categorical
from neuromanifold.singular.fisher import directional_fisher
from neuromanifold.singular.read import read
from neuromanifold.singular.sweep import sweep
from neuromanifold.zoo.models import MLPConfig, ViTConfig, build_model


class Case:
    """Model, probe inputs and family (the shape `launch_local` factories return)."""

    def __init__(self, model: torch.nn.Module, data: torch.Tensor) -> None:
        self.model = model.double().eval()
        self.data = data
        self.family = Categorical()


def mlp_case(width: int = 256, n: int = 64, seed: int = 0) -> Case:
    """Zoo MLP ``64 → width → width → 10`` on ``n`` Gaussian 8×8 inputs."""
    model = build_model(MLPConfig(in_features=64, hidden=(width, width)), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return Case(model, torch.randn(n, 1, 8, 8, generator=gen, dtype=torch.float64))


def vit_case(dim: int = 32, n: int = 64, seed: int = 0) -> Case:
    """Zoo ViT (8×8 images, patch 2, depth 2, 4 heads) of width ``dim``."""
    model = build_model(ViTConfig(dim=dim, depth=2, heads=4), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return Case(model, torch.randn(n, 1, 8, 8, generator=gen, dtype=torch.float64))


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def random_direction(model: torch.nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: torch.randn(v.shape, generator=gen, dtype=torch.float64)
        for k, v in model.named_parameters()
    }


def timed(fn, repeats: int = 1, budget_s: float = math.inf) -> float:
    """Best wall time of up to ``repeats`` calls of ``fn``; after the first call, no further call
    starts once the calls so far took ``budget_s`` seconds in all (a slow call runs once)."""
    best, spent = math.inf, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        took = time.perf_counter() - t0
        best, spent = min(best, took), spent + took
        if spent >= budget_s:
            break
    return best


#: each cost of the parameter and sample series is the best of up to this many calls …
COST_REPEATS = 3
#: … repeated only while they took less than this many seconds in all, so that the small models
#: (the slope's lower end) are not read off one call disturbed by the machine's load
COST_BUDGET_S = 3.0


def costs(case: Case, with_read: bool = True) -> tuple[float, float, float, float]:
    """(sweep, factor-pass, detect, read seconds; the last two nan without the read)."""
    params = dict(case.model.named_parameters())
    u = random_direction(case.model)
    rep = {"repeats": COST_REPEATS, "budget_s": COST_BUDGET_S}
    t_sweep = timed(lambda: read_direction(case.model, params, u, case.data, case.family), **rep)
    t_fac = timed(lambda: kfac_factors(case.model, case.data, case.family), **rep)
    if not with_read:
        return t_sweep, t_fac, math.nan, math.nan
    kw = {"snap": False, "per_layer": False, "progress": False}
    t_detect = timed(
        lambda: read(case.model, case.data, case.family, max_directions=0, **kw), **rep
    )
    t_read = timed(lambda: read(case.model, case.data, case.family, max_directions=2, **kw), **rep)
    return t_sweep, t_fac, t_detect, t_read


def n_candidates(case: Case) -> int:
    """Candidates the detectors propose (the read's workload depends on them, not only on P)."""
    r = read(case.model, case.data, case.family, max_directions=0, progress=False)
    return int(r.meta["n_candidates"])


#: the fewest distinct sizes a log–log slope is fitted to (through one point any slope fits)
MIN_SIZES = 2


def _sizes(xs: list[float], ys: list[float]) -> list[tuple[float, float]]:
    """The points ``(x, y)`` with both finite and positive (a log–log fit's domain)."""
    return [(x, y) for x, y in zip(xs, ys, strict=True) if 0 < x < math.inf and 0 < y < math.inf]


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x`` over `_sizes`; ``nan`` when they hold
    fewer than `MIN_SIZES` distinct x (a line through one size is not a scaling law)."""
    pts = _sizes(xs, ys)
    if len({x for x, _ in pts}) < MIN_SIZES:
        return float("nan")
    px, py = zip(*pts, strict=True)
    return float(np.polyfit(np.log(px), np.log(py), 1)[0])


def _slope_text(xs: list[float], ys: list[float]) -> str:
    """`slope` as ``-0.040``, or why there is none (``no slope: 1 size, needs ≥ 2``)."""
    n = len({x for x, _ in _sizes(xs, ys)})
    if n < MIN_SIZES:
        return f"no slope: {n} size{'s' * (n != 1)}, needs ≥ {MIN_SIZES}"
    return f"{slope(xs, ys):.3f}"


def fit_line(label: str, xs: list[float], ys: list[float]) -> str:
    """The printed fit of one cost: slope over all sizes and over the upper half of them, each
    replaced by the reason when it has fewer than `MIN_SIZES` sizes (`_slope_text`)."""
    half = len(xs) // 2
    every, upper = _slope_text(xs, ys), _slope_text(xs[half:], ys[half:])
    return f"{label}: slope all = {every}, upper half = {upper}"


def series(name: str, cases: list[tuple[str, Case]], x_of, read_if) -> dict:
    print(f"\n== {name} ==")
    head = f"{'model':<16}{'params':>10}{'N':>6}{'sweep s':>10}{'factor s':>10}{'detect s':>10}"
    head += f"{'read s':>10}{'#cand':>6}"
    print(head + f"{'RSS MB':>9}")
    xs, sw, fa, de, rd = [], [], [], [], []
    for label, case in cases:
        read_direction(  # warm-up: kernels, first-call overhead
            case.model,
            dict(case.model.named_parameters()),
            random_direction(case.model),
            case.data[:2],
            case.family,
            grid=[0.1, 0.2],
        )
        p = n_params(case.model)
        with_read = read_if(p, case.data.shape[0])
        if with_read:
            read(case.model, case.data[:4], case.family, max_directions=1, progress=False)
        t_sweep, t_fac, t_det, t_read = costs(case, with_read=with_read)
        n = case.data.shape[0]
        xs.append(x_of(p, n))
        sw.append(t_sweep)
        fa.append(t_fac)
        de.append(t_det)
        rd.append(t_read)
        n_cand = "" if not with_read else str(n_candidates(case))
        row = f"{label:<16}{p:>10}{n:>6}{t_sweep:>10.3f}{t_fac:>10.3f}{t_det:>10.3f}{t_read:>10.3f}"
        row += f"{n_cand:>6}"
        print(row + f"{rss_mb():>9.0f}", flush=True)
    print(fit_line("  sweep  ", xs, sw))
    print(fit_line("  factors", xs, fa))
    keep = [i for i, t in enumerate(rd) if math.isfinite(t)]
    if keep:  # sizes without a read have no detect/read time (`_slope_text` says why if < 2)
        print(fit_line("  detect ", [xs[i] for i in keep], [de[i] for i in keep]))
        print(fit_line("  read   ", [xs[i] for i in keep], [rd[i] for i in keep]))
    return {"name": name, "x": xs, "sweep": sw, "factors": fa, "detect": de, "read": rd}


#: factor by which a one-size panel's x range extends on each side of its size (half a decade)
_ONE_SIZE_PAD = 10**0.5


def plot_series(results: list[dict], path: str) -> None:
    """One log–log panel per series: each cost against its x, with the fitted slope (all sizes)
    in the legend and a dotted slope-1 guide through the first read point.

    A cost measured at fewer than `MIN_SIZES` sizes is drawn as its point(s) with no slope in its
    legend entry, and a panel whose series has a single size says so in its title (``one size
    only: no slope``) and draws no guide (a line through one point is not drawn)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        for key, marker in (("sweep", "o"), ("factors", "s"), ("detect", "^"), ("read", "D")):
            pts = _sizes(res["x"], res[key])
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            fitted = slope(list(xs), list(ys))
            text = f"slope {fitted:.2f}" if math.isfinite(fitted) else _slope_text([*xs], [*ys])
            ax.loglog(xs, ys, marker=marker, label=f"{key} ({text})")
        if len(set(res["x"])) >= MIN_SIZES:
            x0 = res["x"][0]
            y0 = res["read"][0] if math.isfinite(res["read"][0]) else res["sweep"][0]
            ax.loglog(res["x"], [y0 * x / x0 for x in res["x"]], "k:", lw=1, label="slope 1")
            ax.set_title(res["name"])
        else:  # in the title: a note inside the panel sat on its points (one x: one column)
            ax.set_title(f"{res['name']}\none size only: no slope")
            if res["x"]:  # centred: matplotlib's range for one x drew it on the right spine
                ax.set_xlim(res["x"][0] / _ONE_SIZE_PAD, res["x"][0] * _ONE_SIZE_PAD)
        ax.set_xlabel("samples" if "samples" in res["name"] else "parameters")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def data_parallel(width: int, n: int, worlds: list[int]) -> None:
    print(f"\n== data-parallel read: MLP w={width}, N={n}, os.cpu_count()={os.cpu_count()} ==")
    case = mlp_case(width, n)
    kw = {"progress": False, "max_directions": 2, "snap": False, "per_layer": False}
    read_sharded(case.model, case.data[:4], case.family, **kw)  # warm-up
    t_single = timed(lambda: read_sharded(case.model, case.data, case.family, **kw))
    print(f"single process (no group): {t_single:.3f} s")
    for w in worlds:
        t0 = time.perf_counter()
        out = launch_local(
            w,
            "scaling:mlp_case",
            factory_kwargs={"width": width, "n": n},
            read_kwargs=kw,
        )
        wall = time.perf_counter() - t0
        slowest = max(o["seconds"] for o in out)
        ks = [(d["k"], d["class"]) for d in out[0]["reading"]["directions"]]
        print(
            f"{w} process(es): read {slowest:.3f} s (speed-up vs single "
            f"{t_single / slowest:.2f}×), wall incl. spawn {wall:.1f} s, directions {ks}",
            flush=True,
        )


def batching_floor(case: Case, params: dict, dirs: list[dict]) -> tuple[float, float, float, float]:
    """``(P, J, c, m)`` in seconds: the primal forward over the probe set (no autograd), one
    single-direction `directional_fisher` call, and the least-squares line ``B_L ≈ c + L·m``
    through the batched calls with L = 2, 4, 8, 16 directions. Batching L directions against
    ``L·J`` one at a time gains ``L·J / (c + L·m)``, which tends to ``J/m`` (from below when
    ``c > 0``); a forward-mode tangent costs about two primal passes (every linear map meets a
    tangent input and a tangent weight), so at large N ``m`` approaches about ``2P`` (m/P ≈ 2.1–2.4
    at N = 64 and 256 here); at small N the primal pass is mostly per-call overhead and m/P is
    lower (≈ 1.5–1.7 at N = 16)."""
    from torch.func import functional_call

    from neuromanifold.singular._validate import prepare
    from neuromanifold.singular.passes import differentiable_kernels

    prep = prepare(case.model, params, case.data)
    with differentiable_kernels(), torch.no_grad():
        p = timed(lambda: functional_call(case.model, (prep.params, prep.buffers), (prep.x,)), 5)
    j = timed(lambda: directional_fisher(case.model, params, dirs[0], case.data, case.family), 3)
    lanes = [2, 4, 8, 16]
    x, fam = case.data, case.family
    costs = [
        timed(lambda k=k: directional_fisher(case.model, params, dirs[:k], x, fam), 3)
        for k in lanes
    ]
    m, c = np.polyfit(lanes, costs, 1)
    return p, j, float(c), float(m)


BATCHING_ROUNDS = 7
"""Interleaved rounds of the batched call and the one-at-a-time loop per probe-set size."""


def paired_rounds(fa, fb, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of ``fa`` and of ``fb`` in each of ``rounds`` rounds; every round runs both once,
    the first of them alternating from round to round, so that a change of load on a shared
    machine hits both alike (their ratio within a round is then comparable)."""
    ta: list[float] = []
    tb: list[float] = []
    for r in range(rounds):
        order = [(fa, ta), (fb, tb)] if r % 2 == 0 else [(fb, tb), (fa, ta)]
        for fn, out in order:
            out.append(timed(fn))
    return ta, tb


def batching(sizes: list[int]) -> None:
    print("\n== batching on a small ViT (dim 32, depth 2) ==")
    for n in sizes:
        case = vit_case(32, n)
        params = dict(case.model.named_parameters())
        dirs = [random_direction(case.model, seed=s) for s in range(16)]
        directional_fisher(case.model, params, dirs[:2], case.data[:4], case.family)  # warm-up

        def batched(case=case, params=params, dirs=dirs):
            return directional_fisher(case.model, params, dirs, case.data, case.family)

        def loop(case=case, params=params, dirs=dirs):
            return torch.stack(
                [directional_fisher(case.model, params, d, case.data, case.family) for d in dirs]
            )

        tb, tl = paired_rounds(batched, loop, BATCHING_ROUNDS)
        per_round = sorted(b_l[1] / b_l[0] for b_l in zip(tb, tl, strict=True))
        vb, vl = batched(), loop()
        err = float(((vb - vl).abs() / vl.abs()).max())
        print(
            f"params {n_params(case.model)}, N {n}: 16 directions batched {min(tb):.3f} s, "
            f"one at a time {min(tl):.3f} s, ratio {min(tl) / min(tb):.2f}× (best vs best; "
            f"per round median {statistics.median(per_round):.2f}×, "
            f"range {per_round[0]:.2f}–{per_round[-1]:.2f}, {BATCHING_ROUNDS} rounds; "
            f"max rel. diff {err:.1e})"
        )
        p, j, c, m = batching_floor(case, params, dirs)
        print(
            f"  floor: primal pass P {p * 1e3:.1f} ms, one-direction call J {j * 1e3:.1f} ms; "
            f"batched B_L ≈ {c * 1e3:.1f} + L·{m * 1e3:.1f} ms (m/P {m / p:.2f}); "
            f"gain for many directions → J/m = {j / m:.2f}×"
        )
        grid = torch.logspace(-4, 0, 32, dtype=torch.float64).tolist()

        def sweep_with(t_batch: int, case=case, params=params, u=dirs[0], grid=grid):
            return sweep(case.model, params, u, case.data, case.family, grid=grid, t_batch=t_batch)

        t8, t1 = timed(lambda: sweep_with(8), 2), timed(lambda: sweep_with(1), 2)
        print(f"  32-point sweep: t_batch=8 {t8:.3f} s, t_batch=1 {t1:.3f} s, ratio {t1 / t8:.2f}×")


def sections(quick: bool, worlds: list[int] | None = None) -> dict[str, list[int]]:
    """Sizes of every section: ``widths`` and ``dims`` (parameters), ``sizes`` (probe samples),
    ``parallel_n`` (one value: the data-parallel read's N), ``worlds`` (process counts; the
    given ones, else 1, 2 with ``quick`` and 1, 2, 4 without) and ``batching`` (N)."""
    if worlds is not None and (not worlds or any(w < 1 for w in worlds)):
        raise ValueError(f"--worlds must be positive process counts; got {worlds}")
    if quick:
        return {
            "widths": [64, 128, 256, 512],
            "dims": [16, 32, 64],
            "sizes": [64, 128, 256, 512],
            "parallel_n": [128],
            "worlds": worlds or [1, 2],
            "batching": [16, 64],
        }
    return {
        "widths": [64, 128, 256, 512, 1024, 2048, 3072],
        "dims": [16, 32, 64, 128, 256, 512, 640],
        "sizes": [64, 128, 256, 512, 1024],
        "parallel_n": [256],
        "worlds": worlds or [1, 2, 4],
        "batching": [16, 64, 256],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``: ``sys.argv[1:]`` when None)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=64, help="probe samples for the parameter sweep")
    ap.add_argument("--max-params", type=float, default=1.1e7, help="largest model (sweeps)")
    ap.add_argument(
        "--read-max-params", type=float, default=1.1e7, help="largest model for the whole read"
    )
    ap.add_argument(
        "--read-max-n", type=int, default=1024, help="largest probe set for the whole read"
    )
    ap.add_argument(
        "--only",
        choices=["params", "samples", "parallel", "batching"],
        nargs="*",
        default=None,
        help="run only these sections",
    )
    ap.add_argument("--quick", action="store_true", help="smaller sizes in every section")
    ap.add_argument(
        "--worlds",
        type=int,
        nargs="+",
        default=None,
        help="process counts of the data-parallel section (default 1 2 4; 1 2 with --quick)",
    )
    ap.add_argument("--plot", default=None, help="write the log-log cost curves to this PNG")
    args = ap.parse_args(argv)
    try:
        sections(args.quick, args.worlds)
    except ValueError as err:
        ap.error(str(err))
    return args


def main() -> None:
    args = parse_args()
    size = sections(args.quick, args.worlds)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, threads {args.threads}, cores {os.cpu_count()}")
    widths, dims = size["widths"], size["dims"]
    mlps = [(f"mlp w={w}", mlp_case(w, args.n)) for w in widths]
    vits = [(f"vit dim={d}", vit_case(d, args.n)) for d in dims]
    mlps = [c for c in mlps if n_params(c[1].model) <= args.max_params]
    vits = [c for c in vits if n_params(c[1].model) <= args.max_params]
    only = set(args.only or ["params", "samples", "parallel", "batching"])
    results: list[dict] = []
    if "params" in only:
        big = args.read_max_params
        results.append(
            series("cost vs parameters: MLP", mlps, lambda p, n: p, lambda p, n: p <= big)
        )
        results.append(
            series("cost vs parameters: ViT", vits, lambda p, n: p, lambda p, n: p <= big)
        )
    sizes = size["sizes"]
    if "samples" in only:
        results.append(
            series(
                "cost vs probe samples: MLP w=256",
                [(f"N={n}", mlp_case(256, n)) for n in sizes],
                lambda p, n: n,
                lambda p, n: n <= args.read_max_n,
            )
        )
    if args.plot and results:
        plot_series(results, args.plot)
    if "parallel" in only:
        data_parallel(256, size["parallel_n"][0], size["worlds"])
    if "batching" in only:
        batching(size["batching"])
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s; peak RSS {rss_mb():.0f} MB")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
