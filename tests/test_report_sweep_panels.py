"""Sweep panels of `plot_sweeps` (s13 user trial K #2-#5 and the panel titles).

* #2: a flat gauge whose F is constant to rounding got a collapsed y range (matplotlib divided by
  zero) and the panel lost its axes in the layout;
* #3: F ≡ 0 drew only the floor on matplotlib's default x range 1-10;
* #4: with 5-6 rows of panels the two-line title ran through the top row's panel titles;
* #5: every direction after the 24th was dropped silently, and the first 24 were mostly flat;
* a chain's panel named only its first layer.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from neuromanifold.report import figures
from neuromanifold.singular.reading import DirectionRecord, Reading
from test_report_figure_titles import LONG_TITLE, _captured, _record

#: the trial's sweep grid: 32 points log-spaced over four decades from 1e-5
GRID = [1e-5 * 10 ** (4 * i / 31) for i in range(32)]


def _flat(
    F: list[float],
    floor: float,
    *,
    t: list[float] = GRID,
    layers: tuple[str, ...] = ("fc",),
    detector: str = "kfac-A",
    klass: str = "flat_gauge",
) -> DirectionRecord:
    """A record without a rate fit (as a flat gauge is read) with sweep ``(t, F, floor)``."""
    return DirectionRecord(
        layers[0], layers, detector, None, None, None, None, None, klass, None, 0.0, None, 0.0,
        sweep={"t": list(t), "F": list(F), "floor": floor},
    )  # fmt: skip


def _one_panel(rec: DirectionRecord, tmp_path: Path, monkeypatch) -> tuple[Any, Any]:
    drawn = _captured(monkeypatch)
    figures.plot_sweeps(Reading((rec,), (), {}), tmp_path / "s.png", title="one")
    (fig,) = drawn
    (ax,) = [a for a in fig.axes if a.axison]
    return fig, ax


def test_a_constant_F_gets_a_finite_y_range_and_its_points(tmp_path: Path, monkeypatch) -> None:
    """Trial K #2: F constant to rounding (a ViT flat gauge: 11 distinct values within 3e-16)."""
    F = [1.7255848983103538e-28 + 5e-44 * (i % 11) for i in range(len(GRID))]
    floor = 5.0e-28
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # matplotlib's divide by zero
        fig, ax = _one_panel(_flat(F, floor), tmp_path, monkeypatch)
    box = ax.get_window_extent(fig.canvas.get_renderer())
    assert box.width > 0 and box.height > 0  # the panel keeps its axes in the layout
    lo, hi = ax.get_ylim()
    assert math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi
    # every point and the floor lie strictly inside the range
    assert lo < min(F) and max(F) < hi and lo < floor < hi
    drawn_points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert sum(len(ln.get_xdata()) for ln in drawn_points) == len(F)


def test_minor_tick_labels_of_a_narrow_range_get_the_panel_tick_size(
    tmp_path: Path, monkeypatch
) -> None:
    """A flat gauge just above its floor (the demo's ViT: F ≈ 5.5e-26, floor 4e-26) spans about
    one decade, which matplotlib labels with minor ticks: they were drawn at its default 10 pt,
    larger than the panel's title, while the major ticks had the panels' tick size."""
    _, ax = _one_panel(_flat([5.5e-26] * len(GRID), 4e-26), tmp_path, monkeypatch)
    minor = [lab for lab in ax.yaxis.get_ticklabels(minor=True) if lab.get_text()]
    assert minor  # this range is labelled by minor ticks
    shown = [lab for lab in ax.yaxis.get_ticklabels(which="both") if lab.get_text()]
    assert {lab.get_fontsize() for lab in shown} == {figures._TICK_FONTSIZE}


#: the widest padding of the x range past the sweep's grid the panel may add, as a factor on
#: each side (a third of a decade: the grid's ends stay where the reader looks for them)
X_PAD_MAX = 10 ** (1 / 3)


def _assert_x_range_is_the_grid(ax: Any, t: list[float]) -> None:
    lo, hi = ax.get_xlim()
    assert min(t) / X_PAD_MAX <= lo <= min(t) and max(t) <= hi <= max(t) * X_PAD_MAX, (lo, hi)


def _zero_marks(ax: Any) -> list[tuple[float, float]]:
    """The (t, y) of the marks drawn on the panel's lower edge."""
    lo = ax.get_ylim()[0]
    return [
        (float(x), float(y))
        for ln in ax.get_lines()
        if ln.get_marker() not in ("None", "", None, "o")
        for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True)
        if y == lo
    ]


