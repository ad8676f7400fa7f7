"""`neuromanifold lcn fiber | survey | converge` commands.

Heavy imports (numpy, the linear modules, matplotlib, rich) happen inside the commands so that
building the CLI stays cheap and a failure here cannot break other command groups.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from neuromanifold.cli._files import (
    JSON_STDOUT_HELP,
    check_json_target,
    check_out_dir,
    emit_json,
    json_to_stdout,
    out_dir_parser,
    prepare_out_dir,
    text_echo,
    writing,
)

_OUT = out_dir_parser()


def fields(text: str, *, what: str) -> list[str]:
    """The comma-separated fields of ``text`` (stripped); a blank ``text`` has none.

    An empty field (``"1,,2"``, a trailing comma) is refused: dropping it shifted every later
    coefficient by one place, and a vector of the wrong length could then pass the length check
    (s16 trial Z #5).
    """
    if not text.strip():
        return []
    items = [x.strip() for x in text.split(",")]
    empty = [i + 1 for i, x in enumerate(items) if not x]
    if empty:
        raise typer.BadParameter(
            f"{what} {text!r}: field {empty[0]} of {len(items)} is empty; "
            "expected comma-separated values"
        )
    return items


def _floats(text: str, *, what: str) -> list[float]:
    items = fields(text, what=what)
    try:
        return [float(x) for x in items]
    except ValueError:
        raise typer.BadParameter(f"{what} {text!r}: expected comma-separated numbers") from None


def fiber_command(
    filters: str = typer.Option(..., "--filters", help="Filter shapes, e.g. 2,2 or 2x2,3x3."),
    v: str = typer.Option(..., "--v", help="End-to-end filter v (ascending; D-D in C order)."),
    delta: str = typer.Option(
        "",
        "--delta",
        help="Invariants δ_l = ‖w_(l+1)‖² − ‖w_l‖², L − 1 comma-separated values "
        "(required unless L = 1).",
    ),
    strides: str | None = typer.Option(
        None,
        "--strides",
        help="Strides s_1..s_{L-1} (or s_1..s_L), one per layer (a single value only for L ≤ 2), "
        "e.g. 2 or 2,3 or 1x1; default: all 1.",
    ),
    dim: int = typer.Option(1, "--dim", min=1, help="Signal dimension D."),
    starts: int = typer.Option(40, "--starts", min=1, help="Random starts of the numeric route."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the numeric route."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Also write the report as JSON {JSON_STDOUT_HELP}."
    ),
) -> None:
    """All parameters with μ(θ) = v and δ(θ) = δ (modulo signs), their NTKs, route agreement.

    Floats are printed with 6 significant digits ('%.6g'); '--json' has them in full.
    Exit status 1 when no parameters realise (v, δ) (v off the neuromanifold); the report and
    its best residual are still printed (and written with --json). The report's notes are
    printed, among them whether the network is not in the paper's normal form (it is used as
    given) and whether the fiber is a continuum through the first point (then the points are
    samples of it, not all of it).
    """
    import numpy as np

    from neuromanifold.cli.lcn import FLOAT_FORMATTER, parse_filters, parse_strides
    from neuromanifold.linear.architecture import LCN
    from neuromanifold.linear.fiber import lcn_fiber

    check_json_target(json_path, stdout_ok=True)
    echo = text_echo(json_path)
    shapes = parse_filters(filters, dim)
    try:
        arch = LCN(shapes, parse_strides(strides, len(shapes), dim), dim=dim)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if arch.L >= 2 and not delta.strip():
        raise typer.BadParameter(
            f"--delta is required for networks with L ≥ 2 layers: this one has L = {arch.L}, "
            f"so give L − 1 = {arch.L - 1} value(s) δ_l = ‖w_(l+1)‖² − ‖w_l‖², comma-separated"
        )
    try:
        rep = lcn_fiber(
            arch, _floats(v, what="--v"), _floats(delta, what="--delta"), n_starts=starts, seed=seed
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with np.printoptions(formatter=FLOAT_FORMATTER, linewidth=120):
        echo(f"architecture: {rep.architecture}  (dim M = {rep.dim_M})")
        echo(f"v = {np.array(rep.v)}   δ = {np.array(rep.delta)}")
        for r in rep.routes:
            status = "" if r.applicable else f" (not applicable: {r.note})"
            echo(
                f"route {r.name}: {r.n_points} point(s), {r.n_distinct_ntks} distinct NTK(s), "
                f"{r.n_converged}/{r.n_starts} converged{status}"
            )
        for note in rep.notes:
            echo(f"note: {note}")
        if not rep.on_manifold:  # on stderr under --json - (the JSON has on_manifold false)
            typer.echo(
                f"NOT ON THE NEUROMANIFOLD: no parameters give (v, δ); best residual "
                f"{rep.residual:.3g} > tolerance {rep.tolerance:.3g}",
                err=json_to_stdout(json_path),
            )
        for i, (p, K) in enumerate(zip(rep.point_arrays(), rep.ntk_arrays(), strict=True)):
            echo(
                f"\npoint {i + 1} (NTK class {rep.ntk_labels[i] + 1}, rank J = "
                f"{rep.jacobian_ranks[i]}):"
            )
            for l, w in enumerate(p):
                echo(f"  w_{l + 1} = {w}")
            echo(f"  K =\n{K}")
        # a continuum (the report's note says so): the points are samples, not the fiber
        counted = (
            f"{rep.n_points} sample point(s) of a fiber of dimension {rep.fiber_dimension}"
            if rep.continuum
            else f"{rep.n_points} point(s)"
        )
        agree = "n/a (one route applied)" if rep.routes_agree is None else rep.routes_agree
        echo(
            f"\n{counted} modulo signs, {rep.n_distinct_ntks} distinct NTK(s); "
            f"largest NTK difference {rep.max_ntk_diff_abs:.6g} (relative "
            f"{rep.max_ntk_diff_rel:.3g}); routes agree: {agree}; "
            f"max residual {rep.residual:.3g}"
        )
    if emit_json(json_path, rep.to_dict()) is not None:
        typer.echo(f"wrote {json_path}")
    if not rep.on_manifold:
        raise typer.Exit(code=1)


def survey_command(
    samples: int = typer.Option(20, "--samples", min=1, help="Samples per row."),
    seed: int = typer.Option(
        0,
        "--seed",
        min=0,
        help="Seed of the samples (verdicts and finite fibers reproduce; a continuum's sampled "
        "points, so max_spread and mean_points of the FC and ReLU rows, can vary between runs).",
    ),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write the rows as JSON here {JSON_STDOUT_HELP}."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_OUT,
        metavar="DIR",
        help="Directory for survey.md, survey.json and survey.png.",
    ),
    rows: str | None = typer.Option(
        None,
        "--rows",
        help="Only these rows (the table's 'row' column: 0-based indices, comma-separated); each "
        "row gets the same samples as in the full survey.",
    ),
) -> None:
    """Recompute the paper's NTK-determinacy table by sampling fibers (verdicts are computed)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TimeElapsedColumn

    from neuromanifold._progress import stderr_progress
    from neuromanifold.linear.survey import default_rows, run_survey
    from neuromanifold.linear.survey_report import plot_survey, to_markdown

    check_json_target(json_path, stdout_ok=True)
    echo = text_echo(json_path)
    check_out_dir(out)
    n_rows = len(default_rows())
    idx = list(range(n_rows))
    if rows is not None:
        try:
            idx = [int(x) for x in fields(rows, what="--rows")]
        except ValueError:
            raise typer.BadParameter(f"--rows {rows!r}: expected comma-separated ints") from None
        repeated = sorted({i for i in idx if idx.count(i) > 1})
        if repeated:  # a repeated row ran and printed twice (session 14 trial N)
            raise typer.BadParameter(f"--rows {rows!r}: row(s) {repeated} given more than once")
        if not idx:
            raise typer.BadParameter(
                f"--rows {rows!r}: no row given; name rows 0..{n_rows - 1}, e.g. --rows 0,3"
            )
        bad = [i for i in idx if not 0 <= i < n_rows]
        if bad:
            raise typer.BadParameter(f"--rows {rows!r}: indices must lie in 0..{n_rows - 1}")
    t0 = time.perf_counter()
    with stderr_progress(  # progress, not output: stdout may hold the JSON
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ) as bar:
        task = bar.add_task("sampling fibers", total=samples * len(idx))
        # each row is seeded by its own index, so --rows reproduces the full survey's lines
        result = run_survey(
            samples=samples, seed=seed, row_indices=idx, progress=lambda n: bar.advance(task, n)
        )
    elapsed = time.perf_counter() - t0
    md = to_markdown(result)
    echo(md)
    echo(f"elapsed: {elapsed:.1f} s")
    payload = {**result.to_dict(), "elapsed_s": elapsed}
    if emit_json(json_path, payload) is not None:
        typer.echo(f"wrote {json_path}")
    if out is not None:
        prepare_out_dir(out)
        with writing(out, option="--out"):
            (out / "survey.md").write_text(md)
            (out / "survey.json").write_text(json.dumps(payload, indent=2))
            plot_survey(result, str(out / "survey.png"))
        typer.echo(
            f"wrote {out / 'survey.md'}, {out / 'survey.json'}, {out / 'survey.png'}",
            err=json_to_stdout(json_path),
        )


