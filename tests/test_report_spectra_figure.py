"""The spectra figure (`figures.plot_spectra`) on degenerate and clamped inputs (s15 user trial S
#2-#4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuromanifold.report import figures
from test_report_figure_titles import _captured


def _texts(fig: Any) -> list[str]:
    """The non-empty visible texts of ``fig``, whitespace collapsed."""
    found = fig.findobj(lambda a: hasattr(a, "get_text") and a.get_visible())
    return [" ".join(t.get_text().split()) for t in found if t.get_text().strip()]


def test_an_empty_spectra_figure_says_there_is_no_block(tmp_path: Path, monkeypatch) -> None:
    """Trial S #4: a LayerNorm-only model has no K-FAC block; the figure was a title and the key
    over a blank area."""
    drawn = _captured(monkeypatch)
    figures.plot_spectra({}, tmp_path / "s.png", title="read: ln_only")
    (fig,) = drawn
    (ax,) = fig.axes
    assert not ax.axison  # no empty frame drawn as if data were missing from it
    message = " ".join(figures.SPECTRA_EMPTY.split())
    assert [" ".join(t.get_text().split()) for t in ax.texts] == [message]
    words = " ".join(_texts(fig))
    assert "read: ln_only" in words
    assert "red ○" not in words  # no key to marks that are not drawn


def test_blocks_naming_no_block_of_the_spectra_say_so(tmp_path: Path, monkeypatch) -> None:
    """s15 audit U #8: the message blamed the model ("no supported Linear or Conv layer") when
    only the requested block names were absent."""
    drawn = _captured(monkeypatch)
    spectra = {"fc": {"A": [1.0, 0.5], "G": [1.0], "A_kernel": 0, "G_kernel": 0}}
    figures.plot_spectra(spectra, tmp_path / "s.png", blocks=["other"])
    (fig,) = drawn
    texts = _texts(fig)
    assert " ".join(figures.SPECTRA_NONE_ASKED.split()) in texts
    assert " ".join(figures.SPECTRA_EMPTY.split()) not in texts


def _panel(spectra: dict[str, Any], tmp_path: Path, monkeypatch) -> Any:
    drawn = _captured(monkeypatch)
    figures.plot_spectra(spectra, tmp_path / "s.png", title="planted")
    (fig,) = drawn
    (ax,) = [a for a in fig.axes if a.axison]
    return ax


def _points(ax: Any, marker: str) -> list[tuple[float, float, Any]]:
    """``(x, y, line)`` of every drawn point with ``marker``."""
    return [
        (float(x), float(y), ln)
        for ln in ax.get_lines()
        if ln.get_marker() == marker
        for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True)
    ]


def test_zero_ratios_are_marked_as_zeros_at_the_floor(tmp_path: Path, monkeypatch) -> None:
    """Trial S #2: planted-MLP block 0's G ends in an exact 0, drawn as 1e-18 on the lower spine
    (its near-kernel circle cut in half) like block 2's true ratio 3.9e-17; a positive ratio
    below 1e-18 was clamped to 1e-18 too."""
    A = [1.0, 0.2, 3.9e-17, 1e-20]
    G = [1.0, 0.3, 0.0, 0.0, 0.0]
    ax = _panel({"0": {"A": A, "G": G, "A_kernel": 2, "G_kernel": 3}}, tmp_path, monkeypatch)
    lo, hi = ax.get_ylim()
    # every positive ratio is drawn at its value, strictly inside the panel
    dots = _points(ax, ".")
    assert sorted(y for _, y, _ in dots) == sorted(r for r in A + G if r > 0)
    assert all(lo < y < hi for _, y, _ in dots)
    # the zeros are triangles at the floor, at their indices, labelled as drawn at the floor
    zeros = _points(ax, "v")
    assert sorted(x for x, _, _ in zeros) == [i + 1 for i, r in enumerate(G) if r == 0]
    assert {y for _, y, _ in zeros} == {lo}
    assert {ln.get_label() for _, _, ln in zeros} == {"G = 0 (drawn at floor)"}
    assert "G: 3 ratios = 0" in ax.get_title()
    # the near-kernel circles: on the positive ratios at their values, on the zeros at the
    # floor, drawn whole (not clipped at the lower spine)
    circles = _points(ax, "o")
    assert sorted(y for _, y, _ in circles) == sorted([3.9e-17, 1e-20, lo, lo, lo])
    assert all(not ln.get_clip_on() for y, _, ln in circles if y == lo)
    assert "▼ on the lower edge: a ratio of exactly 0 (drawn at the floor" in figures.SPECTRA_KEY


def test_a_spectrum_without_zeros_gets_no_zero_marks(tmp_path: Path, monkeypatch) -> None:
    A, G = [1.0, 0.1, 1e-9], [1.0, 0.5]
    ax = _panel({"fc": {"A": A, "G": G, "A_kernel": 1, "G_kernel": 0}}, tmp_path, monkeypatch)
    assert _points(ax, "v") == [] and ax.get_title() == "fc"
    lo, _ = ax.get_ylim()
    assert lo < 1e-9  # the smallest ratio lies inside the panel


def test_no_legend_covers_the_near_kernel(tmp_path: Path, monkeypatch) -> None:
    """Trial S #3: a legend fixed at the lower left covered 2 of the 6 near-kernel circles of a
    G shorter than A (the ViT demo's blocks.1.mlp.fc2: G 32 ratios, A 129)."""
    A = [10 ** (-12 * i / 99) for i in range(100)]
    G = [1.0, 0.4, 0.1, 0.05, 1e-17, 3e-18, 0.0, 0.0, 0.0, 0.0]
    spectra = {"blocks.1.mlp.fc2": {"A": A, "G": G, "A_kernel": 0, "G_kernel": 6}}
    drawn = _captured(monkeypatch)
    figures.plot_spectra(spectra, tmp_path / "s.png", title="vit")
    (fig,) = drawn
    renderer = fig.canvas.get_renderer()
    (ax,) = [a for a in fig.axes if a.axison]
    boxes = [leg.get_window_extent(renderer) for leg in (ax.get_legend(), *fig.legends) if leg]
    points = [
        ln.get_transform().transform((x, y))
        for ln in ax.get_lines()
        for x, y in zip(ln.get_xdata(), ln.get_ydata(), strict=True)
        if ln.get_marker() not in ("None", "", None)
    ]
    assert len(points) == len(A) + len(G) + 6  # the ratios and the six circles
    assert not [p for p in points for b in boxes if b.contains(*p)]
    # the key names each factor's colour as drawn
    for which, (colour, word) in figures._SPECTRA_COLOURS.items():
        (line,) = [ln for ln in ax.get_lines() if ln.get_label() == which]
        assert line.get_color() == colour
        assert f"{word}: {which} (" in figures.SPECTRA_KEY