def test_an_identically_zero_F_is_marked_on_the_sweep_grid(tmp_path: Path, monkeypatch) -> None:
    """Trial K #3: F ≡ 0 (a dead unit's incoming weights) drew the floor alone on t ∈ [1, 10]."""
    t = [2.2e-5 * 10 ** (4 * i / 31) for i in range(32)]  # the trial's MLP grid, 2.2e-5 … 0.22
    _, ax = _one_panel(_flat([0.0] * len(t), 2.05e-27, t=t), tmp_path, monkeypatch)
    _assert_x_range_is_the_grid(ax, t)
    assert sorted(x for x, _ in _zero_marks(ax)) == sorted(t)
    assert any(txt.get_text() == "F = 0 at every t" for txt in ax.texts)


def test_some_zeros_are_marked_at_their_t_and_the_x_range_is_the_grid(
    tmp_path: Path, monkeypatch
) -> None:
    F = [0.0 if i % 3 == 0 else 1e-10 * GRID[i] ** 2 for i in range(len(GRID))]
    _, ax = _one_panel(_flat(F, 1e-27), tmp_path, monkeypatch)
    _assert_x_range_is_the_grid(ax, GRID)
    assert sorted(x for x, _ in _zero_marks(ax)) == sorted(
        t for t, f in zip(GRID, F, strict=True) if f == 0
    )
    n_zero = sum(f == 0 for f in F)
    assert any(txt.get_text() == f"F = 0 at {n_zero} of {len(F)} t" for txt in ax.texts)


@pytest.mark.parametrize("n", [8, 24])
@pytest.mark.parametrize("title", ["planted", LONG_TITLE])
def test_the_title_block_clears_every_panel_title(
    n: int, title: str, tmp_path: Path, monkeypatch
) -> None:
    """Trial K #4: with 6 rows of panels the key line ran through the top row's panel titles."""
    drawn = _captured(monkeypatch)
    reading = Reading(tuple(_record(f"fc{i}") for i in range(n)), (), {})
    figures.plot_sweeps(reading, tmp_path / "s.png", title=title)
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    head = fig._suptitle.get_window_extent(renderer)  # the title and the key, one text
    assert fig.bbox.y0 <= head.y0 and head.y1 <= fig.bbox.y1
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == n
    for ax in panels:
        for box in (ax.title.get_window_extent(renderer), ax.get_window_extent(renderer)):
            assert not head.overlaps(box), (ax.get_title(), head, box)


def _mixed_reading() -> Reading:
    """30 records: 20 flat gauges first (as the ViT's record order had them), then ten with a
    measured order or none, interleaved over the classes; each named by its layer."""
    flats = [_flat([1e-28] * 32, 1e-27, layers=(f"flat{i}",)) for i in range(20)]
    klasses = ["curved_gauge", "unresolved", "genuine_singularity", "live"] * 3
    others = [
        _flat([1e-6] * 32, 1e-27, layers=(f"{k}{i}",), klass=k) for i, k in enumerate(klasses[:10])
    ]
    return Reading(tuple(flats + others), (), {})


def test_dropped_directions_are_flat_gauges_and_are_counted(tmp_path: Path, monkeypatch) -> None:
    """Trial K #5: the first 24 records (mostly flat gauges) were kept and the rest dropped
    without a word."""
    drawn = _captured(monkeypatch)
    reading = _mixed_reading()
    figures.plot_sweeps(reading, tmp_path / "s.png", title="vit")
    (fig,) = drawn
    shown = [ax.get_title().split(" · ")[0] for ax in fig.axes if ax.axison]
    assert len(shown) == figures.MAX_SWEEP_PANELS < len(reading.directions)
    # every record that is not a flat gauge is shown, by class priority, in record order within
    # a class; the flat gauges fill the rest in record order
    # (a panel's title starts with its record's number #i, the index in reading.directions)
    expected = [
        f"#{i} {r.layer}"
        for klass in ("genuine_singularity", "live", "curved_gauge", "unresolved")
        for i, r in enumerate(reading.directions)
        if r.klass == klass
    ] + [f"#{i} {r.layer}" for i, r in enumerate(reading.directions) if r.klass == "flat_gauge"]
    assert shown == expected[: figures.MAX_SWEEP_PANELS]
    head = " ".join(fig._suptitle.get_text().split())
    note = f"showing {figures.MAX_SWEEP_PANELS} of {len(reading.directions)} directions"
    # plot_sweeps is also called on its own, without a report: the note names none
    assert note in head and "flat gauges are left out first" in head and "report" not in head


def test_a_reading_that_fits_says_nothing_about_dropped_directions(
    tmp_path: Path, monkeypatch
) -> None:
    drawn = _captured(monkeypatch)
    figures.plot_sweeps(Reading((_record("fc1"),), (), {}), tmp_path / "s.png", title="one")
    (fig,) = drawn
    assert "showing" not in fig._suptitle.get_text()


