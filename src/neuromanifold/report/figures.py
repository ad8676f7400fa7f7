"""PNG views of a read: log–log sweeps, A/G spectra with the near-kernel, a class map by layer.

matplotlib (Agg backend) is imported inside each function; every PNG is written atomically
(`neuromanifold.report._atomic`), so a failed write leaves an older figure intact.

* `plot_sweeps`: one log–log panel per direction, ``F_u(t)`` (y axis) against t (x axis), the
  floor dashed, points at or below ten times the floor greyed, the selected window shaded and
  the line ``c_k·t^{2(k−1)}`` (the fit's magnitude and order) drawn over it, exact zeros of F
  as triangles on the lower edge; the title carries this key.
* `plot_spectra`: per block, the eigenvalue ratios ``α_i/α_max`` of ``A`` and ``γ_j/γ_max`` of
  ``G`` (descending, log scale; `neuromanifold.report.spectra.block_spectra`) with the
  detector's near-kernel (ratio below ``1e-3`` with a decade gap) marked in red, ratios of
  exactly 0 as triangles on the lower edge.
* `plot_class_map`: a layer × class matrix of direction counts (a multi-layer direction counts
  under each of its layers, as the title says), each count drawn in white on a dark cell and in
  black on a light one (`_text_colour`).

Each figure's title is wrapped (`textwrap`) into lines that fit the figure's width, and the
figure grows by the lines added (`_fit_title`), so a long title (the CLI's names the model and
the output family) is never cut at the figure's edges; the sweep panels are laid out below the
drawn title, the figure growing by its height (`_layout_below`), so it covers no panel's title.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neuromanifold.report._atomic import atomic_write
from neuromanifold.report.spectra import SPREAD_TAU
from neuromanifold.singular.detectors.near_kernel import GAP
from neuromanifold.singular.reading import DirectionRecord, Reading

__all__ = [
    "CLASSES",
    "CLASS_MAP_KEY",
    "MAX_SWEEP_PANELS",
    "SPECTRA_EMPTY",
    "SPECTRA_KEY",
    "plot_class_map",
    "plot_spectra",
    "plot_sweeps",
    "save_png",
    "sweep_panels",
    "sweeps_note",
]

CLASSES = ("genuine_singularity", "curved_gauge", "flat_gauge", "live", "unresolved")
MAX_SWEEP_PANELS = 24
"""The most panels `plot_sweeps` draws by default."""
#: the order in which `sweep_panels` fills the panels: records with a measured order (or whose
#: order the read could not settle) before flat gauges, whose F is flat at the floor; a class
#: not named here comes before the flat gauges
_PANEL_PRIORITY = {"genuine_singularity": 0, "live": 1, "curved_gauge": 2, "unresolved": 3}
_FLAT_PRIORITY = 5
#: fraction of the figure's width a title line may take (the rest is the side margins)
_TITLE_WIDTH = 0.94
_TITLE_FONTSIZE = 9
_LINE_SPACING = 1.2  # matplotlib's default text line spacing, in units of the font size
#: resolution of the sweep and class-map PNGs; a sweep panel of `_SWEEP_PANEL` inches is then
#: about 400 × 330 px (at dpi 90 and 3.2 × 2.5 in it was 288 × 238 px with 6-pt ticks: too small)
_DPI = 110
_SWEEP_PANEL = (3.6, 3.0)
_TICK_FONTSIZE = 7
_LABEL_FONTSIZE = 8
#: relative luminance (WCAG 2) below which white text contrasts more than black:
#: ``(1 + 0.05) / (L + 0.05) = (L + 0.05) / (0 + 0.05)`` at ``L = √(1.05 · 0.05) − 0.05``
_DARK_LUMINANCE = math.sqrt(1.05 * 0.05) - 0.05
#: the colour of each factor's ratios in `plot_spectra`, and its name in `SPECTRA_KEY`
_SPECTRA_COLOURS = {"A": ("tab:blue", "blue"), "G": ("tab:green", "green")}
SPECTRA_KEY = (
    f"K-FAC factor eigenvalue ratios, {_SPECTRA_COLOURS['A'][1]}: A (inputs), "
    f"{_SPECTRA_COLOURS['G'][1]}: G (output gradients); "
    f"red ○: detected near-kernel, the ratios below τ = {SPREAD_TAU:g} (dotted) that a gap of "
    f"at least {math.log10(GAP):g} decade (consecutive ratios ×{GAP:g} apart) separates from all "
    f"larger ratios; ratios below τ with no such gap above them are not marked; "
    f"▼ on the lower edge: a ratio of exactly 0 (drawn at the floor, not at a value)"
)
"""The key that ends the title of `plot_spectra`'s figure. It states the whole near-kernel rule
(`neuromanifold.singular.detectors.near_kernel`, spec §6.2: below τ *and* a ``GAP`` margin): with
"its threshold τ" alone, ratios far below the dotted line without a circle looked like misses
(s17 trial AF #3)."""
SPECTRA_EMPTY = "no K-FAC blocks to draw\n(no supported Linear or Conv layer)"
"""What `plot_spectra`'s figure says when it has no block to draw."""
SPECTRA_NONE_ASKED = "no K-FAC blocks to draw\n(none of the requested blocks has spectra)"
"""What it says when ``blocks`` names none of the spectra's blocks (s15 audit U #8)."""
CLASS_MAP_KEY = (
    "directions read per layer and class "
    "(a direction spanning several layers counts under each of its layers)"
)
"""The line that ends the title of `plot_class_map`'s figure: what a cell counts."""
_SWEEP_KEY = (
    "x: t, y: F_u(t) (log–log); dashed: floor; grey: points ≤ 10 × floor; "
    "shaded: rate window; orange line: fit c_k·t^(2(k−1)); "
    "triangles on the lower edge: F = 0 exactly"
)


def _mark_at_edge(
    ax: Any,
    xs: Sequence[float],
    y: float,
    *,
    marker: str = "v",
    ms: float = 4,
    color: str = "dimgrey",
    label: str | None = None,
) -> None:
    """Markers at height ``y`` (a panel's lower edge) for values a log axis cannot show (zeros),
    unclipped so that they are drawn whole; ``label`` names them in a legend."""
    ax.plot(
        list(xs), [y] * len(xs), ls="none", marker=marker, ms=ms, color=color, clip_on=False,
        label=label,
    )  # fmt: skip


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: str | Path) -> Path:
    """Save ``fig`` as PNG to ``path`` atomically and close it."""
    plt = _plt()
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))
    finally:
        plt.close(fig)


