"""`neuromanifold lcn` commands: linear convolutional network geometry.

Text formats shared by the `lcn` commands (parsers below, importable by other command modules
inside their functions):

* ``--filters``: comma-separated layer filter shapes; ``2,3,2`` (1-D) or ``2x2,3x3`` (D-D).
* ``--strides``: comma-separated per-layer strides, ``L − 1`` entries (``s_L = 1``) or ``L``;
  ``2,3`` (1-D) or ``1x1`` / ``2`` (D-D; an int is used on every axis). Default: all 1.
* ``--theta``: layers separated by ``;``, coefficients by ``,`` in ascending order; a D-D filter
  lists its entries in C (row-major) order, e.g. ``"1,2,3,4;..."`` for a 2x2 filter.
"""

from __future__ import annotations

from typing import Any

import typer

from neuromanifold.cli import lcn_fiber
from neuromanifold.cli._files import (
    JSON_STDOUT_HELP,
    check_json_target,
    emit_json,
    fail,
    json_to_stdout,
    text_echo,
)

#: Relative tolerance of the check that ``--theta`` multiplies out to ``--v`` in `lcn compare`:
#: ``max|μ(θ) − v| ≤ THETA_V_RTOL · max(max|v|, max|μ(θ)|)``.
THETA_V_RTOL = 1e-9

lcn_app = typer.Typer(help="Linear (convolutional) network geometry.", no_args_is_help=True)


def _g6(x: float) -> str:
    return f"{x:.6g}"


#: ``np.printoptions(formatter=…)`` of the `lcn` text output: every float with 6 significant
#: digits (``%.6g``), so small values (a small initialisation: v, δ, K ~ 1e-8) are not printed
#: as 0 the way fixed-point ``precision=6, suppress=True`` printing did.
FLOAT_FORMATTER = {"float_kind": _g6}


def _parse_shape(item: str, dim: int, *, what: str) -> tuple[int, ...] | int:
    parts = item.strip().lower().split("x")
    try:
        nums = tuple(int(p) for p in parts)
    except ValueError:
        raise typer.BadParameter(
            f"{what} entry {item!r}: expected an int or {dim} ints joined by 'x' (e.g. 2x3)"
        ) from None
    if len(nums) == 1:
        return nums[0]
    if len(nums) != dim:
        raise typer.BadParameter(f"{what} entry {item!r} has {len(nums)} axes: --dim is {dim}")
    return nums


def parse_filters(text: str, dim: int) -> tuple[Any, ...]:
    """``"2,2"`` → ``(2, 2)``; ``"2x2,3x3"`` → ``((2, 2), (3, 3))``."""
    items = lcn_fiber.fields(text, what="--filters")
    if not items:
        raise typer.BadParameter("--filters is empty: expected e.g. 2,2 or 2x2,3x3")
    shapes = [_parse_shape(s, dim, what="--filters") for s in items]
    if dim > 1:
        for s, raw in zip(shapes, items, strict=True):
            if isinstance(s, int):
                raise typer.BadParameter(
                    f"--filters entry {raw!r}: expected {dim} ints joined by 'x' for --dim {dim}"
                )
    return tuple(shapes)


def parse_strides(text: str | None, n_layers: int, dim: int) -> tuple[Any, ...]:
    """``"2,3"`` → ``(2, 3)``; ``"1x2"`` → ``((1, 2),)``; ``None`` → all 1 (``L − 1`` entries)."""
    if text is None or not text.strip():
        return tuple(1 for _ in range(n_layers - 1))
    items = lcn_fiber.fields(text, what="--strides")
    return tuple(_parse_shape(s, dim, what="--strides") for s in items)


def parse_theta(text: str, shapes: tuple[tuple[int, ...], ...]) -> list[Any]:
    """``"1,2;1,-1"`` → per-layer float arrays reshaped to ``shapes`` (C order)."""
    import numpy as np

    layers = [s for s in text.split(";")]
    if len(layers) != len(shapes):
        raise typer.BadParameter(
            f"--theta has {len(layers)} layers (separated by ';'): expected {len(shapes)}"
        )
    out = []
    for i, (chunk, shape) in enumerate(zip(layers, shapes, strict=True)):
        try:
            vals = [float(x) for x in chunk.split(",")]
        except ValueError:
            raise typer.BadParameter(
                f"--theta layer {i + 1} {chunk!r}: expected comma-separated numbers"
            ) from None
        n = int(np.prod(shape))
        if len(vals) != n:
            raise typer.BadParameter(
                f"--theta layer {i + 1} has {len(vals)} coefficients: filter shape "
                f"{'x'.join(map(str, shape))} needs {n}"
            )
        arr = np.array(vals).reshape(shape)
        if not np.all(np.isfinite(arr)):
            raise typer.BadParameter(f"--theta layer {i + 1}: coefficients must be finite")
        out.append(arr)
    return out


