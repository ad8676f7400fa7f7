"""The class map (`figures.plot_class_map`) says what it counts (s15 user trial S #6: the
planted MLP's one `0+2` duality chain showed as two genuine singularities, under a caller's title
that replaced the description, with unlabelled axes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from neuromanifold.report import figures
from neuromanifold.singular.reading import Reading
from test_report_figure_titles import _captured, _record, _words


def _class_map(reading: Reading, title: str, tmp_path: Path, monkeypatch) -> tuple[Any, Any]:
    drawn = _captured(monkeypatch)
    figures.plot_class_map(reading, tmp_path / "classes.png", title=title)
    (fig,) = drawn
    (ax,) = [a for a in fig.axes if a.get_images()]
    return fig, ax


def test_a_chain_counts_under_each_layer_and_the_figure_says_so(
    tmp_path: Path, monkeypatch
) -> None:
    chain = dataclasses.replace(_record("0"), layers=("0", "2"))
    reading = Reading(directions=(chain,), not_covered=(), meta={})
    title = "read: zoo:planted-mlp, output family: gaussian"
    fig, ax = _class_map(reading, title, tmp_path, monkeypatch)
    (image,) = ax.get_images()
    counts = np.asarray(image.get_array())
    genuine = figures.CLASSES.index("genuine_singularity")
    # the one direction is counted under each of its two layers ...
    assert counts[:, genuine].tolist() == [1, 1]
    assert counts.sum() == len(chain.layers)
    # ... and the figure says what a cell counts, under the caller's title kept whole
    heading = _words(fig._suptitle.get_text())
    assert heading.startswith(title)
    assert _words(figures.CLASS_MAP_KEY) in heading
    assert "counts under each of its layers" in figures.CLASS_MAP_KEY
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("class", "layer")


def test_without_a_title_the_key_is_the_title(tmp_path: Path, monkeypatch) -> None:
    reading = Reading(directions=(_record("fc1"),), not_covered=(), meta={})
    fig, ax = _class_map(reading, "", tmp_path, monkeypatch)
    assert _words(fig._suptitle.get_text()) == _words(figures.CLASS_MAP_KEY)
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("class", "layer")


def test_a_root_parameter_row_is_labelled_root(tmp_path: Path, monkeypatch) -> None:
    """s32 trial TRAIN #7: a ViT's cls_token/pos_embed records (layer "") had a blank row label,
    where the markdown and the CLI say ``<root>``."""
    reading = Reading(
        directions=(dataclasses.replace(_record("0"), layers=("",)), _record("fc1")),
        not_covered=(),
        meta={},
    )
    _, ax = _class_map(reading, "", tmp_path, monkeypatch)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["<root>", "fc1"]