def _fit_title(fig: Any, text: str, *, fontsize: float = _TITLE_FONTSIZE) -> Any:
    """Set ``text`` as ``fig``'s suptitle, wrapped to fit the figure's width, and return it.

    Each line of ``text`` is wrapped (`textwrap.wrap`, at spaces only: ``--family`` and
    ``near-kernel`` stay whole) at the largest width in characters whose drawn title is at most
    ``_TITLE_WIDTH`` of the figure's width, measured with the figure's renderer (a word longer
    than a line is split); the figure's height grows by the lines the wrapping added, so the
    panels keep their size under the taller title.
    """
    renderer = fig.canvas.get_renderer()
    limit = _TITLE_WIDTH * fig.bbox.width
    paragraphs = text.split("\n")
    width = max(1, *(len(p) for p in paragraphs))
    while True:
        lines = [
            line
            for p in paragraphs
            for line in (textwrap.wrap(p, width, break_on_hyphens=False) or [""])
        ]
        title = fig.suptitle("\n".join(lines), fontsize=fontsize)
        drawn = title.get_window_extent(renderer).width
        if drawn <= limit or width <= 1:
            break
        # shrink in proportion to the overflow (at least one character), then re-measure
        width = max(1, min(width - 1, int(width * limit / drawn)))
    added = len(lines) - len(paragraphs)
    if added > 0:
        fig.set_figheight(fig.get_figheight() + added * _LINE_SPACING * fontsize / 72)
    return title