def check_theta_gives_v(arch: Any, theta: list[Any], v: list[float]) -> None:
    """Exit 2 (one line naming both vectors) unless ``μ(θ)`` equals ``v`` within
    ``THETA_V_RTOL`` relative (max-norm). A ``v`` of the wrong length passes: the command's own
    check of ``v`` names that problem."""
    import numpy as np

    from neuromanifold.linear import mu

    got = np.asarray(mu(arch, theta), dtype=np.float64).ravel()
    want = np.asarray(v, dtype=np.float64)
    if got.size != want.size:
        return
    scale = max(float(np.max(np.abs(want), initial=0.0)), float(np.max(np.abs(got), initial=0.0)))
    err = float(np.max(np.abs(got - want), initial=0.0))
    if err > THETA_V_RTOL * scale:
        with np.printoptions(precision=6, linewidth=10_000):
            fail(
                f"--theta is not a factorisation of --v: μ(θ) = {np.array2string(got)} but "
                f"v = {np.array2string(want)} (max difference {err:.3g}, relative tolerance "
                f"{THETA_V_RTOL:g})"
            )


@lcn_app.command("ntk")
def ntk_command(
    filters: str = typer.Option(..., "--filters", help="Filter shapes, e.g. 2,2 or 2x2,3x3."),
    theta: str = typer.Option(..., "--theta", help="Filters: layers ';', coefficients ','."),
    strides: str | None = typer.Option(
        None,
        "--strides",
        help="Strides s_1..s_{L-1} (or s_1..s_L), one per layer (a single value only for L ≤ 2), "
        "e.g. 2 or 2,3 or 1x1; default: all 1.",
    ),
    dim: int = typer.Option(1, "--dim", min=1, help="Signal dimension D."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Also write the result as JSON {JSON_STDOUT_HELP}."
    ),
) -> None:
    """Print v = μ(θ), δ, the NTK K = Jμ Jμᵀ, rank, dim M and whether θ is a regular parameter.

    Floats are printed with 6 significant digits ('%.6g'); '--json' has them in full.

    "smooth point" checks rank Jμ(θ) = dim M at θ only (the JSON key 'smooth'): a crossing of
    several fiber components (spec §4.2) passes that check; 'lcn fiber' finds the other
    components. The network is used as given; a note says when it is not in the paper's normal
    form (scalar layers, s_L ≠ 1).
    """
    import numpy as np

    from neuromanifold.linear import LCN, delta, mu, ntk
    from neuromanifold.linear.metric import is_smooth_point
    from neuromanifold.linear.normalize import normal_form_note
    from neuromanifold.linear.ntk import NTKOverflowError, NTKUnderflowError

    check_json_target(json_path, stdout_ok=True)
    echo = text_echo(json_path)
    shapes = parse_filters(filters, dim)
    try:
        arch = LCN(shapes, parse_strides(strides, len(shapes), dim), dim=dim)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    th = parse_theta(theta, arch.filters)
    with np.errstate(over="ignore", invalid="ignore"):
        v = mu(arch, th)
        d = delta(th)
        try:
            K = ntk(arch, th)
        except NTKOverflowError:  # said below with μ's and δ's overflow, as --theta's
            K = np.array([np.inf])
        except NTKUnderflowError:
            K = np.zeros(1)  # said below where no filter is zero, with μ's underflow
            small = max(float(np.abs(w).max()) for w in th)
            if not all(np.any(w) for w in th):  # one zero filter: the check below skips it
                fail(
                    f"--theta: the NTK underflows float64 (largest |coefficient| {small:.3g}) "
                    "although at most one filter is zero; rescale θ (the NTK is homogeneous of "
                    "degree 2(L − 1))"
                )
    if not (np.isfinite(v).all() and np.isfinite(d).all() and np.isfinite(K).all()):
        big = max(float(np.abs(w).max()) for w in th)
        fail(
            f"--theta: μ(θ), δ or the NTK overflow float64 (largest |coefficient| {big:.3g}); "
            "rescale θ (μ is homogeneous of degree L, the NTK of degree 2(L − 1))"
        )
    if all(np.any(w) for w in th) and not (np.any(v) and np.any(K)):
        # a product of non-zero polynomials is non-zero: μ or K underflowed to 0
        small = max(float(np.abs(w).max()) for w in th)
        fail(
            f"--theta: μ(θ) or the NTK underflow float64 (largest |coefficient| {small:.3g}) "
            "although no filter is zero; rescale θ (μ is homogeneous of degree L)"
        )
    report = is_smooth_point(arch, th)
    note = normal_form_note(arch)
    with np.printoptions(formatter=FLOAT_FORMATTER, linewidth=120):
        echo(f"architecture: filters {arch.filters}, strides {arch.strides}, D = {arch.D}")
        echo(f"v = {np.array2string(v)}")
        echo(f"delta = {np.array2string(d)}")
        echo(f"K ({K.shape[0]}x{K.shape[1]}) =\n{np.array2string(K)}")
    echo(f"rank J = {report.rank}, dim M = {report.dim_M}")
    echo(
        f"smooth point (rank Jμ = dim M at θ): {'yes' if report.smooth else 'no'} "
        f"(sigma_dimM = {report.sigma_dim:.3e}, sigma_next = {report.sigma_next:.3e}, "
        f"rtol = {report.rtol:.0e}, min |w_l| = {report.min_filter_norm:.3e}; the sigmas of Jμ "
        "at the balanced point of θ's rescaling orbit)"
    )
    echo("  (a check at θ only: crossings of several fiber components need `lcn fiber`)")
    if note:
        echo(f"note: {note}")
    if json_path is not None:
        payload = {
            "theta": [np.asarray(w).tolist() for w in th],  # K is a function of θ, not of (v, δ)
            "v": v.tolist(),
            "delta": d.tolist(),
            "ntk": K.tolist(),
            "rank": report.rank,
            "dim_M": report.dim_M,
            "smooth": report.smooth,
            "architecture": arch.to_dict(),
            "smooth_report": report.to_dict(),
            "notes": [note] if note else [],
        }
        if emit_json(json_path, payload) is not None:
            typer.echo(f"wrote {json_path}")


