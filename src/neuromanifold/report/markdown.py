"""A `Reading` as Markdown: one table per layer, the modules not covered, the read's summary.

Table columns: ``#`` (the record's index in ``reading.directions``, as in ``report.json`` and
the sweeps figure's panel titles), detector, class, k, k̂ = 1 + slope/2, λ_dir = 1/(2k) and the
universal ν(k) (the normal form's value: an upper reference for a direction inside one tensor,
not a bound for a crossing; genuine and live records with an order), slope, r² (of the
selected window), magnitude ``c_k = median F/t^{2(k−1)}`` over the window, window ``[t₀, t₁]``,
offset ``|uᵀθ₀|`` (``†`` when the sweep started from the snapped point, ``sweep["base_shift"] ≠
0``) and — when the read ran with ``baseline=True`` — what the per-coordinate scan read on that
layer (``k = …`` for the largest genuine order it found, else the classes it returned); a legend
under the tables says so (`COLUMNS_LEGEND`). A chain that spans several layers appears under
each of them. ``—`` marks a value the fit did not produce.
Module and layer names (the layer headings, the "Not covered" table, the notes) are code spans
(`code_span`), so that a name such as ``<root>`` is shown rather than dropped as an HTML tag.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from neuromanifold.singular.critical_check import critical_line
from neuromanifold.singular.read_candidate import ORDER_BELOW_KEY
from neuromanifold.singular.reading import DirectionRecord, Reading
from neuromanifold.singular.support import record_units

ONE_SIDED_KEY = "one_sided"
"""The ``info`` key of a genuine record whose mirrored side reads flat (`read_candidate`)."""
ONE_SIDED_FOOTNOTE = (
    '\\* one-sided: F vanishes along −u (`info["one_sided"]`), so the order holds along +u '
    "only; for a ReLU unit that its inputs or bias can switch off, the local λ there is 0, not "
    "λ_dir (docs/triple.md §5)."
)
"""Said under the tables when a record is marked one-sided (`class_cell`)."""


PLATEAU_NOTE = (
    "(…) marks the fit of a flat gauge's plateau (F below the live threshold: slope 0 and r² near "
    "1 there say the plateau is flat, not that an order was read)"
)
"""Said where a flat gauge's plateau fit is shown in parentheses (`fit_format`)."""

COLUMNS_LEGEND = (
    "Columns: k is the order read, F_u(t) ~ c_k·t^{2(k−1)} along θ₀ + t·u (none for a flat gauge); "
    "k̂ = 1 + slope/2, with slope and r² those of the log–log fit of F_u on the window "
    "[t₀, t₁]; λ_dir = 1/(2k) and ν(k) the universal value of the normal form t^(2k) (an "
    "upper reference for a direction inside one tensor, not a bound for a crossing of several); "
    "magnitude is "
    "c_k, the median of F_u/t^{2(k−1)} over the window (for k = 1 the window's median F, which "
    "the live threshold is compared with); offset is |uᵀθ₀|, marked † where the sweep started "
    "from the snapped point θ₀ − (uᵀθ₀)u instead of θ₀ (t, window and magnitude are then "
    "measured from there: `sweep.base_shift` in report.json); — marks a value the fit did not "
    f"produce; {PLATEAU_NOTE}."
)
"""The legend under the tables of `reading_markdown` (s22 trial LM #8: "magnitude" was unnamed)."""
SCAN_LEGEND = (
    " coord. scan: what the per-coordinate scan read on that layer (k = … for its largest "
    "genuine order, else its classes)."
)
"""Added to `COLUMNS_LEGEND` when the read ran with ``baseline=True``."""


NEAR_FOOTNOTE = (
    "‡ near, not on: at the small-t end of the sweep F flattens (k = 1 there) or falls as a "
    'lower order (`info["order_below"]`), so θ₀ itself is regular along u, or of that lower '
    "order, as t → 0; k, λ_dir and ν(k) are those of the structure θ₀ sits near, which the "
    'window reads (docs/order_read.md, "Short plateaus").'
)
"""Said under the tables when a record is marked near, not on (`class_cell`)."""


def class_cell(r: DirectionRecord) -> str:
    """The record's class, with ``*`` when it is one-sided (`ONE_SIDED_FOOTNOTE`) and ``‡``
    when it was read near, not on, its structure (`NEAR_FOOTNOTE`)."""
    return (
        r.klass
        + ("*" if ONE_SIDED_KEY in r.info else "")
        + ("‡" if ORDER_BELOW_KEY in r.info else "")
    )


def class_footnotes(directions: list[DirectionRecord]) -> list[str]:
    """The footnotes of the marks `class_cell` put on any of ``directions``, in Markdown."""
    notes = []
    if any(ONE_SIDED_KEY in r.info for r in directions):
        notes.append(ONE_SIDED_FOOTNOTE)
    if any(ORDER_BELOW_KEY in r.info for r in directions):
        notes.append(NEAR_FOOTNOTE)
    return notes