def _layout_below(
    fig: Any, head: Any, panels_height: float, *, gap: float = 0.5 * _TITLE_FONTSIZE
) -> None:
    """Lay out ``fig``'s panels (their titles included) below its drawn title ``head``.

    The figure's height becomes ``panels_height`` inches plus the rendered height of ``head``,
    ``gap`` points and the title's top margin, so the panels keep their size; `tight_layout`
    then fills the part below ``head``'s box less ``gap``. With only ``tight_layout()`` a title
    and key overlapped the top row's panel titles once the sweeps (or spectra) figure had 5-6 rows
    of panels (user trial K #4).
    """
    renderer = fig.canvas.get_renderer()
    _, y = head.get_position()  # the suptitle's anchor, in figure fractions (top-aligned)
    head_in = head.get_window_extent(renderer).height / fig.dpi
    gap_in = gap / 72
    height = (panels_height + head_in + gap_in) / y
    fig.set_figheight(height)
    box = head.get_window_extent(fig.canvas.get_renderer())
    top = (box.y0 - gap_in * fig.dpi) / fig.bbox.height
    # the rectangle already ends below the title: tight_layout must not reserve room for the
    # suptitle a second time (it did, and a one-panel figure kept 0.64 of its 3 inches)
    head.set_in_layout(False)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, top))


def _relative_luminance(rgba: Sequence[float]) -> float:
    """WCAG 2 relative luminance ``0.2126 R + 0.7152 G + 0.0722 B`` of linearised sRGB."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _text_colour(rgba: Sequence[float]) -> str:
    """``"white"`` on a cell of colour ``rgba`` darker than `_DARK_LUMINANCE`, else ``"black"``:
    the one of the two with the larger WCAG contrast ratio against the cell."""
    return "white" if _relative_luminance(rgba) < _DARK_LUMINANCE else "black"


#: factor by which a sweep panel's y range extends past the smallest and the largest positive
#: value it draws (points, floor, fit line): a constant F still gets a range of ``_Y_PAD²``
_Y_PAD = 3.0


def _y_limits(values: Sequence[float]) -> tuple[float, float]:
    """Log-axis limits ``(min/_Y_PAD, max·_Y_PAD)`` over the finite positive ``values``.

    Set explicitly because matplotlib's autoscale collapses on a constant F (a flat gauge's F is
    constant to rounding: the range came out ~1e-14 relative, matplotlib divided by zero and the
    panel lost its axes); ``(1/_Y_PAD, _Y_PAD)`` when there is no positive value.
    """
    pos = [v for v in values if math.isfinite(v) and v > 0]
    if not pos:
        return 1.0 / _Y_PAD, _Y_PAD
    return min(pos) / _Y_PAD, max(pos) * _Y_PAD


#: factor by which a sweep panel's x range extends past the sweep's grid on each side (a 20th of
#: a decade, so the end points are not cut in half)
_X_PAD = 10 ** (1 / 20)


def _x_limits(ts: Sequence[float]) -> tuple[float, float] | None:
    """``(min t/_X_PAD, max t·_X_PAD)`` over the finite positive grid ``ts``; ``None`` if empty."""
    pos = [t for t in ts if math.isfinite(t) and t > 0]
    return (min(pos) / _X_PAD, max(pos) * _X_PAD) if pos else None


def _zero_note(n_zero: int, n: int) -> str:
    """The in-panel text of a sweep with ``n_zero`` exact zeros among ``n`` values."""
    return "F = 0 at every t" if n_zero == n else f"F = 0 at {n_zero} of {n} t"


#: the longest layer list a sweep panel's title shows in full, in characters (at 8 pt a
#: `_SWEEP_PANEL` panel's title line holds about 55, and the detector follows the layers)
_PANEL_LAYERS_CHARS = 38


def _layers_label(layers: Sequence[str], limit: int = _PANEL_LAYERS_CHARS) -> str:
    """A record's layers for its panel title: joined with ``+``; if longer than ``limit``, their
    common dotted prefix once (``blocks.0.attn.{q_proj+k_proj}``); if still longer, the first
    and the last with the count (``a+…+z (5 layers)``); whatever is still longer is cut in its
    middle (`_cut_middle`), so a label never exceeds ``limit``."""
    joined = "+".join(layers)
    if len(joined) <= limit:
        return joined
    if len(layers) < 2:
        return _cut_middle(joined, limit)
    parts = [name.split(".") for name in layers]
    common = 0
    while all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
        common += 1
    if common:
        rests = "+".join(".".join(p[common:]) for p in parts)
        label = ".".join(parts[0][:common]) + ".{" + rests + "}"
        if len(label) <= limit:
            return label
    count = f" ({len(layers)} layers)"
    return _cut_middle(f"{layers[0]}+…+{layers[-1]}", limit - len(count)) + count


def _cut_middle(text: str, limit: int) -> str:
    """``text`` shortened to ``limit`` characters by an ellipsis in its middle (both ends, where
    module names differ most, stay)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def _grid(n: int) -> tuple[int, int]:
    cols = min(4, max(1, n))
    return math.ceil(n / cols), cols


