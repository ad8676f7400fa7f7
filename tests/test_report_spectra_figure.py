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
    drawn = _captured(monkeypatch)
    spectra = {"fc": {"A": [1.0, 0.5], "G": [1.0], "A_kernel": 0, "G_kernel": 0}}
    figures.plot_spectra(spectra, tmp_path / "s.png", blocks=["other"])
    (fig,) = drawn
    assert " ".join(figures.SPECTRA_EMPTY.split()) in _texts(fig)