__all__ = [
    "NEAR_FOOTNOTE",
    "PLATEAU_NOTE",
    "class_cell",
    "class_footnotes",
    "code_span",
    "fit_format",
    "fmt",
    "reading_markdown",
    "scan_summary",
    "table",
    "truncation_notes",
]


def code_span(text: str) -> str:
    """``text`` as a Markdown code span, shown verbatim: `` `<root>` `` (a bare ``<root>`` is an
    unknown HTML tag that GitHub and most viewers drop). A text holding backticks is fenced by a
    longer run of them, padded with spaces (CommonMark strips one space on each side)."""
    runs = re.findall(r"`+", text)
    if not runs:
        return f"`{text}`"
    fence = "`" * (max(map(len, runs)) + 1)
    return f"{fence} {text} {fence}"


def fmt(v: float | int | None, spec: str = ".4g") -> str:
    """``format(v, spec)``; ``—`` for ``None``."""
    if v is None:
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return format(v, spec)


def _plateau_fit(v: float | int | None, spec: str = ".4g") -> str:
    """`fmt` in parentheses: a plateau's fit beside a flat gauge (no order read); "—" stays."""
    text = fmt(v, spec)
    return text if v is None else f"({text})"


def fit_format(r: Any) -> Callable[[float | int | None, str], str]:
    """How to print record ``r``'s fit (k̂, slope, r²): in parentheses for a flat gauge without an
    order, whose fit is that of its plateau (s26 trial CNN #15), else plainly (`fmt`)."""
    return _plateau_fit if r.klass == "flat_gauge" and r.k is None else fmt