def sweep_panels(reading: Reading, max_panels: int = MAX_SWEEP_PANELS) -> list[DirectionRecord]:
    """The records `plot_sweeps` draws: at most ``max_panels`` of ``reading.directions``, by
    class (`_PANEL_PRIORITY`: genuine singularity, live, curved gauge, unresolved, then any
    other class, flat gauges last), in the records' order within a class."""

    def priority(r: DirectionRecord) -> int:
        if r.klass == "flat_gauge":
            return _FLAT_PRIORITY
        return _PANEL_PRIORITY.get(r.klass, _FLAT_PRIORITY - 1)

    return sorted(reading.directions, key=priority)[: max(0, max_panels)]  # sorted is stable


def sweeps_note(shown: int, total: int) -> str:
    """What the sweeps figure and report say when ``shown`` of ``total`` directions are drawn
    (``""`` when all are). It names no report: `plot_sweeps` is also called on its own."""
    if shown >= total:
        return ""
    return f"showing {shown} of {total} directions (flat gauges are left out first)"


def plot_sweeps(
    reading: Reading, path: str | Path, *, title: str = "", max_panels: int = MAX_SWEEP_PANELS
) -> Path:
    """Log–log sweeps of at most ``max_panels`` directions (module docstring).

    The panels are `sweep_panels`: records with a measured order first, flat gauges last; when
    directions are left out the title says how many are shown (`sweeps_note`). A panel's title
    starts with the record's number ``#i`` (its index in ``reading.directions``: the ``#`` column
    of the report's tables) and names its layers (`_layers_label`) and the detector.

    Each panel's axes are labelled (x: ``t``, y: ``F_u(t)``), the dashed floor line carries the
    label ``floor`` and the figure's title ends with `_SWEEP_KEY`, which says what each mark is.
    The y range is set from the panel's positive values (`_y_limits`), so a constant F is drawn;
    the x range is the sweep's grid (`_x_limits`). An exact zero of F (no place on a log axis) is
    marked by a triangle on the panel's lower edge at its t, and the panel says how many there are
    (``F = 0 at every t`` for a direction along which F vanishes identically, `_zero_note`).
    """
    plt = _plt()
    recs = sweep_panels(reading, max_panels)
    index = {id(r): i for i, r in enumerate(reading.directions)}  # the records' report numbers
    rows, cols = _grid(max(1, len(recs)))
    w, h = _SWEEP_PANEL
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), dpi=_DPI, squeeze=False)
    for ax in axes.flat[len(recs) :]:
        ax.axis("off")
    if not recs:
        axes[0, 0].text(0.5, 0.5, "no directions read", ha="center", va="center")
    for ax, r in zip(axes.flat, recs, strict=False):
        ts, fs = r.sweep.get("t", []), r.sweep.get("F", [])
        floor = float(r.sweep.get("floor", 0.0) or 0.0)
        tw: list[float] = []
        fit: list[float] = []
        if r.window is not None and r.magnitude is not None and r.k is not None:
            tw = [t for t in ts if r.window[0] <= t <= r.window[1]]
            fit = [r.magnitude * t ** (2 * (r.k - 1)) for t in tw]
        # scales and limits before anything is drawn: adding a line to an axis whose autoscaled
        # range has collapsed (a constant F) already divides by zero
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(*_y_limits([*fs, floor, *fit]))
        xlim = _x_limits(ts)
        if xlim is not None:
            ax.set_xlim(*xlim)
        above = [(t, f) for t, f in zip(ts, fs, strict=True) if f > 10 * floor and f > 0]
        below = [(t, f) for t, f in zip(ts, fs, strict=True) if 0 < f <= 10 * floor]
        if above:
            ax.loglog(*zip(*above, strict=True), "o", ms=2.5, color="tab:blue")
        if below:
            ax.loglog(*zip(*below, strict=True), "o", ms=2.5, color="lightgrey")
        if floor > 0:
            ax.axhline(floor, ls="--", lw=0.7, color="grey", label="floor")
        zeros = [t for t, f in zip(ts, fs, strict=True) if f == 0]
        if zeros:
            _mark_at_edge(ax, zeros, ax.get_ylim()[0], marker="^", ms=5)
            note = _zero_note(len(zeros), len(fs))
            ax.text(0.5, 0.08, note, transform=ax.transAxes, ha="center", va="bottom", fontsize=7)
        if r.window is not None:
            ax.axvspan(*r.window, color="tab:orange", alpha=0.15)
        if fit:
            ax.loglog(tw, fit, "-", lw=1.2, color="tab:orange")
        k = "—" if r.k_hat is None else f"{r.k_hat:.2f}"
        r2 = "—" if r.r2 is None else f"{r.r2:.3f}"
        where = _layers_label(r.layers or (r.layer,))
        ax.set_title(
            f"#{index[id(r)]} {where} · {r.detector}\n{r.klass}, k̂={k}, r²={r2}", fontsize=8
        )
        ax.set_xlabel("t", fontsize=_LABEL_FONTSIZE, labelpad=1)
        ax.set_ylabel("$F_u(t)$", fontsize=_LABEL_FONTSIZE, labelpad=1)
        # minor ticks too: a range under about a decade is labelled by them
        ax.tick_params(which="both", labelsize=_TICK_FONTSIZE)
    note = sweeps_note(len(recs), len(reading.directions))
    head = _fit_title(fig, "\n".join(p for p in (title, note, _SWEEP_KEY) if p))
    _layout_below(fig, head, rows * h)
    return save_png(fig, path)