def test_report_md_says_how_many_directions_the_sweeps_figure_shows(
    tmp_path: Path, monkeypatch
) -> None:
    from neuromanifold.report import write_report

    monkeypatch.setattr(figures, "save_png", lambda fig, path: Path(path))
    reading = _mixed_reading()
    files = write_report(reading, tmp_path / "out", title="vit")
    lines = files.markdown.read_text().splitlines()
    link = lines.index("![sweeps](figures/sweeps.png)")
    n, total = figures.MAX_SWEEP_PANELS, len(reading.directions)
    assert f"showing {n} of {total} directions" in lines[link + 1]
    # a reading that fits gets no such line
    files = write_report(Reading((_record("fc1"),), (), {}), tmp_path / "one", title="one")
    assert "showing" not in files.markdown.read_text()


def test_a_chain_panel_names_all_its_layers_and_the_detector(tmp_path: Path, monkeypatch) -> None:
    """Trial K (smaller observation): a chain's panel named only its first layer, so the chains
    1+3+5 and 1+3 both read "1 · duality"."""
    drawn = _captured(monkeypatch)
    vit = ("blocks.0.attn.q_proj", "blocks.0.attn.k_proj")
    recs = (
        _flat([1e-6] * 32, 1e-27, layers=("1", "3", "5"), detector="duality", klass="live"),
        _flat([1e-6] * 32, 1e-27, layers=("1", "3"), detector="duality", klass="live"),
        _flat([1e-6] * 32, 1e-27, layers=vit, detector="qk-rotation", klass="curved_gauge"),
    )
    figures.plot_sweeps(Reading(recs, (), {}), tmp_path / "s.png", title="chains")
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.axison]
    heads = [ax.get_title().split("\n")[0] for ax in panels]
    assert len(set(heads)) == len(recs)  # the chains are told apart
    renderer = fig.canvas.get_renderer()
    for ax, head, rec in zip(panels, heads, recs, strict=True):
        assert head.endswith(f" · {rec.detector}")
        for layer in rec.layers:  # every layer is named, at least by its last component
            assert layer.split(".")[-1] in head
        # the title line stays within its panel's width
        assert ax.title.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width


def test_demo_report_says_how_many_sweeps_it_shows(tmp_path: Path, monkeypatch) -> None:
    """The demo's report.md carries the same note as `write_report` under a sweeps figure that
    leaves directions out (it carried none; the demo's ViTs read 43 directions)."""
    from neuromanifold.demo_result import DemoConfig, DemoResult, ModelRead
    from neuromanifold.report.demo_report import demo_markdown

    def model(n: int) -> ModelRead:
        recs = tuple(_record(f"fc{i}") for i in range(n))
        return ModelRead(
            name="vit", stage="scratch", task="digits", checkpoint="c.safetensors",
            metrics={"val_accuracy": 0.9, "val_loss": 0.3}, reading=Reading(recs, (), {}),
            spectra={}, cached=True, read_s=1.0,
        )  # fmt: skip

    many = figures.MAX_SWEEP_PANELS + 6
    result = DemoResult(
        config=DemoConfig(),
        cells=[],
        models={"vit-digits-scratch": model(many), "vit-digits-finetune": model(3)},
        optimizers=[],
        rows=[],
    )
    names = ("vit-digits-scratch-sweeps", "vit-digits-finetune-sweeps")
    md = demo_markdown(result, {name: f"figures/{name}.png" for name in names})
    note = figures.sweeps_note(figures.MAX_SWEEP_PANELS, many)
    assert md.count(note) == 1 and f"{figures.MAX_SWEEP_PANELS} of {many}" in note
    assert md.index(note) > md.index("figures/vit-digits-scratch-sweeps.png")
    assert md.index(note) < md.index("figures/vit-digits-finetune-sweeps.png")


def test_long_layer_lists_are_cut_to_the_panel_limit() -> None:
    """s13 audit B #5: the last fallback (`first+…+last (n layers)`) ignored the limit, and
    Llama-style chains gave 68–75-character titles that ran into their neighbours."""
    chains = [
        ("model.layers.3.mlp.down_proj", "model.layers.4.self_attn.v_proj",
         "model.layers.4.self_attn.o_proj"),
        ("model.layers.10.mlp.down_proj", "model.layers.11.self_attn.q_proj"),
        ("model.embed_tokens.weight_that_is_very_long_indeed_and_longer",),
    ]  # fmt: skip
    labels = [figures._layers_label(c) for c in chains]
    limit = figures._PANEL_LAYERS_CHARS
    assert all(len(label) <= limit for label in labels), labels
    assert len(set(labels)) == len(labels)
    for chain, label in zip(chains, labels, strict=True):  # both ends stay readable
        body = label.removesuffix(f" ({len(chain)} layers)")
        assert body.startswith(chain[0][: limit // 4]) and body.endswith(chain[-1][-limit // 4 :])