CONVERGE_ARCHS = [((3, 2, 2), (2, 2)), ((2, 3, 2), (2, 3)), ((3, 2, 2), (1, 1))]


def converge_command(
    seeds: int = typer.Option(20, "--seeds", min=1, help="Random initialisations per network."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the loss and the starts."),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_OUT,
        metavar="DIR",
        help="Directory for converge.json and converge.png.",
    ),
) -> None:
    """Gradient flow to convergence on a random least-squares loss: strides > 1 vs stride one."""
    from neuromanifold.linear.architecture import LCN
    from neuromanifold.linear.converge import convergence_experiment, plot_convergence

    check_out_dir(out)
    reports = []
    for f, s in CONVERGE_ARCHS:
        t0 = time.perf_counter()
        rep = convergence_experiment(LCN(f, s), n_runs=seeds, seed=seed)
        sm = rep.summary()
        typer.echo(
            f"{rep.architecture}: {sm['reached_tol']}/{sm['runs']} reached ‖∇L‖ ≤ 1e-10, "
            f"full rank {sm['full_rank']}/{sm['runs']} (min σ_dimM/σ_max of Jμ at the "
            f"balanced representative {sm['min_sigma_ratio']:.2e}), max ‖∇L‖ "
            f"{sm['max_grad_norm']:.2e}, min ‖v‖ "
            f"{sm['min_v_norm']:.3g}, max drift {sm['max_invariant_drift']:.2e}, critical values "
            f"{sm['critical_values']} (ℓ(0) = {sm['loss_at_zero']:.4g}) "
            f"[{time.perf_counter() - t0:.1f} s]"
        )
        reports.append(rep)
    if out is not None:
        prepare_out_dir(out)
        with writing(out, option="--out"):
            (out / "converge.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2))
            plot_convergence(reports, str(out / "converge.png"))
        typer.echo(f"wrote {out / 'converge.json'}, {out / 'converge.png'}")


def register(lcn_app: typer.Typer) -> None:
    """Attach the fiber, survey and convergence commands to the `lcn` group."""
    lcn_app.command("fiber")(fiber_command)
    lcn_app.command("survey")(survey_command)
    lcn_app.command("converge")(converge_command)