#: the top of a spectra panel's y range: above the largest ratio, 1
_SPECTRA_TOP = 2.0
#: factor by which a spectra panel's y range extends below the smallest positive ratio (or the
#: threshold τ, if lower): one decade, so the smallest ratio is drawn clear of the lower edge,
#: where the ratios equal to 0 are marked
_SPECTRA_PAD = 10.0


def _spectra_floor(ratios: Sequence[float]) -> float:
    """The lower y limit of a spectra panel: ``min(positive ratios, SPREAD_TAU) / _SPECTRA_PAD``.

    Set from the panel's own ratios, so every positive ratio is drawn at its value (a fixed
    ``1e-18`` had drawn a ratio of 0 at 1e-18, on the lower spine, next to true ratios of
    3.9e-17, and clamped any smaller positive ratio to it).
    """
    pos = [float(r) for r in ratios if math.isfinite(r) and r > 0]
    return min([*pos, SPREAD_TAU]) / _SPECTRA_PAD


def plot_spectra(
    spectra: Mapping[str, Mapping[str, Any]],
    path: str | Path,
    *,
    title: str = "",
    blocks: Sequence[str] | None = None,
) -> Path:
    """A and G eigenvalue ratios per block with the detected near-kernel (module docstring).

    ``spectra`` is `block_spectra` of the factors (`kfac_factors` of the read's model and probe
    set): descending ratios; the smallest ``A_kernel``/``G_kernel`` of them are marked. A ratio
    of exactly 0 (an eigenvalue clamped at 0: no place on the log axis) is not drawn as a value:
    it is a triangle ▼ on the panel's lower edge (`_spectra_floor`, a decade below the smallest
    positive ratio), the key says it is drawn at the floor and the panel's title counts them
    (``G: 28 ratios = 0``). The panels carry no legend, which could cover their marks: the
    title's key (`SPECTRA_KEY`) names the colours and marks. With no
    block to draw (a model without Linear or Conv layers, or ``blocks`` naming none of
    ``spectra``) the figure says so (`SPECTRA_EMPTY`, `SPECTRA_NONE_ASKED`) instead of showing
    an empty area.
    """
    plt = _plt()
    names = list(spectra) if blocks is None else [b for b in blocks if b in spectra]
    rows, cols = _grid(max(1, len(names)))
    w, h = _SWEEP_PANEL
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), dpi=_DPI, squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    if not names:
        empty = SPECTRA_NONE_ASKED if spectra else SPECTRA_EMPTY
        axes[0, 0].text(0.5, 0.5, empty, ha="center", va="center", wrap=True)
    for ax, name in zip(axes.flat, names, strict=False):
        s = spectra[name]
        ax.set_yscale("log")
        lo = _spectra_floor([*s["A"], *s["G"]])
        ax.set_ylim(lo, _SPECTRA_TOP)
        zero_counts = []
        for which, (colour, _) in _SPECTRA_COLOURS.items():
            ratios = [float(r) for r in s[which]]
            xs = list(range(1, len(ratios) + 1))
            pos = [(x, r) for x, r in zip(xs, ratios, strict=True) if r > 0]
            zero = [x for x, r in zip(xs, ratios, strict=True) if r == 0]
            if pos:
                ax.semilogy(*zip(*pos, strict=True), ".-", ms=3, lw=0.8, color=colour, label=which)
            if zero:
                zero_counts.append(f"{which}: {len(zero)} ratio{'s' * (len(zero) > 1)} = 0")
                _mark_at_edge(ax, zero, lo, color=colour, label=f"{which} = 0 (drawn at floor)")
            n_kern = int(s[f"{which}_kernel"])
            if n_kern:
                # a zero's circle sits on the lower edge: unclipped, so it is drawn whole
                ys = [r if r > 0 else lo for r in ratios[-n_kern:]]
                ax.plot(
                    xs[-n_kern:], ys, ls="none", marker="o", ms=5, mfc="none", color="red",
                    clip_on=False,
                )  # fmt: skip
        ax.axhline(SPREAD_TAU, ls=":", lw=0.8, color="grey")
        ax.set_title("\n".join([name, ", ".join(zero_counts)]) if zero_counts else name, fontsize=8)
        ax.set_xlabel("eigenvalue index (descending)", fontsize=_LABEL_FONTSIZE, labelpad=1)
        # α, not λ: λ is the learning coefficient in every other figure and table (as
        # optimizers.png names the same ratios; s34 trial DEMO O7)
        ax.set_ylabel("α_i / α_max", fontsize=_LABEL_FONTSIZE, labelpad=1)
        ax.tick_params(which="both", labelsize=_TICK_FONTSIZE)
        # no legend in the panel: the title's key names the colours and marks (a legend fixed
        # at the lower left covered a short factor's near-kernel, the marks the figure is for)
    # with nothing drawn there is no mark to explain: the key gives way to the figure's subject
    key = SPECTRA_KEY if names else "K-FAC factor eigenvalue ratios"
    head = _fit_title(fig, f"{title}\n{key}" if title else key)
    _layout_below(fig, head, rows * h)
    return save_png(fig, path)


