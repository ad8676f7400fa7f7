"""`neuromanifold triple` commands: ν(k), closed-form (λ, m), and (λ, m) assembled from a read.

JSON outputs (``--json PATH``; ``-`` writes to stdout):

* ``triple nu``: ``{"nu": {"1": 0.5, "2": 0.1729…}, "lambda_dir": {...}, "v_frozen_zero": {...}}``.
* ``triple rrr`` / ``triple dln``: ``{"lambda": "13/2", "lambda_float": 6.5, "m": 2, "model": …,
  "case": …, "m_restated": …, "caveat": …}`` — ``lambda`` is the exact fraction as a string,
  ``lambda_float`` its float value.
* ``triple read``: the :class:`~neuromanifold.singular.assembly.Assembly` JSON of a saved Reading
  (``dominant_order`` is the diagonal order Σ k_i of the smallest-λ genuine block, ``nu_universal``
  the per-direction ν of that order, 1/2 of one regular direction when there is no genuine block:
  not the model's ν, see ``nu_universal_scope`` and docs/triple.md). ``regular_dims_given``
  says whether ``--regular-dims`` was passed and ``scope`` what λ covers (without it: the read
  directions only); ``reading_note`` is the Reading's own note. ``Assembly.from_dict`` reads the
  JSON back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from neuromanifold.cli._files import JSON_STDOUT_HELP, check_json_target, emit_json, nonempty_path

#: Let a negative number reach a command's own argument check (``triple rrr 3 4 5 -1``: "r must
#: be >= 0") instead of click's "No such option: -1".
_NUMBERS_MAY_BE_NEGATIVE = {"ignore_unknown_options": True}

#: Printed by `triple read` without ``--regular-dims`` (docs/triple.md §4, "What the result
#: covers").
READ_ONLY_NOTE = (
    "note: λ is assembled from the read directions only (each live record counts 1/2); the "
    "regular dimensions of the rest of the model are not counted. For a global λ pass "
    "--regular-dims D, the dimension of the live part (e.g. its parameter count minus its gauge "
    "dimension)."
)

triple_app = typer.Typer(
    help="Watanabe's triple (λ, m, ν): ν(k), closed forms, assembly from a read.",
    no_args_is_help=True,
)

_READING = nonempty_path("--reading", "a Reading JSON file")


def parse_k_range(spec: str) -> list[int]:
    """Parse "1-8", "2,3,5" or "1-3,7" into a sorted list of distinct ints in [1, ``K_MAX``].

    Each part is checked against ``K_MAX`` before a range is expanded: "1-100000000" is refused
    at once (it was expanded first, a hang and ~1 GB; s17 trial AE #7).
    """
    from neuromanifold.singular.nu import K_MAX

    bad = f"--k must look like '1-8' or '2,3,5' (ints >= 1), got {spec!r}"
    parts: list[tuple[int, int]] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                if min(lo, hi) < 1:  # "1--3": an end below 1, not a range to turn round
                    raise typer.BadParameter(bad)
                if lo > hi:
                    raise typer.BadParameter(
                        f"--k range {part!r} runs backwards (start {lo} > end {hi}); "
                        f"write it as '{hi}-{lo}'"
                    )
            else:
                lo = hi = int(part)
        except ValueError:
            raise typer.BadParameter(bad) from None
        parts.append((lo, hi))
    if not parts or min(lo for lo, _ in parts) < 1:
        raise typer.BadParameter(bad)
    if max(hi for _, hi in parts) > K_MAX:
        raise typer.BadParameter(f"--k must be <= {K_MAX}, got {spec!r}")
    return sorted({k for lo, hi in parts for k in range(lo, hi + 1)})


def _parse_widths(spec: str) -> list[int]:
    try:
        widths = [int(w) for w in spec.split(",")]
    except ValueError:
        raise typer.BadParameter(
            f"--widths must be comma-separated ints like '4,4,4,4', got {spec!r}"
        ) from None
    return widths


def _print_closed_form(cf: Any, json_path: str | None) -> None:
    if json_path != "-":
        status = {"lower_bound": " (a lower bound)", "restated": " (restated, unverified)"}
        typer.echo(
            f"{cf.model}: λ = {cf.lam} ({float(cf.lam):.6g}), m = {cf.m}"
            f"{status.get(cf.m_status, '')}  [case {cf.case}]"
        )
        if cf.caveat:
            typer.echo(f"caveat: {cf.caveat}")
    emit_json(json_path, cf.to_dict(), say=True)


@triple_app.command("nu")
def nu_cmd(
    k: str = typer.Option("1-8", "--k", help="Orders, e.g. '1-8' or '2,3,5'."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write JSON here {JSON_STDOUT_HELP}."
    ),
) -> None:
    """ν(k), λ_dir = 1/(2k) and the frozen V_k(0) for each order k (quadrature)."""
    from neuromanifold.singular.nu import lambda_dir, nu, v_frozen_zero

    check_json_target(json_path, stdout_ok=True)
    ks = parse_k_range(k)  # ints in [1, K_MAX]
    rows = {kk: (lambda_dir(kk), nu(kk), v_frozen_zero(kk)) for kk in ks}
    if json_path != "-":
        typer.echo(f"{'k':>3} {'λ_dir':>10} {'ν(k)':>12} {'V_k(0)':>12}")
        for kk, (lam, nuk, v0) in rows.items():
            typer.echo(f"{kk:>3} {lam:>10.6f} {nuk:>12.9f} {v0:>12.9f}")
    emit_json(
        json_path,
        {
            "nu": {str(kk): v[1] for kk, v in rows.items()},
            "lambda_dir": {str(kk): v[0] for kk, v in rows.items()},
            "v_frozen_zero": {str(kk): v[2] for kk, v in rows.items()},
        },
        say=True,
    )


@triple_app.command("rrr", context_settings=_NUMBERS_MAY_BE_NEGATIVE)
def rrr_cmd(
    M: int = typer.Argument(..., help="Input dimension."),
    H: int = typer.Argument(..., help="Inner (hidden) dimension."),
    N: int = typer.Argument(..., help="Output dimension."),
    r: int = typer.Argument(..., help="True rank."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write JSON here {JSON_STDOUT_HELP}."
    ),
) -> None:
    """Reduced-rank regression (λ, m) (Aoyagi–Watanabe 2005), exact."""
    from neuromanifold.singular.closed_forms import rrr

    check_json_target(json_path, stdout_ok=True)
    try:
        cf = rrr(M, H, N, r)
    except (ValueError, TypeError) as err:
        raise typer.BadParameter(str(err)) from None
    _print_closed_form(cf, json_path)


@triple_app.command("dln")
def dln_cmd(
    widths: str = typer.Option(..., "--widths", help="Widths input,…,output, e.g. '4,4,4,4'."),
    rank: int = typer.Option(0, "--rank", help="True rank r."),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write JSON here {JSON_STDOUT_HELP}."
    ),
) -> None:
    """Deep linear network λ (Aoyagi 2024) and m, with the multiplicity caveat (m derived at
    rank 0 where a hidden width is 1: the product of the pieces between width-1 layers)."""
    from neuromanifold.singular.closed_forms import deep_linear

    check_json_target(json_path, stdout_ok=True)
    try:
        cf = deep_linear(_parse_widths(widths), rank)
    except (ValueError, TypeError) as err:
        raise typer.BadParameter(str(err)) from None
    _print_closed_form(cf, json_path)


def _parse_components(
    values: list[str], option: str = "--component-dims", what: str = "dimensions"
) -> dict[int, tuple[int, ...]] | None:
    """``["0:3,2", "2:1,1"]`` → ``{0: (3, 2), 2: (1, 1)}`` (None for none); a malformed value or
    a record given twice exits 2 naming ``option`` (``--component-dims``, or
    ``--component-orders`` with ``what="orders"``). Whether the index names a genuine record
    with an order, and the number of entries, `assemble_from_reading` checks."""
    out: dict[int, tuple[int, ...]] = {}
    for value in values:
        index, sep, rest = value.partition(":")
        try:
            if not sep:
                raise ValueError
            i = int(index)
            dims = tuple(int(d) for d in rest.split(","))
        except ValueError:
            raise typer.BadParameter(
                f"{option} {value!r}: expected RECORD:D1,D2,... with integers, e.g. 0:3,2"
            ) from None
        if any(d < 1 for d in dims):
            raise typer.BadParameter(f"{option} {value!r}: {what} must be >= 1")
        if i in out:
            raise typer.BadParameter(f"{option}: record {i} is given twice")
        out[i] = dims
    return out or None


@triple_app.command("read")
def read_cmd(
    reading: Path = typer.Option(
        ...,
        "--reading",
        parser=_READING,
        metavar="FILE",
        help="A saved Reading JSON (Reading.to_dict), or the folder 'read --out' wrote (its "
        "report.json).",
    ),
    regular_dims: int | None = typer.Option(
        None,
        "--regular-dims",
        help="Live-part dimension (1/2 each); replaces the Reading's live records (at least "
        "their number).",
    ),
    component_dims: list[str] | None = typer.Option(
        None,
        "--component-dims",
        metavar="I:D1,D2",
        help="Component dimensions of genuine record I (one per factor it crosses, in the "
        "record's layer order, input side first, e.g. 0:3,2); repeat for several records. "
        "Default: 1 each.",
    ),
    component_orders: list[str] | None = typer.Option(
        None,
        "--component-orders",
        metavar="I:K1,K2",
        help="Component orders of genuine record I (one per factor it crosses, in the record's "
        "layer order, input side first, summing to its k, e.g. 0:4,2,1); repeat for several "
        "records. Default: k - n + 1, 1, ..., 1.",
    ),
    json_path: str | None = typer.Option(
        None, "--json", help=f"Write JSON here {JSON_STDOUT_HELP}."
    ),
) -> None:
    """(λ, m) assembled from the directions of a saved Reading, with the per-direction ν(k_diag)
    of its dominant direction (not the model's ν)."""
    from neuromanifold.singular.assembly import assemble_from_reading

    check_json_target(json_path, stdout_ok=True)
    if reading.is_dir():  # the folder `read --out` wrote (s34 trial TRIPLE O3: "Is a directory")
        if not (reading / "report.json").is_file():
            raise typer.BadParameter(
                f"--reading {reading} is a folder without a report.json; give the Reading JSON "
                "file (read --out DIR writes DIR/report.json)"
            )
        reading = reading / "report.json"
    try:
        data = json.loads(reading.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        # UnicodeDecodeError: a binary file (e.g. a torch .pt passed instead of the JSON)
        raise typer.BadParameter(f"--reading must be a readable Reading JSON file: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("directions"), list):
        raise typer.BadParameter(
            f"--reading must hold a Reading JSON object with a 'directions' list, got {reading}"
        )
    for i, rec in enumerate(data["directions"]):
        if not isinstance(rec, dict):
            raise typer.BadParameter(
                f"--reading {reading}: directions[{i}] is {type(rec).__name__}, expected a record "
                "object"
            )
    if regular_dims is not None and regular_dims < 0:
        raise typer.BadParameter(f"--regular-dims must be >= 0, got {regular_dims}")
    n_live = sum(rec.get("class") == "live" for rec in data["directions"])
    if regular_dims is not None and regular_dims < n_live:
        # the live part contains the live directions the read found: a smaller count drops them
        raise typer.BadParameter(
            f"--regular-dims {regular_dims} is below the {n_live} live directions of --reading "
            f"{reading}: --regular-dims is the dimension of the live part, which contains them; "
            f"pass at least {n_live}, or leave it out to count the live records (1/2 each)"
        )
    dims = _parse_components(component_dims or [])
    orders = _parse_components(component_orders or [], "--component-orders", "orders")
    try:  # a record of unknown class or with an order that is not an integer >= 1
        result = assemble_from_reading(
            data, regular_dims=regular_dims, component_dims=dims, component_orders=orders
        )
    except ValueError as err:  # the options' own errors name them (s20 audit AR #5)
        text = str(err)
        where = next(
            (
                f"--{o.replace('_', '-')}"
                for o in ("component_dims", "component_orders")
                if text.startswith(o)
            ),
            f"--reading {reading}",
        )
        raise typer.BadParameter(f"{where}: {err}") from None
    if json_path != "-":
        nu_text = "not computed" if result.nu_universal is None else f"{result.nu_universal:.6f}"
        typer.echo(f"λ = {result.lam} ({float(result.lam):.6g}), m = {result.m}")
        if regular_dims is None:  # the JSON states it in "scope" and "regular_dims_given"
            typer.echo(READ_ONLY_NOTE)
        if result.reading_note:
            typer.echo(f"reading note: {result.reading_note}")
        if result.dominant_block is None:
            typer.echo(
                f"no genuine block: ν = {nu_text} (regular) is ν(1) = 1/2 per regular direction, "
                f"not the model's ν (a regular model of dimension d has ν = d/2)"
            )
        else:
            dominant = next(b for b in result.blocks if b.block == result.dominant_block)
            n = len(dominant.orders)
            # which of the two cases applies to this block (s34 trial TRIPLE O4: the line named
            # both, whatever the block)
            scope = (
                "an upper reference for this block of one component"
                if n == 1
                else f"not a bound for this crossing of {n} components"
            )
            typer.echo(
                f"dominant block {result.dominant_block} (smallest λ_block): diagonal order "
                f"k = Σ k_i = {result.dominant_order}, ν(k) = {nu_text}: the per-direction "
                f"ν(k_diag) of the dominant direction (the normal form's universal value: "
                f"{scope}), not the model's ν"
            )
        for b in result.blocks:
            typer.echo(
                f"  block {b.block}: orders {b.orders}, dims {b.dims} -> λ = {b.lam}, m = {b.m}, "
                f"diagonal order {b.diagonal_order}"
            )
        for note in result.notes:
            typer.echo(f"  note: {note}")
        typer.echo(result.assumption)
    emit_json(json_path, result.to_dict(), say=True)


def register(app: typer.Typer) -> None:
    """Attach the `triple` commands to the top-level app."""
    app.add_typer(triple_app, name="triple")
