"""Report figures keep their whole title inside the figure (trial B #8: a long title, as the CLI
passes, ran off both edges of a small figure and the spectra key was cut off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from neuromanifold.report import figures
from neuromanifold.singular.reading import DirectionRecord, Reading

# the title `neuromanifold read` passes for a model with no family (trial B #8)
LONG_TITLE = (
    "read: mymodels:mlp_relu_dead, output family: gaussian (the default: --family was not "
    "given and the model names none; pass --family categorical for a classifier)"
)
SPECTRA_KEY = figures.SPECTRA_KEY


def _record(layer: str, klass: str = "genuine_singularity") -> DirectionRecord:
    """A genuine-looking order-2 record on ``layer`` (F = t² on a five-point grid)."""
    ts = [10.0**e for e in (-3.0, -2.5, -2.0, -1.5, -1.0)]
    return DirectionRecord(
        layer=layer,
        layers=(layer,),
        detector="duality",
        k=2,
        k_hat=2.0,
        slope=2.0,
        r2=1.0,
        magnitude=1.0,
        klass=klass,
        window=(ts[0], ts[-1]),
        offset=0.0,
        gauge_overlap=None,
        ratio=None,
        sweep={"t": ts, "F": [t * t for t in ts], "floor": 1e-12},
    )


READING = Reading(directions=(_record("fc1"), _record("fc2")), not_covered=(), meta={})
SPECTRA = {
    name: {"A": [1.0, 0.1, 1e-17], "G": [1.0, 1e-16], "A_kernel": 1, "G_kernel": 1}
    for name in ("fc1", "fc2")
}
PLOTS = {
    "sweeps": lambda path, title: figures.plot_sweeps(READING, path, title=title),
    "spectra": lambda path, title: figures.plot_spectra(SPECTRA, path, title=title),
    "classes": lambda path, title: figures.plot_class_map(READING, path, title=title),
}


def _words(text: str) -> str:
    return " ".join(text.split())


def _captured(monkeypatch) -> list[Any]:
    """Figures handed to `figures.save_png`, drawn with the Agg renderer instead of saved."""
    drawn: list[Any] = []

    def capture(fig: Any, path: str | Path) -> Path:
        fig.canvas.draw()
        drawn.append(fig)
        return Path(path)

    monkeypatch.setattr(figures, "save_png", capture)
    return drawn


def _drawn_texts(plot: Any, title: str, tmp_path: Path, monkeypatch) -> tuple[Any, list[Any]]:
    """The figure ``plot`` saves, drawn with the Agg renderer, and its visible texts."""
    drawn = _captured(monkeypatch)
    plot(tmp_path / "figure.png", title)
    (fig,) = drawn
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_visible()]
    return fig, [t for t in texts if t.get_text().strip()]


def _assert_inside_and_clear(fig: Any, text: Any) -> None:
    """``text`` lies inside the figure and overlaps no visible panel."""
    renderer = fig.canvas.get_renderer()
    box, frame = text.get_window_extent(renderer), fig.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)
    assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
    for ax in fig.axes:
        if ax.axison:
            assert not box.overlaps(ax.get_window_extent(renderer)), text.get_text()


@pytest.mark.parametrize("name", list(PLOTS))
def test_a_long_title_is_wrapped_inside_the_figure(name: str, tmp_path: Path, monkeypatch) -> None:
    fig, texts = _drawn_texts(PLOTS[name], LONG_TITLE, tmp_path, monkeypatch)
    (title,) = [t for t in texts if _words(LONG_TITLE) in _words(t.get_text())]
    assert "\n" in title.get_text()  # wrapped: one line is wider than these figures
    _assert_inside_and_clear(fig, title)
    if name == "spectra":
        (key,) = [t for t in texts if SPECTRA_KEY in _words(t.get_text())]
        _assert_inside_and_clear(fig, key)


@pytest.mark.parametrize("name", list(PLOTS))
def test_a_short_title_is_not_wrapped(name: str, tmp_path: Path, monkeypatch) -> None:
    fig, texts = _drawn_texts(PLOTS[name], "planted", tmp_path, monkeypatch)
    (title,) = [t for t in texts if t.get_text().split("\n")[0] == "planted"]
    _assert_inside_and_clear(fig, title)


@pytest.mark.parametrize("title", ["planted", LONG_TITLE])
def test_the_spectra_title_clears_the_panels_of_many_blocks(
    title: str, tmp_path: Path, monkeypatch
) -> None:
    """24 blocks (6 rows): with a plain ``tight_layout()`` the title and the key ran through the
    top row's panel titles (as the sweeps figure's did, trial K #4)."""
    spectra = {f"blocks.{i}.mlp.fc1": SPECTRA["fc1"] for i in range(24)}
    fig, _ = _drawn_texts(
        lambda path, t: figures.plot_spectra(spectra, path, title=t), title, tmp_path, monkeypatch
    )
    renderer = fig.canvas.get_renderer()
    head = fig._suptitle.get_window_extent(renderer)  # the title and the key, one text
    assert fig.bbox.y0 <= head.y0 and head.y1 <= fig.bbox.y1
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == 24
    for ax in panels:
        for box in (ax.title.get_window_extent(renderer), ax.get_window_extent(renderer)):
            assert not head.overlaps(box), (ax.get_title(), head, box)


#: tight_layout leaves the tick labels, axis labels and panel title of a 3-inch panel cell
#: at least this much of its height (measured 2.0-2.2 in with the title counted once)
MIN_AXES_HEIGHT_IN = 1.8


@pytest.mark.parametrize("n", [1, 2, 24])
@pytest.mark.parametrize("which", ["sweeps", "spectra"])
def test_the_panels_keep_their_size_below_the_title(
    which: str, n: int, tmp_path: Path, monkeypatch
) -> None:
    """s14 audit P #3: the title's height was taken off the panels twice (the layout rectangle
    and tight_layout's own room for the suptitle): one panel kept 0.64 of its 3 inches under a
    176-pixel blank band."""
    drawn = _captured(monkeypatch)
    if which == "sweeps":
        reading = Reading(tuple(_record(f"fc{i}") for i in range(n)), (), {})
        figures.plot_sweeps(reading, tmp_path / "f.png", title=LONG_TITLE)
    else:
        spectra = {f"blocks.{i}.fc": SPECTRA["fc1"] for i in range(n)}
        figures.plot_spectra(spectra, tmp_path / "f.png", title=LONG_TITLE)
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == n
    heights = [ax.get_position().height * fig.get_figheight() for ax in panels]
    assert min(heights) >= MIN_AXES_HEIGHT_IN, heights