def plot_class_map(reading: Reading, path: str | Path, *, title: str = "") -> Path:
    """Layer × class matrix of direction counts (a chain counts under each of its layers).

    A cell is the number of directions of that class with a layer in that row
    (`Reading.by_layer`), so a direction spanning several layers (a duality, norm-scale,
    qk-pair or qk-rotation chain) counts once in each of its rows and a column's sum can
    exceed the class's number of directions. The figure says so: its title is ``title`` (if any)
    followed by `CLASS_MAP_KEY`, and the axes are labelled ``class`` and ``layer``. Each
    non-zero count is drawn in the colour (`_text_colour`) that contrasts with its cell's colour
    in the colormap.
    """
    plt = _plt()
    by_layer = reading.by_layer()
    layers = list(by_layer) or ["(none)"]
    counts = [
        [sum(r.klass == c for r in by_layer.get(layer, [])) for c in CLASSES] for layer in layers
    ]
    fig, ax = plt.subplots(figsize=(6.0, 0.35 * len(layers) + 1.6), dpi=_DPI)
    image = ax.imshow(counts, aspect="auto", cmap="Blues", vmin=0)
    for i, row in enumerate(counts):
        for j, v in enumerate(row):
            if v:
                colour = _text_colour(image.cmap(image.norm(v)))
                ax.text(j, i, str(v), ha="center", va="center", fontsize=8, color=colour)
    ax.set_xticks(range(len(CLASSES)), [c.replace("_", "\n") for c in CLASSES], fontsize=7)
    ax.set_yticks(range(len(layers)), [layer or "<root>" for layer in layers], fontsize=7)
    ax.set_xlabel("class", fontsize=_LABEL_FONTSIZE)
    ax.set_ylabel("layer", fontsize=_LABEL_FONTSIZE)
    _fit_title(fig, f"{title}\n{CLASS_MAP_KEY}" if title else CLASS_MAP_KEY)
    fig.tight_layout()
    return save_png(fig, path)