def table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table (``|`` in cells escaped)."""

    def row(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    lines = [row(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [row(r) for r in rows]
    return "\n".join(lines)


def scan_summary(baseline: Mapping[str, object] | None, layer: str) -> str:
    """The coordinate-scan entry of ``layer``: ``k = best_k``, its classes, or ``—``."""
    if not baseline or layer not in baseline:
        return "—"
    b = baseline[layer]
    if not isinstance(b, Mapping):
        return "—"
    if b.get("best_k") is not None:
        return f"k = {b['best_k']}"
    classes = sorted(set(b.get("classes") or []))
    return "/".join(classes) or "—"


def _window(r: DirectionRecord) -> str:
    return "—" if r.window is None else f"[{r.window[0]:.2g}, {r.window[1]:.2g}]"


def _passes_scope(meta: Mapping) -> str:
    """``""`` for a one-process read; under data parallelism, whose passes the counts are.

    The pass counts of a data-parallel read are one rank's passes over its own shard
    (`neuromanifold.singular.distributed.PER_RANK_META`); the report is written by rank 0.
    """
    world = meta.get("world_size", 1)
    if not isinstance(world, int) or world <= 1:
        return ""
    shard = meta.get("n_samples_local")
    of = f" of {shard} samples" if isinstance(shard, int) else ""
    return f" on rank {meta.get('rank', 0)}'s shard{of} (each of the {world} ranks reads its own)"


def _capped(meta: Mapping[str, Any]) -> str:
    """`` (N more cut by detector caps)`` when caps dropped directions before they became
    candidates (``meta["truncated"]``; s32 trial TRAIN #9: "53 candidates, 53 read" while 27 had
    been cut), else ""."""
    cut = sum(
        int(c["found"]) - int(c["kept"])
        for c in meta.get("truncated") or ()
        if c.get("of") != "generators"
    )
    return f" ({cut} more cut by detector caps: notes below)" if cut else ""


def truncation_notes(meta: Mapping[str, Any], code: Callable[[str], str] = str) -> list[str]:
    """One sentence per detector cap that cut candidates (``meta["truncated"]``), names set by
    ``code`` (`code_span` in the report, plain in the command line's text).

    >>> cut = {"layers": ["fc"], "detector": "kfac-A", "cap": 2, "found": 7, "kept": 2}
    >>> truncation_notes({"truncated": [cut]})
    ['kfac-A on fc found 7 directions and kept 2 (cap 2): the others were not read.']
    """
    lines = []
    for cut in meta.get("truncated") or ():
        where = f"{code(cut['detector'])} on {', '.join(map(code, cut['layers']))}"
        if cut.get("of") == "generators":
            lines.append(
                f"{where} keeps {cut['kept']} of its {cut['found']} gauge generators (cap "
                f"{cut['cap']}): candidates were tested against that part of the gauge span only."
            )
        else:
            lines.append(
                f"{where} found {cut['found']} directions and kept {cut['kept']} (cap "
                f"{cut['cap']}): the others were not read."
            )
    return lines


def reading_markdown(reading: Reading, *, title: str = "Reading", level: int = 2) -> str:
    """Markdown for ``reading`` under a heading of ``level`` (module docstring: the columns)."""
    if not isinstance(reading, Reading):
        raise TypeError(f"reading must be a Reading; got {type(reading).__name__}")
    if not isinstance(level, int) or not 1 <= level <= 5:
        raise ValueError(f"level must be an int in 1..5; got {level!r}")
    h = "#" * level
    meta = reading.meta
    out = [f"{h} {title}", ""]
    summary = [
        f"model `{meta.get('model', '?')}`",
        f"{meta.get('n_params', '?')} parameters",
        f"{meta.get('n_samples', '?')} probe samples",
        f"{meta.get('n_candidates', '?')} candidates, {meta.get('n_read', '?')} read"
        + _capped(meta),
        f"{meta.get('n_forward_passes', '?')} forward / "
        f"{meta.get('n_backward_passes', '?')} backward passes{_passes_scope(meta)}",
    ]
    out.append("; ".join(summary) + ".")
    source = meta.get("source")
    if isinstance(source, Mapping):
        named = [("weights", f) for f in source.get("model_files") or ()]  # a HF directory's
        named += [("checkpoint", source.get("checkpoint")), ("data", source.get("data"))]
        files = [
            f"{what} `{f['path']}` (SHA-256 {f['sha256'][:12]}…)"
            for what, f in named
            if isinstance(f, Mapping)
        ]  # the weights' hash too: retrained weights in one directory differ (s34 REPORT O3)
        said = "".join(f"; {x}" for x in files)
        out.append(f"Read: `--model {source.get('model')}`{said}.")
    if "critical_check" in meta:  # a reading from before the check has no key: nothing said
        out.append(critical_line(meta["critical_check"]))
    if meta.get("upcast_note"):
        out.append(f"Note: {meta['upcast_note']}.")
    if reading.note:
        out.append(f"Note: {reading.note}.")
    if meta.get("conv1d_as_linear"):
        out.append(
            f"Note: {len(meta['conv1d_as_linear'])} Hugging Face `Conv1D` modules were read as the "
            "equal `nn.Linear` (weight transposed)."
        )
    if meta.get("linear_subclass_as_linear"):
        out.append(
            f"Note: {len(meta['linear_subclass_as_linear'])} subclasses of `nn.Linear` were read "
            "as `nn.Linear` (their output on every probe sample equals x Wᵀ + b)."
        )
    if meta.get("multihead_as_projections"):
        out.append(
            f"Note: {len(meta['multihead_as_projections'])} `nn.MultiheadAttention` modules were "
            "read with separate projections (`q_proj`, `k_proj`, `v_proj`: the row blocks of "
            "`in_proj_weight`; `out_proj`), which compute the same outputs on every probe sample."
        )
    out += [f"Note: {line}" for line in truncation_notes(meta, code_span)]
    has_scan = any(r.baseline for r in reading.directions)
    index = {id(r): i for i, r in enumerate(reading.directions)}
    # units: where the direction sits in this layer, e.g. "out 2" (s20 trial AN, suggestion)
    header = ["#", "units", "detector", "class", "k", "k̂", "λ_dir", "ν(k)", "slope", "r²"]
    header.append("magnitude")
    header += ["window", "offset"]
    if has_scan:
        header.append("coord. scan")
    for layer, recs in reading.by_layer().items():
        out += ["", f"{h}# {code_span(layer or '<root>')}", ""]
        rows = []
        for r in recs:
            # a flat gauge keeps its plateau's fit but reads no order (s26 trial CNN #15)
            plateau = fit_format(r)
            row = [
                str(index[id(r)]),
                record_units(r.info, layer) or "—",
                r.detector,
                class_cell(r),
                fmt(r.k),
                plateau(r.k_hat, ".3f"),
                fmt(r.lambda_dir, ".4g"),
                fmt(r.nu_k, ".6f"),
                plateau(r.slope, ".3f"),
                plateau(r.r2, ".4f"),
                fmt(r.magnitude, ".3g"),
                _window(r),
                fmt(r.offset, ".2g") + ("†" if r.sweep.get("base_shift") else ""),
            ]
            if has_scan:
                row.append(scan_summary(r.baseline, layer))
            rows.append(row)
        out.append(table(header, rows))
    for note in class_footnotes(reading.directions):
        out += ["", note]
    if reading.directions:
        out += ["", COLUMNS_LEGEND + (SCAN_LEGEND if has_scan else "")]
    out += ["", f"{h}# Not covered", ""]
    if reading.not_covered:
        out.append(
            table(
                ["module", "type", "parameters", "reason"],
                [
                    [code_span(n.name or "<root>"), n.type, str(n.n_params), n.reason]
                    for n in reading.not_covered
                ],
            )
        )
    else:
        out.append("Every module with parameters is covered by a detector.")
    return "\n".join(out) + "\n"