@lcn_app.command("compare")
def compare_command(
    filters: str = typer.Option(..., "--filters", help="Filter shapes, e.g. 2,2 or 2x2,3x3."),
    v: str = typer.Option(..., "--v", help="End-to-end filter v (ascending; D-D in C order)."),
    delta: list[str] = typer.Option(
        ...,
        "--delta",
        help="One invariant vector δ (L − 1 comma-separated values); repeat --delta for each "
        "(at least 2).",
    ),
    strides: str | None = typer.Option(
        None,
        "--strides",
        help="Strides s_1..s_{L-1} (or s_1..s_L), one per layer (a single value only for L ≤ 2), "
        "e.g. 2 or 2,3 or 1x1; default: all 1.",
    ),
    dim: int = typer.Option(1, "--dim", min=1, help="Signal dimension D."),
    theta: str | None = typer.Option(
        None, "--theta", help="Optional factorisation of v (layers ';'): picks the sheet."
    ),
    starts: int = typer.Option(20, "--starts", min=1, help="Random starts for the first δ."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random starts."),
    locus: bool = typer.Option(
        False, "--locus", help="Also classify v at each δ (all fiber points: crossings, sheets)."
    ),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Also write the result as JSON {JSON_STDOUT_HELP}."
    ),
) -> None:
    """Compare the metrics g = K_δ(v)⁺ on T_vM at one v for several δ (pencil, distance).

    Per δ: the fiber point's squared layer norms, Gauss–Newton residual, rank Jμ / dim M, whether θ
    is a regular parameter (rank Jμ = dim M at θ: v may still be a crossing, see --locus) and the
    condition of K on T_vM; the sheet is named by θ at the first δ. Per pair: ‖K_i − K_j‖_F
    relative, the extreme generalized eigenvalues λ of K_i ξ = λ K_j ξ on T_vM (all 1 iff the
    metrics agree) and the affine-invariant distance √Σ log² λ. All points lie on one sheet of the
    fiber; --locus searches the whole fiber at each δ (smooth / crossing, NTK gap between sheets).
    Exit status 1 when v has no fiber point (off the neuromanifold).
    """
    import numpy as np

    from neuromanifold.cli.lcn_fiber import _floats
    from neuromanifold.linear.architecture import LCN
    from neuromanifold.linear.metric_compare import compare_metrics

    check_json_target(json_path, stdout_ok=True)
    echo = text_echo(json_path)
    shapes = parse_filters(filters, dim)
    try:
        arch = LCN(shapes, parse_strides(strides, len(shapes), dim), dim=dim)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    th = None if theta is None else parse_theta(theta, arch.filters)
    deltas = [_floats(d, what="--delta") for d in delta]
    v_list = _floats(v, what="--v")
    if th is not None:
        check_theta_gives_v(arch, th, v_list)
    try:
        res = compare_metrics(
            arch, v_list, deltas, theta=th, n_starts=starts, seed=seed, locus=locus
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    except RuntimeError as exc:
        # on stderr under --json -: no JSON is written, and stdout holds nothing else
        typer.echo(f"NOT ON THE NEUROMANIFOLD: {exc}", err=json_to_stdout(json_path))
        raise typer.Exit(code=1) from None
    with np.printoptions(formatter=FLOAT_FORMATTER, linewidth=120):
        echo(f"architecture: filters {arch.filters}, strides {arch.strides}, D = {arch.D}")
        echo(f"v = {np.array(res.v)}   dim M = {res.dim_M}\nroute: {res.route}")
        if res.per_delta:  # which sheet (s31 trial LCN #7: |w_l|² does not tell sheets apart)
            first = "; ".join(np.array2string(w.ravel()) for w in res.per_delta[0].theta_arrays())
            echo(f"sheet: θ at δ of row 0 = {first} (another sheet: --theta; all: --locus)")
        echo(
            f"\n{'i':>2}  {'delta':<16} {'|w_l|^2':<24} {'residual':>9}  {'rank J':>6}  "
            f"{'regular':>7}  {'s_dimM/s_max':>12}  {'cond K|T':>9}"
        )
        for i, p in enumerate(res.per_delta):
            sm = p.smooth
            cond = "inf" if p.tangent_condition is None else f"{p.tangent_condition:.4g}"
            echo(
                f"{i:>2}  {np.array2string(np.array(p.delta)):<16} "
                f"{np.array2string(np.array(p.sq_norms)):<24} {p.residual:>9.2e}  "
                f"{sm.rank:>3}/{sm.dim_M:<2}  {'yes' if sm.smooth else 'no':>7}  "
                f"{sm.sigma_dim / sm.sigma_max:>12.3e}  {cond:>9}"
            )
    echo(
        f"\npairs: λ = generalized eigenvalues of K_i ξ = λ K_j ξ on T_vM, d = √Σ log² λ, "
        f"agree iff max|log λ| ≤ {res.agree_tol:g}"
    )
    echo(
        f"{'i':>2} {'j':>2}  {'|dK|_F rel':>10}  {'λ_min':>9}  {'λ_max':>9}  {'d':>9}  "
        f"{'sin T':>8}  agree"
    )
    for q in res.pairs:
        if not q.defined:
            echo(
                f"{q.i:>2} {q.j:>2}  {q.k_rel_frobenius:>10.4g}  "
                "undefined (K|T singular or ill-conditioned)"
            )
            continue
        echo(
            f"{q.i:>2} {q.j:>2}  {q.k_rel_frobenius:>10.4g}  {q.lambda_min:>9.6g}  "
            f"{q.lambda_max:>9.6g}  {q.affine_invariant_distance:>9.6g}  {q.tangent_sin:>8.1e}  "
            f"{'yes' if q.agree else 'no'}"
        )
    for note in res.notes:
        echo(f"note: {note}")
    if emit_json(json_path, res.to_dict()) is not None:
        typer.echo(f"wrote {json_path}")


def register(app: typer.Typer) -> None:
    """Attach the `lcn` command group to the top-level app."""
    lcn_fiber.register(lcn_app)
    app.add_typer(lcn_app, name="lcn")
